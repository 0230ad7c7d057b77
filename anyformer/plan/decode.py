"""The plan's decoder: a GPT's one-token generation steps run compiled where that measured faster.

`prepare` installs it on a GPT (`models/generation.py`'s `set_decoder`). Per model and (batch, cache
size) it keeps the compiled static step where the plan chose it, the one-token steps taken so far
(what a compile would be paid back over: the ski-rental rule), and a cache kept for the next
request. The step compiled is `generation.decode_step`, the model's own forward in its static cache
mode. A cached step computes one position, so it is bound by memory: every weight is read once per
token. On the CPU the planned layers write the step's products as products and sums
(`layers.rowwise_linear`, `attend.by_sums`), which inductor fuses around one pass over each weight;
on CUDA the step runs as a CUDA graph, SDPA inside it, the caches at fixed addresses.
"""
from __future__ import annotations

import threading
import types
import warnings
import weakref
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from ..models.generation import Decoder, Step, cache_length, decode_step, eager_step, set_decoder
from ..nn import KVCache
from . import choices
from .compiled import compile_for_decode
from .planner import planner

if TYPE_CHECKING:
    from ..models.gpt import GPT

__all__ = ["PlannedDecoder", "install", "uninstall"]

# Where the static step is compiled and measured: inductor's C++ on the CPU, CUDA graphs on CUDA.
STATIC_DEVICES = ("cpu", "cuda")


def install(model: nn.Module) -> None:
    """Give a GPT (a model with `new_cache` and a `config.context`) the plan's decoder, where its
    device has a compiled static step."""
    if hasattr(model, "new_cache") and hasattr(getattr(model, "config", None), "context") \
            and next(model.parameters()).device.type in STATIC_DEVICES:
        set_decoder(model, PLANNED_DECODER)


def uninstall(model: nn.Module) -> None:
    if hasattr(model, "new_cache"):
        set_decoder(model, None)


def fresh_decode_step() -> Callable[..., Tensor]:
    """`decode_step` with a code object of its own. torch.compile keeps its graphs per code object and
    stops compiling a code object after a few recompiles (`recompile_limit`, 8), running it eagerly
    from then on: here that would be the slow product-and-sum form, unfused. With one code object
    per (model, batch, cache size) each compiles exactly one graph, however many a process makes."""
    f = decode_step
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def static_step(model: "GPT", compiled: Callable[..., Tensor]) -> Step:
    """`compiled` (decode_step under torch.compile) behind the eager step's signature: it reads the
    position from the cache and moves every layer's length on by one, as an eager step does."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        pos = cache[0].length
        if pos >= min(cache[0].max_len, model.config.context):  # the graph cannot check a tensor position
            raise ValueError(f"KV cache holds at most {cache[0].max_len} positions (context "
                             f"{model.config.context}); got {pos} cached + 1 new")
        if ids.is_cuda:
            _static_addresses(cache)
        out = compiled(model, ids, torch.tensor(pos, device=ids.device), cache)
        for c in cache:
            c.length = pos + 1
        # A CUDA graph's output lives in its memory pool, which its next replay overwrites.
        return out.clone() if out.is_cuda else out
    return step


def _static_addresses(cache: list[KVCache]) -> None:
    """Mark the caches' buffers as static inputs of the compiled step. CUDA graphs replay fixed
    addresses: an input that is not marked is copied into the graph's own buffer, and one written in
    place (as the caches are) makes cudagraph trees skip the graph. Unguarded: another cache (another
    request's) has the graph recorded again, not recompiled; the decoder reuses one per size."""
    for c in cache:
        torch._dynamo.mark_static_address(c.k)
        torch._dynamo.mark_static_address(c.v)


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


class PlannedDecoder(Decoder):
    """The plan's decoder. State per model, by (batch, cache size), in weak dictionaries (the values
    must not hold the model, or it is never freed): the compiled decode functions (None: eager,
    settled), the one-token steps asked for, a lock, and a cache kept for the next request, so that
    the buffers a CUDA graph was recorded with keep their addresses (another cache would have it
    recorded again, a graph more each request). Memory: one cache per size the compiled step serves."""

    static = True

    def __init__(self) -> None:
        self._steps: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
        self._tally: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
        self._locks: "weakref.WeakKeyDictionary[GPT, threading.Lock]" = weakref.WeakKeyDictionary()
        self._caches: "weakref.WeakKeyDictionary[GPT, dict]" = weakref.WeakKeyDictionary()
        # The tally's own lock, held for an addition only: a stream closed on a server's event loop must
        # not wait for another request's compile (which holds the model's lock). Re-entrant: a stream
        # left to the garbage collector may close (and count) inside another's addition, on one thread.
        self._tally_lock = threading.RLock()

    def take_cache(self, model: "GPT", batch: int, size: int) -> list[KVCache]:
        """The cache kept from an earlier request where the compiled step serves this size, else a new one."""
        kept = self._caches.get(model, {}).pop((batch, size), None)
        if kept is None:
            return model.new_cache(batch, size)
        for c in kept:
            c.reset()
        return kept

    def done(self, model: "GPT", cache: list[KVCache], steps: int) -> None:
        """Count the one-token steps taken (while the size's step is not settled), and keep the cache
        for the next request of its size if the compiled step serves it and none is kept yet."""
        key = (cache[0].k.shape[0], cache[0].max_len)
        if steps > 0 and key not in self._steps.get(model, {}):
            with self._tally_lock:
                tally = self._tally.setdefault(model, {})
                tally[key] = tally.get(key, 0) + steps
        if self._steps.get(model, {}).get(key) is not None:
            self._caches.setdefault(model, {}).setdefault(key, cache)

    def compiled(self, model: "GPT", batch: int, total: int) -> bool:
        return self._steps.get(model, {}).get((batch, cache_length(model, total))) is not None

    def settle(self, model: "GPT", batch: int, total: int) -> bool:
        """Measure now (and compile where faster) the one-token step of `batch` prompts and `total`
        tokens, with no compile-time accounting; True where it runs compiled."""
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                cache = model.new_cache(batch, cache_length(model, total))
                ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
                model(ids, cache=cache, last_only=True)  # a one-token prompt: the step computes position 1
                self._choose(model, ids, cache, None)
        finally:
            model.train(was_training)
        return self.compiled(model, batch, total)

    def step(self, model: "GPT", ids: Tensor, cache: list[KVCache], steps: int) -> Step:
        return self._choose(model, ids, cache, steps)

    def _choose(self, model: "GPT", ids: Tensor, cache: list[KVCache], steps: int | None) -> Step:
        """The eager step, or the static graph compiled where the plan measured that faster and the
        steps this model has taken in this process (counted as they are taken: a request that stops
        early counts what it ran) and those asked now repay the compile; `steps=None`: measured now,
        as for a server (`settle`). Settled once per batch and cache size (asked again while the plan
        waits for the steps to repay a compile); the cache is left as it came."""
        eager = eager_step(model)
        if choices.forced_choice(planner().forced()[0], "compile") == "eager":
            return eager
        key = (ids.shape[0], cache[0].max_len)
        with self._locks.setdefault(model, threading.Lock()):  # one plan and compile per key, however many callers
            memo = self._steps.setdefault(model, {})
            if key not in memo:
                with self._tally_lock:
                    taken = self._tally.get(model, {}).get(key, 0)
                compiled = _plan_decode(model, eager, ids, cache, None if steps is None else taken + steps)
                if compiled is not False:  # settled: compiled, or None for eager; False: not yet
                    memo[key] = compiled
            compiled = memo.get(key)
        return eager if compiled is None else static_step(model, compiled)

    def __repr__(self) -> str:
        return "PlannedDecoder()"


PLANNED_DECODER = PlannedDecoder()


def _plan_decode(model: "GPT", eager: Step, ids: Tensor, cache: list[KVCache],
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
