"""The door's decoding half: which step runs a GPT's one-token steps, settled before it generates.

    plan.prepare_decode(gpt, batch=1, total=512)             # as a server: measured, compiled where faster
    plan.prepare_decode(gpt, 1, len(prompt) + n, steps=n - 1)  # one request: only if its steps repay a compile

`prepare_decode` measures the one-token step of a (batch, cache size) two ways and leaves the
answer with the model (`models/generation.py`'s `CompiledStep`), as `prepare` leaves its kernel
choices on the layers. First the eager step: the model's own forward, or on the CPU in fp32 its
blocks in one call of anyformer's own kernel (`decode_native.py`, the `decode` decision), which costs
no compile. Then whether to compile: measured against the eager step chosen, and compiled where
faster and the steps to come repay the compile. Generation then runs the step it finds and asks
nothing: no step is counted, timed or compiled while it generates. The step compiled is
`generation.next_logits`, the model's own forward over its static cache. A cached step computes one
position, so it is bound by memory: every weight is read once per token. On the CPU the planned
layers write the step's products as products and sums (`layers.rowwise_linear`, `attend.by_sums`),
which inductor fuses around one pass over each weight; on CUDA the step runs as a CUDA graph, SDPA
inside it, the cache at fixed addresses.
"""
from __future__ import annotations

import types
import warnings
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from ..models.generation import CompiledStep, Step, cache_length, compiled_steps, next_logits
from ..nn import KVCache
from . import choices
from .compiled import compile_for_decode
from .decisions.decode import decode_kernel, may_run_native
from .planner import planner

if TYPE_CHECKING:
    from ..models.gpt import GPT

__all__ = ["forget", "prepare_decode"]

# Where the static step is compiled and measured: inductor's C++ on the CPU, CUDA graphs on CUDA.
STATIC_DEVICES = ("cpu", "cuda")


def prepare_decode(model: "GPT", batch: int, total: int, steps: int | None = None) -> bool:
    """Settle now which step runs the one-token steps of `batch` prompts and `total` tokens in all (the
    window's most), for a cache of `cache_length(total)` positions: the eager forward or the native
    step (measured), then compiled where that measured faster still and the steps to come repay the
    compile. `steps`: how many one-token steps are to come, over which a compile must be repaid (a
    compile is measured only where they could repay it: the ski-rental rule); None: no accounting, as
    for a server that runs for days. True: `generate` runs them compiled.

    Settled once per (batch, cache size) while the model is prepared; forcing (`compile=eager`,
    `compile=compiled`, `decode=stock`, `decode=native`) applies here, not inside `generate`."""
    device = next(model.parameters()).device
    size, table = cache_length(model, total), compiled_steps(model)
    no_compile = choices.forced_choice(planner().forced()[0], "compile") == "eager"
    if device.type not in STATIC_DEVICES:
        table.pop((batch, size), None)
        return False
    settled = table.get((batch, size))
    if settled is not None and settled.kind == "compiled" and not no_compile:
        return True
    table.pop((batch, size), None)  # a native step is planned again: more steps to come may repay a compile
    if no_compile and not (device.type == "cpu" and may_run_native()):
        return False  # nothing to settle: the model's own forward, eager
    # Made outside inference mode, as generation's sampled tokens are: the graph's guards tell them apart.
    was_training, ids = model.training, torch.zeros(batch, 1, dtype=torch.long, device=device)
    model.eval()
    try:
        with torch.inference_mode():
            cache = model.new_cache(batch, size)
            next_logits(model, ids, cache)  # a one-token prompt: each candidate computes position 1
            eager = _plan_native(model, ids, cache)
            compiled = None if no_compile else _plan_decode(model, ids, cache, steps, eager or next_logits)
            cache.reset()
    finally:
        model.train(was_training)
    if compiled is not None:
        table[(batch, size)] = CompiledStep(static_step(compiled), [cache])
    elif eager is not None:
        table[(batch, size)] = CompiledStep(eager, [cache], kind="native")
    return compiled is not None


def forget(model: nn.Module) -> None:
    """The model's compiled steps dropped: it generates eagerly until `prepare_decode` settles again."""
    if hasattr(model, "new_cache"):
        compiled_steps(model).clear()


def fresh_step() -> Callable[..., Tensor]:
    """`next_logits` with a code object of its own. torch.compile keeps its graphs per code object and
    stops compiling a code object after a few recompiles (`recompile_limit`, 8), running it eagerly
    from then on: here that would be the slow product-and-sum form, unfused. With one code object
    per (model, batch, cache size) each compiles exactly one graph, however many a process makes."""
    f = next_logits
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def static_step(compiled: Callable[..., Tensor]) -> Step:
    """`compiled` (next_logits under torch.compile, for one token) behind the eager step's signature;
    several tokens (a prompt, a refill) run the eager forward. The caller keeps the position within the
    cache: the graph cannot check a tensor position (generation's loop does)."""
    def step(model: "GPT", ids: Tensor, cache: KVCache | None) -> Tensor:
        if ids.shape[1] != 1 or cache is None:
            return next_logits(model, ids, cache)
        if ids.is_cuda:
            _static_addresses(cache)
        out = compiled(model, ids, cache)
        # A CUDA graph's output lives in its memory pool, which its next replay overwrites.
        return out.clone() if out.is_cuda else out
    return step


def _static_addresses(cache: KVCache) -> None:
    """Mark the cache's tensors as static inputs of the compiled step. CUDA graphs replay fixed
    addresses: an input that is not marked is copied into the graph's own buffer, and one written in
    place (as the buffers and the position are) makes cudagraph trees skip the graph. Unguarded:
    another cache (another request's) has the graph recorded again, not recompiled; generation
    reuses one per size."""
    for t in (*cache.k, *cache.v, cache.position, cache.slots):
        torch._dynamo.mark_static_address(t)


def decode_tolerance(dtype: torch.dtype) -> float:
    """How far the compiled step's logits may differ from the eager step's, relative to the largest:
    a summation order's worth in float32; in half precision, where every fused or unfused rounding
    is one in 2^8 (bf16) or 2^11 (fp16), a few of those."""
    return max(1e-4, 8 * torch.finfo(dtype).eps)


def compute_dtype(model: "GPT", device: torch.device) -> torch.dtype:
    """The precision the step computes in: autocast's where it is on for the device, else the weights'."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def model_key(model: "GPT") -> str:
    """The shape of `model` as the plan file names it: what the compiled graph depends on."""
    c = model.config
    return (f"gpt-d{c.depth}-w{c.width}-h{c.heads}-m{c.mlp_hidden or 4 * c.width}-v{c.vocab_size}"
            f"-{c.position}-{c.activation}{'' if c.bias else '-nobias'}")


def plan_fields(model: "GPT", batch: int, cache: int) -> dict[str, object]:
    """The decode step's key in the plan file (`compile_for_decode` adds pass=decode)."""
    device = next(model.parameters()).device
    return dict(model=model_key(model), batch=batch, cache=cache,
                dtype=str(compute_dtype(model, device)).removeprefix("torch."), device=device.type)


def _plan_native(model: "GPT", ids: Tensor, cache: KVCache) -> Step | None:
    """The native step (`decode_native.NativeDecodeStep`) where the `decode` decision chose it for this
    batch and cache size (measured against the model's eager forward, from the position the cache
    stands at), else None: the eager forward. Offered for fp32 models on the CPU that it takes."""
    if ids.device.type != "cpu" or not may_run_native():
        return None
    from .decode_native import NativeDecodeStep, unsupported
    native = unsupported(model) is None  # builds the kernels on a machine's first use
    step = NativeDecodeStep(model) if native else None
    at = int(cache.position)

    def runs() -> dict[str, Callable[[], Tensor]]:
        def from_here(f: Step) -> Callable[[], Tensor]:
            def run() -> Tensor:
                with torch.inference_mode():  # the cache was made in it: only there may it be written
                    cache.position.fill_(at)
                    return f(model, ids, cache)
            return run
        return {"stock": from_here(next_logits), **({"native": from_here(step)} if step else {})}
    choice = decode_kernel(plan_fields(model, ids.shape[0], cache.max_len), runs, native,
                           decode_tolerance(compute_dtype(model, ids.device)))
    cache.position.fill_(at)
    return step if choice == "native" else None


def _plan_decode(model: "GPT", ids: Tensor, cache: KVCache, steps: int | None,
                 eager: Step = next_logits) -> Callable[..., Tensor] | None:
    """The compiled step for this batch and cache size, or None to stay with `eager` (measured or
    recorded faster, too few steps to repay a compile, or the compile failed). Every candidate call
    computes the position the cache stands at."""
    at = int(cache.position)

    def run_eager() -> Tensor:
        cache.position.fill_(at)
        return eager(model, ids, cache)

    def run_with(compiled: Callable[..., Tensor]) -> Tensor:
        cache.position.fill_(at)
        return static_step(compiled)(model, ids, cache)

    chosen = compile_for_decode(fresh_step(), run_with, run_eager, device=ids.device, tokens=steps,
                                fields=plan_fields(model, ids.shape[0], cache.max_len),
                                tolerance=decode_tolerance(compute_dtype(model, ids.device)))
    if chosen.choice != "compiled":
        return None
    try:  # compiled from a record of another process: the first call compiles, here and now
        run_with(chosen.module)
    except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler in this process: stay eager, and say so
        warnings.warn(f"the compiled decode step failed ({type(e).__name__}: {e}); generating eagerly",
                      RuntimeWarning, stacklevel=3)
        return None
    return chosen.module
