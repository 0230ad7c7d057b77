"""Which one-token step a GPT's generation takes, and what that decision keeps, beside the model
rather than on it (a deep copy of the model must not carry steps bound to the original): per model
and (batch, cache size), the compiled static step where the speed plan chose it, the one-token
steps taken so far (what a compile would be paid back over: the ski-rental rule), and a cache kept
for the next request. GPT.stream asks here; the step itself is gpt_decode.py's."""
from __future__ import annotations

import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from ..nn import KVCache, planned_kernels
from ..plan import choices, compile_for_decode, planner
from .gpt_decode import (Step, cache_length, compute_dtype, decode_tolerance, eager_step, fresh_decode_step,
                         plan_fields, static_decode_unsupported, static_step)

if TYPE_CHECKING:
    from .gpt import GPT

__all__ = ["compiled_decode", "count_steps", "decode_step", "keep_cache", "settle", "take_cache"]

# Per model, by (batch, cache size): the compiled decode functions (None: eager, settled), the
# one-token steps asked for, and a lock. The values must not hold the model, or it is never freed.
_DECODE_STEPS: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
_DECODE_TALLY: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
_DECODE_LOCKS: "weakref.WeakKeyDictionary[GPT, threading.Lock]" = weakref.WeakKeyDictionary()
# Per model, by (batch, cache size) whose compiled step is settled: a cache kept for the next request,
# so that the buffers a CUDA graph was recorded with keep their addresses (another cache would have
# it recorded again, a graph more each request). Memory: one cache per size the compiled step serves.
_STATIC_CACHES: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
# The tally's own lock, held for an addition only: a stream closed on a server's event loop must not
# wait for another request's compile (which holds the model's lock above). Re-entrant: a stream left
# to the garbage collector may close (and count) inside another's addition, on the same thread.
_TALLY_LOCK = threading.RLock()


def take_cache(model: GPT, batch: int, size: int, static: bool) -> list[KVCache]:
    """An empty cache for `batch` prompts and `size` positions: the one kept from an earlier request
    where the compiled step serves this size (`_STATIC_CACHES`), else a new one. Call in inference mode."""
    kept = _STATIC_CACHES.get(model, {}).pop((batch, size), None) if static else None
    if kept is None:
        return model.new_cache(batch, size)
    for c in kept:
        c.reset()
    return kept


def keep_cache(model: GPT, cache: list[KVCache]) -> None:
    """Keep `cache` for the next request of its size, if the compiled step serves that size and
    none is kept yet (concurrent requests take new ones)."""
    key = (cache[0].k.shape[0], cache[0].max_len)
    if _DECODE_STEPS.get(model, {}).get(key) is not None:
        _STATIC_CACHES.setdefault(model, {}).setdefault(key, cache)


def count_steps(model: GPT, key: tuple[int, int], steps: int) -> None:
    """Add `steps` one-token steps taken to the tally of a batch and cache size whose step is not
    settled yet: what a compile would have been paid back over (the ski-rental rule)."""
    if key in _DECODE_STEPS.get(model, {}):
        return
    with _TALLY_LOCK:
        tally = _DECODE_TALLY.setdefault(model, {})
        tally[key] = tally.get(key, 0) + steps


def compiled_decode(model: GPT, batch: int, total: int) -> bool:
    """Whether `generate` (and `stream`) now takes its one-token steps for `batch` prompts and
    `total` tokens in all through the compiled static graph: the speed plan chose it in this
    process (it does once the steps taken have cost about a compile, and it measured faster)."""
    return _DECODE_STEPS.get(model, {}).get((batch, cache_length(model, total))) is not None


def settle(model: GPT, batch: int, total: int) -> bool:
    """GPT.settle_decode: measure now (and compile where faster) the one-token step of `batch`
    prompts and `total` tokens, with no compile-time accounting; True where it runs compiled."""
    if static_decode_unsupported(model) is not None:
        return False
    device = next(model.parameters()).device
    with planned_kernels(model), torch.inference_mode():
        cache = model.new_cache(batch, cache_length(model, total))
        ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        model(ids, cache=cache, last_only=True)  # a one-token prompt: the step computes position 1
        decode_step(model, ids, cache, None)
    return compiled_decode(model, batch, total)


def decode_step(model: GPT, ids: Tensor, cache: list[KVCache], steps: int | None) -> Step:
    """The step for `steps` one-token calls from here: this model's eager forward, or its static
    graph compiled (gpt_decode.py) where the speed plan measured that faster and the steps this
    model has taken in this process (counted as they are taken: a request that stops early
    counts what it ran) and those asked now repay the compile; `steps=None`: measured now, as for
    a server (`settle`). Settled once per batch and cache size (asked again while the plan waits
    for the steps to repay a compile); the cache is left as it came."""
    eager = eager_step(model)
    if static_decode_unsupported(model) is not None or choices.forced_choice(
            planner().forced()[0], "compile") == "eager":
        return eager
    key = (ids.shape[0], cache[0].max_len)
    with _DECODE_LOCKS.setdefault(model, threading.Lock()):  # one plan and compile per key, however many callers
        memo = _DECODE_STEPS.setdefault(model, {})
        if key not in memo:
            with _TALLY_LOCK:
                taken = _DECODE_TALLY.get(model, {}).get(key, 0)
            compiled = _plan_decode(model, eager, ids, cache, None if steps is None else taken + steps)
            if compiled is not False:  # settled: compiled, or None for eager; False: not yet
                memo[key] = compiled
        compiled = memo.get(key)
    return eager if compiled is None else static_step(model, compiled)


def _plan_decode(model: GPT, eager: Step, ids: Tensor, cache: list[KVCache],
                 tally: int | None) -> Callable[..., Tensor] | None | bool:
    """The compiled decode function for this batch and cache size, None where eager is settled
    (measured or recorded faster, or the compile failed), False while not yet decided."""
    pos = cache[0].length

    def at_pos() -> None:  # every candidate call computes the same position
        for c in cache:
            c.length = pos

    def run_eager() -> Tensor:
        at_pos()
        return eager(ids, cache)

    def run_with(compiled) -> Tensor:
        at_pos()
        return static_step(model, compiled)(ids, cache)

    fields = plan_fields(model, ids.shape[0], cache[0].max_len)
    chosen = compile_for_decode(fresh_decode_step(), run_with, run_eager, device=ids.device, tokens=tally,
                                fields=fields, tolerance=decode_tolerance(compute_dtype(model, ids.device)))
    try:
        if chosen.choice != "compiled":
            record = planner().entry("compile", {**fields, "pass": "decode"})
            return None if record is not None and record.get("choice") == "eager" else False
        try:  # compiled from a record of another process: the first call compiles, here and now
            run_with(chosen.module)
        except Exception as e:  # noqa: BLE001 - e.g. no C++ compiler in this process: stay eager, and say so
            warnings.warn(f"the compiled decode step failed ({type(e).__name__}: {e}); generating eagerly",
                          RuntimeWarning, stacklevel=4)
            return None
        return chosen.module
    finally:
        at_pos()
