"""Compile or not: a training step (`compile_for_training`), a gradient-free pass
(`compile_for_inference`) or a generation loop's one-token step (`compile_for_decode`) under
`torch.compile`, kept only where it measured faster here.

Inductor fuses what eager PyTorch runs as separate kernels (LayerNorm, GELU, bias and residual
adds, softmax, the copies around attention). Whether that pays depends on the machine, the model and
the precision: the same small ViT's step can run faster compiled in fp32 and slower compiled in
bf16, and a larger model's step no faster at all (measured: docs/results.md, 'Measurements behind
the code's choices'). A compile costs time too, so it is measured only where the calls to come
could repay it (`REPAY`), and a record is used only where they do. Forced:
`ANYFORMER_PLAN=compile=...`, `anyformer train --compile`.
The compile done for the measurement is not wasted: the compiled module is handed back ready.
Dropout stays comparable: the compiled module draws its random numbers through eager's kernels
(inductor's `fallback_random`), so the same seed gives the same masks in both candidates.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn
from torch.utils import _pytree as pytree

from ..runtime import allowed_cpus, unpinned
from . import choices
from .choices import Decision, register
from .inductor_cache import keep_apart
from .planner import planner
from .store import entry_key

# A smaller margin than the kernels': the numerics are checked, the compile time is counted, and the
# timed steps are many (a 5-8% gain is real on a small ViT but within a 10% margin's noise).
COMPILE = register(Decision("compile", ("eager", "compiled", "graphs"), "a training step, (pass=inference) a "
                            "gradient-free pass, or (pass=decode) a one-token generation step: eager or torch.compile "
                            "(inductor), on CUDA also with CUDA graphs (a training step); compile time counted",
                            margin=0.05))

# Measuring costs a compile. It is spent only on a run whose eager time is at least REPAY times
# what a compile took on this machine before (the slowest on record), or FIRST_COMPILE_S before any:
# finding out costs at most about 1/REPAY of the run. By device: on a CPU a first compile is long,
# and can be spent only to learn that compiled is slower. On a GPU a small step is bound by launching
# its kernels one by one (the Python and dispatch cost of a step that a CPU hides), which a compile
# with CUDA graphs removes, so there the rule is ski rental's own: measure once the eager run would
# cost a compile (the answer is recorded, and serves every later run of the shape). Other devices go
# by the CPU's. (measured: docs/results.md, 'Measurements behind the code's choices')
FIRST_COMPILE_S = {"cpu": 60.0, "cuda": 20.0}
REPAY = {"cpu": 8.0, "cuda": 1.0}
# Under a time budget a compile is paid out of the budget: it buys steps only if the share of a step it
# saves exceeds the share of the budget it takes, B (1 - t_compiled / t_eager) > compile. BUDGET_GAIN is
# about the share compiling saved small ViTs' fp32 steps; a run is measured only if this much of its
# budget would repay the compile (the default 9-minute budget does not)
# (measured: docs/results.md, 'Measurements behind the code's choices').
BUDGET_GAIN = 0.1
BUDGET_S = 2.0          # timing rounds after the compile, calls that are not training (up to 9 rounds)
# A one-token generation step is a small graph, compiled in a fraction of a whole training step's
# time. Its first compile is estimated at this before one is on record
# (measured: docs/results.md, 'Measurements behind the code's choices').
FIRST_DECODE_COMPILE_S = 15.0
_SEED = 20_240_601      # the same random draws (dropout, noise) in every candidate's call


@dataclass
class CompileChoice:
    """What `compile_for_training`, `compile_for_inference` or `compile_for_decode` settled: the module
    (or function) to run the steps or passes with, the choice, and one line saying why (for the log)."""

    module: nn.Module | Callable[..., Any]
    choice: str
    why: str


def compile_for_training(module: nn.Module, step_loss: Callable[[nn.Module], Tensor], *,
                         fields: Mapping[str, Any], steps: int | None = None, tolerance: float = 1e-3,
                         device: torch.device | str = "cpu", seconds: float | None = None) -> CompileChoice:
    """`module`, or `torch.compile(module)`, whichever the plan finds faster for the training step
    `step_loss(m) -> scalar loss` (forward under the caller's autocast; this adds the backward). On
    CUDA a third candidate, "graphs", compiles with CUDA graphs (inductor's `triton.cudagraphs`, what
    mode="reduce-overhead" sets): one launch replays the forward, one the backward, where a small
    model's step is otherwise bound by launching its kernels one by one.

    `fields` name the step in the plan file (the model, the batch shape, the precision); `steps`:
    how many steps the run will take (None: no compile-time accounting); `seconds`: the wall time the
    run has left under a time budget, out of which a compile is paid (`BUDGET_GAIN`). The numerics check (loss
    and gradients, eager against compiled) leaves the global RNG and the gradients as they were. The
    timed calls are step_loss's forward and backward, never the run's own steps (a step taken with a
    candidate would make the weights depend on what the machine's timings cache held)."""
    device = torch.device(device)
    variants = {"compiled": _Compiled(module)}  # torch.compile (and its imports) only when used
    if device.type == "cuda":
        variants["graphs"] = _Compiled(module, cudagraphs=True)
    params = [q for q in module.parameters() if q.requires_grad]
    runs = {"eager": _candidate(lambda: module, step_loss, params, device),
            **{n: _candidate(c.get, step_loss, params, device, c.first_call) for n, c in variants.items()}}
    return _settle(module, variants, runs, fields, steps, "steps", device, tolerance, "forward+backward",
                   seconds=seconds)


def compile_for_inference(module: nn.Module, forward: Callable[[nn.Module], Tensor], *,
                          fields: Mapping[str, Any], calls: int | None = None, tolerance: float = 1e-4,
                          device: torch.device | str = "cpu") -> CompileChoice:
    """`module`, or `torch.compile(module)`, whichever the plan finds faster for gradient-free passes
    `forward(m) -> output` (timed and checked under `torch.inference_mode`, the module in whatever
    mode the caller left it: eval, usually). The record is the training step's decision, keyed
    `pass=inference` besides `fields`. `calls`: how many such passes the caller will make, against
    which the compile time is counted (None: no accounting, e.g. a server that runs for days).
    The compiled module is meant to be called under inference_mode, as it was measured."""
    device = torch.device(device)
    variants = {"compiled": _Compiled(module)}
    runs = {"eager": _inference(lambda: module, forward, device),
            "compiled": _inference(variants["compiled"].get, forward, device, variants["compiled"].first_call)}
    return _settle(module, variants, runs, {**fields, "pass": "inference"}, calls, "passes", device, tolerance,
                   "inference passes")


def compile_for_decode(step: Callable[..., Tensor], call: Callable[[Callable[..., Tensor]], Tensor],
                       eager: Callable[[], Tensor], *, fields: Mapping[str, Any], tokens: int | None,
                       tolerance: float = 1e-4, device: torch.device | str = "cpu") -> CompileChoice:
    """`torch.compile(step)` (static shapes), or `step` unchanged, for a generation loop's one-token
    steps: `call(f)` runs one step with f (the compiled `step`), `eager()` the same step the stock way
    (the model's own forward). Both must be repeatable: the caller resets its cache before each call.

    The record is the compile decision's, keyed `pass=decode` besides `fields`. `tokens`: the steps
    that the compile is to be paid back over. Like a JIT compiler, pass all the steps this model has
    taken in this process so far plus those asked now: then the compile is measured (and later used)
    once the eager steps already taken cost as much as a compile of this kind does here (the
    ski-rental rule: never more than twice the cost of the better choice in hindsight), not on the
    first short request. None: no accounting (a server that runs for days). On CUDA the step is
    compiled with CUDA graphs (`mode="reduce-overhead"`): one launch replays the whole step, where a
    one-token step's dozens of small kernels would each cost a launch; the caller keeps the inputs
    it writes in place at static addresses (`torch._dynamo.mark_static_address`)."""
    device = torch.device(device)
    # fullgraph: a graph break would leave parts of the step eager and slow, silently; it raises instead,
    # and the candidate is dropped.
    graphs = {"cudagraphs": True} if device.type == "cuda" else {}
    compiled = _Compiled(step, dynamic=False, fullgraph=True, **graphs)
    # No seeding and no forked RNG: the step draws no random numbers, and a server's other requests
    # may be sampling from the global generator meanwhile.
    runs = {"eager": _inference(lambda: step, lambda _: eager(), device, seed=False),
            "compiled": _inference(compiled.get, call, device, compiled.first_call, seed=False)}
    return _settle(step, {"compiled": compiled}, runs, {**fields, "pass": "decode"}, tokens, "steps", device,
                   tolerance, "decode steps")


def _settle(module: nn.Module | Callable[..., Any], variants: dict[str, "_Compiled"],
            runs: dict[str, Callable[[], tuple]], fields: Mapping[str, Any], count: int | None, unit: str,
            device: torch.device, tolerance: float, what: str, *, seconds: float | None = None) -> CompileChoice:
    """The decision every kind of pass shares: forced, cached (if the compile repays), or measured
    (if the `count` calls to come could repay `repay` compiles), with the numerics checked. `runs`:
    each candidate's call, "eager" first; `variants`: the compiled ones' modules. Under a time budget
    of `seconds`, the calls to come are those that fit in it, and a compile is measured only if
    `BUDGET_GAIN` of the budget would repay it. The compile is estimated from the slowest on record
    of its kind (a decode step's small graph, or any other), or the first-compile estimate. Each
    call in `runs` leaves the global RNG as it found it."""
    kind = device.type if device.type in REPAY else "cpu"
    decode = fields.get("pass") == "decode"
    repay = 1.0 if decode else REPAY[kind]

    def chosen(choice: str, why: str) -> CompileChoice:
        return CompileChoice(module if choice == "eager" else variants[choice].get(), choice, why)

    p = planner()
    forced = choices.forced_choice(p.forced()[0], COMPILE.name)
    if forced == "graphs" and forced not in runs:  # CUDA graphs are a training candidate, on CUDA
        if device.type != "cuda":
            return chosen("eager", "compile=graphs cannot run here (CUDA graphs need CUDA); eager")
        forced = "compiled"  # inference passes compile without them; decode steps always with them
    if forced == "eager":
        return chosen(forced, f"compile={forced} is forced")
    # One eager pass first, outside any measurement (inside one, the kernel decisions a model asks
    # for get the stock answer): the model's linear and attention choices are made now, and each
    # attention layer keeps its answer for the compiled graph to follow. It also warms up the
    # allocator and oneDNN's primitives, and keeps those decisions' timing out of the call timed below.
    runs["eager"]()
    if forced is not None:
        return chosen(forced, f"compile={forced} is forced")
    key = entry_key(COMPILE.name, fields)
    entry = p.entry(COMPILE.name, fields)
    recorded = [e["compile_s"] for e in p.records(COMPILE.name) if isinstance(e.get("compile_s"), (int, float))
                and (e.get("fields", {}).get("pass") == "decode") == decode]
    compile_s = max(recorded) if recorded else FIRST_DECODE_COMPILE_S if decode else FIRST_COMPILE_S[kind]
    if entry is None and seconds is not None and seconds * BUDGET_GAIN < compile_s:
        return chosen("eager", f"a {seconds:.0f} s time budget is too short to repay a compile "
                             f"(~{compile_s:.0f} s here) out of it; not measured")
    if entry is None and count is not None:
        call_s = _fastest_call_s(runs["eager"])
        if count * call_s < repay * compile_s:
            return chosen("eager", f"{count} {unit} of ~{call_s:.3g} s are too few to repay a "
                                 f"compile (~{compile_s:.0f} s here); not measured")

    def compile_time() -> dict[str, Any]:  # a compile that raised has no time to record: not a free one
        spent = [c.first_call["s"] for c in variants.values() if "s" in c.first_call]
        return {**({"compile_s": round(max(spent), 3)} if spent else {}), "timed": what}
    choice = p.decide(COMPILE.name, fields, lambda: runs, available=tuple(runs), tolerance=tolerance,
                      budget_s=max(p.budget_s, BUDGET_S), extra=compile_time)
    if choice == "eager":
        entry = p.entry(COMPILE.name, fields)
        return chosen("eager", _times(entry, _why_eager(entry)))
    entry = p.entry(COMPILE.name, fields) or {}
    measured_now = key in p.measured
    if (count is not None or seconds is not None) and not measured_now:  # the compile is still to be paid:
        times = entry.get("times", {})                                     # do the calls repay it?
        eager_s = times.get("eager", 0.0)
        if seconds is not None and eager_s > 0:  # the steps a budget holds (eager's, the fewer)
            count = min(count, int(seconds / eager_s)) if count is not None else int(seconds / eager_s)
        saved = (eager_s - times.get(choice, 0.0)) * (count or 0)
        cost = float(entry.get("compile_s", compile_s))
        if saved < cost:
            return chosen("eager", f"{choice} saves ~{saved:.0f} s over {count} {unit}, less than its "
                                 f"~{cost:.0f} s compile")
    measured = " (compiled while measuring)" if measured_now else ""
    return chosen(choice, _times(entry, f"{choice} measured faster{measured}"))


def _fastest_call_s(call: Callable[[], Any], *, calls: int = 3, spend_s: float = 1.0) -> float:
    """The fastest of up to `calls` timed calls, stopping once `spend_s` is spent: one call is a poor
    estimate. An emoji folder's step timed once at 161 ms or more (its run then averaged 110 ms a
    step) made the run look long enough to measure a compile, which took 94 s; the fastest of three
    (148 ms) did not (docs/results.md)."""
    times: list[float] = []
    while len(times) < calls and sum(times) < spend_s:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return min(times)


class _Compiled:
    """`torch.compile(module)`, made on first use: a run that stays eager never imports dynamo.
    `first_call["s"]`: the time of its first call as a candidate (the compile)."""

    def __init__(self, module: nn.Module | Callable[..., Any], **options: Any) -> None:
        self.module, self._compiled, self.options = module, None, options
        self.first_call: dict[str, float] = {}

    def get(self) -> nn.Module:
        if self._compiled is None:
            self._compiled = _compile(self.module, **self.options)
        return self._compiled


def _compile(module: nn.Module | Callable[..., Any], cudagraphs: bool = False, **options: Any) -> nn.Module:
    """torch.compile, drawing random numbers through eager's kernels (inductor's `fallback_random`);
    `cudagraphs`: what mode="reduce-overhead" sets (torch.compile takes a mode or options, not both)."""
    inductor = {"fallback_random": True, **({"triton.cudagraphs": True} if cudagraphs else {})}
    keep_apart()  # this processor's and instruction set's own cache folder (inductor_cache.py says why)
    _compile_on_every_core()
    return torch.compile(module, options=inductor, **options)


def _compile_on_every_core() -> None:
    """Inductor's compilers on every core the process may use, where OpenMP pinned the main thread to one
    (runtime.unpinned): inductor counts the cores it may use from that thread, found one, and compiled the
    generated C++ in it, one file after another, while tracing waited. With as many compile threads as cores,
    started (with its worker pool) from a widened thread, g++ runs beside the tracing (the nanoGPT recipe's
    training step on a 2-core Xeon: 26.3 s to compile, 22.0 s so, this setup included; docs/results.md).
    Once a process (inductor then has as many threads); TORCHINDUCTOR_COMPILE_THREADS, where set, is the
    user's to keep."""
    cores = allowed_cpus()
    if not cores or "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
        return
    with _POOL_LOCK:  # serve's lanes may compile at once: one setup, and no two barriers sharing the pool
        _start_compile_threads(min(32, len(cores)))  # inductor's own cap


def _start_compile_threads(threads: int) -> None:
    """Inductor's compile `threads` and its worker pool, started from a widened thread (unless it has as many)."""
    try:
        import torch._inductor.config as inductor_config
        from torch._inductor.async_compile import AsyncCompile, get_compile_threads
    except ImportError:  # an inductor whose internals moved: it compiles as it would have
        return
    if get_compile_threads() >= threads:
        return
    inductor_config.compile_threads = threads
    with unpinned():
        AsyncCompile.warm_pool()
        # The compile threads, started now: a thread keeps the cores of the thread that started it, and the
        # executor starts one for each task given it while the others are busy, up to its size.
        # (A bounded wait: a pool smaller than that would leave the barrier short, and the threads start anyway.)
        meet = threading.Barrier(threads, timeout=10.0)
        for started in [AsyncCompile.pool().submit(meet.wait) for _ in range(threads)]:
            with contextlib.suppress(threading.BrokenBarrierError):
                started.result()


_POOL_LOCK = threading.Lock()


def _why_eager(entry: Mapping[str, Any] | None) -> str:
    """Why a measured decision kept eager: it was the fastest, or nothing beat it by the decision's margin
    (a seed ViT's inference pass compiled at 81.4 ms against 83.7 eager stays out under the compile
    decision's 5%; "eager measured faster" said the opposite of its own figures)."""
    times = (entry or {}).get("times") or {}
    eager = times.get("eager")
    quicker = [n for n, t in times.items() if n != "eager" and eager is not None and t < eager]
    if not quicker:
        return "eager measured faster"
    margin = (entry or {}).get("margin")
    within = f"the plan's {margin:.0%} margin" if isinstance(margin, (int, float)) else "the plan's margin"
    return f"{' and '.join(quicker)} not faster by {within}"


def _times(entry: Mapping[str, Any] | None, text: str) -> str:
    if not entry or not entry.get("times"):
        return text
    shown = ", ".join(f"{n} {t * 1e3:.4g} ms" for n, t in entry["times"].items())
    if entry.get("dropped"):
        shown += "; dropped " + "; ".join(f"{n}: {why}" for n, why in entry["dropped"].items())
    return f"{text}: {shown}" + (f", compile {entry['compile_s']:.3g} s" if "compile_s" in entry else "")


def _candidate(module: Callable[[], nn.Module], step_loss: Callable[[nn.Module], Tensor], params: list[Tensor],
               device: torch.device, first_call: dict[str, float] | None = None) -> Callable[[], tuple]:
    """One training step's forward and backward with `module()`: returns the loss and the gradients
    (computed with autograd.grad, so nothing accumulates in the parameters' .grad)."""
    def body(m: nn.Module) -> tuple:
        with torch.enable_grad():
            loss = step_loss(m)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        return (loss.detach(), *(g for g in grads if g is not None))
    return _seeded(module, body, device, first_call)


def _inference(module: Callable[[], nn.Module], forward: Callable[[nn.Module], Tensor], device: torch.device,
               first_call: dict[str, float] | None = None, seed: bool = True) -> Callable[[], tuple]:
    """One gradient-free pass with `module()` under inference_mode: returns its output(s)."""
    def body(m: nn.Module) -> tuple:
        with torch.inference_mode():
            out = forward(m)
        # Every tensor in what came back (a tuple, a dict, a ModelOutput), in a fixed order.
        return tuple(t for t in pytree.tree_leaves(out) if isinstance(t, Tensor))
    return _seeded(module, body, device, first_call, seed)


def _seeded(module: Callable[[], nn.Module], body: Callable[[nn.Module], tuple], device: torch.device,
            first_call: dict[str, float] | None, seed: bool = True) -> Callable[[], tuple]:
    """`body(module())`, synchronised, from the same random state each call, which leaves the run's
    own generators where they were (planning draws dropout and noise, but must not move the run's
    RNG); `seed=False`: for calls that draw no random numbers, nothing is seeded or forked. The first
    call's time (the compile, for a compiled candidate) goes into `first_call["s"]`; that call runs on every
    core the process may use (runtime.unpinned: the threads inductor starts for its compilers keep them)."""
    def run() -> tuple:
        compiling = first_call is not None and "s" not in first_call
        t0 = time.perf_counter()
        with (torch.random.fork_rng(devices=[device] if device.type == "cuda" else []) if seed
              else contextlib.nullcontext()), (unpinned() if compiling else contextlib.nullcontext()):
            if seed:
                torch.manual_seed(_SEED)
            out = body(module())
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if first_call is not None and "s" not in first_call:
            first_call["s"] = time.perf_counter() - t0
        return out
    return run
