"""The speed plan: every choice made for speed is measured on the machine at hand and cached per
machine: a kernel that wins on one processor can lose on the next.

Its answers reach a model through one door, before the model runs:

    from anyformer import plan
    model = plan.prepare(model, example)     # swap in the plan's layers, choose for what `example` runs
    plan.prepare_decode(gpt, batch, total)    # a GPT's one-token steps compiled where faster, before it generates
    plan.unprepare(model)                     # the plain layers back

The decisions behind it, each asked once per shape (and cached per machine):

    plan.linear_kernel(rows, 768, 3072, torch.float32, training=True)   # "stock" | "onednn"
    plan.attention_kernel(B, H, Nq, Nk, D_h, dtype, causal, training)    # "fused" | "explicit" | "native"
    plan.sdpa_backend(B, H, Nq, Nk, D_h, dtype, causal, training)        # CUDA: "default" | "flash" | "cudnn" | ...
    plan.gelu_kernel(numel, "tanh", training)                             # "stock" | "native"
    plan.amp_dtype("cpu", width=384, hidden=1536)                         # "none" | "bf16"
    plan.adamw_impl(model.parameters())                                   # "foreach" | "fused"
    plan.linears_for_training(model, set_kernel, step_loss, fields=...)  # all of a step's linears at once
    plan.compile_for_training(model, step_loss, fields=..., steps=N)      # eager or torch.compile
    plan.compile_for_inference(model, forward, fields=..., calls=N)       # the same, for inference passes
    plan.compile_for_decode(step, call, eager, fields=..., tokens=N)      # a generation step's static graph

Forcing: `ANYFORMER_PLAN="linear=stock,attention=explicit"`, `ANYFORMER_PLAN=stock` (all stock,
nothing measured), or `plan.force(...)` / `with plan.forcing(...)` from Python, which replaces the
variable. `plan.configure(margin=0.1, budget_s=0.2, total_budget_s=60)` tunes the planner.
Floor 3: torch, numpy, the standard library, anyformer.files, nn and models; nn and models never
import it.
"""
from __future__ import annotations

from typing import Mapping

from .choices import ENV_PLAN, Decision, decision, decisions, register
from .decisions import adamw_impl, amp_dtype, attention_kernel, gelu_kernel, linear_kernel, sdpa_backend, sdpa_context
from .compiled import CompileChoice, compile_for_decode, compile_for_inference, compile_for_training
from .layers import set_training_kernel
from .prepare import prepare, unprepare, unprepared
from .decode import prepare_decode
from .kernels import onednn_linear, onednn_linear_op
from .linears import linears_for_training
from .host import machine, native_bf16
from .planner import Planner, max_error, planner, using
from .store import ENV_CACHE, plan_dir

__all__ = ["ENV_PLAN", "ENV_CACHE", "CompileChoice", "Decision", "Planner", "adamw_impl", "amp_dtype",
           "attention_kernel", "compile_for_decode", "compile_for_inference", "compile_for_training",
           "configure", "decision", "decisions", "force", "forcing", "gelu_kernel", "linear_kernel", "linears_for_training",
           "machine", "max_error", "native_bf16", "onednn_linear", "onednn_linear_op", "plan_dir", "planner",
           "prepare", "prepare_decode", "register", "reset", "sdpa_backend", "sdpa_context", "set_training_kernel",
           "unprepare", "unprepared", "using"]


def force(spec: str | Mapping[str, str] | None = None, **by_name: str):
    """Force choices in this process (replaces ANYFORMER_PLAN): `force("stock")`,
    `force(linear="stock")`; `force()` hands control back to the environment."""
    return planner().force(spec, **by_name)


def forcing(spec: str | Mapping[str, str] | None = None, **by_name: str):
    """`with forcing("stock"): ...`: forced inside the block only."""
    return planner().forcing(spec, **by_name)


def reset() -> None:
    """Re-read ANYFORMER_PLAN and the plan file at the next decision."""
    planner().reset()


def configure(*, margin: float | None = None, budget_s: float | None = None,
              total_budget_s: float | None = None) -> None:
    """Tune the process's planner: the winning margin, and the timing budgets per decision and
    per process. Cached timings are re-judged with the new margin; nothing is re-measured."""
    p = planner()
    for name, value in (("margin", margin), ("budget_s", budget_s), ("total_budget_s", total_budget_s)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"plan.configure: {name} must be a number >= 0, got {value!r}")
        setattr(p, name, float(value))
    p.reset()
