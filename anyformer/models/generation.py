"""Generation with a GPT: the loop, and the one forward every token comes from.

One `KVCache` holds the keys and values of every layer and the one position where the next tokens
go, as gpt-fast's static cache does: a new token costs one position, its keys and values written
into the preallocated buffers, attention reading them whole with the positions not yet written
masked. No shape depends on the position, so `next_logits`, the model's forward over the cache,
compiles as one graph that serves every step of a cache size.

Which runs the one-token steps is settled before generation starts: the eager `next_logits`, or
where the speed plan compiled it for the batch and cache size (`anyformer.plan.prepare_decode`, the
door's decoding half), that `CompiledStep`. The loop does not know which, and asks nobody.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import torch
from torch import Tensor

from ..nn import KVCache
from .sampling import sample

if TYPE_CHECKING:
    from .gpt import GPT

Step = Callable[["GPT", Tensor, "KVCache | None"], Tensor]  # model, (B, T) ids, cache -> (B, vocab) logits


def next_logits(model: "GPT", ids: Tensor, cache: KVCache | None) -> Tensor:
    """Logits (B, vocab) of the token after `ids` (B, T), which continue what `cache` holds (None: the
    whole window, uncached): the model's one forward, its LM head on the last position alone."""
    return model(ids, cache=cache, last_only=True)[:, -1]


@dataclass
class CompiledStep:
    """A step the speed plan settled for one (batch, cache size), compiled or native, and the cache that a generation of
    that size last ran, kept for the next: a CUDA graph replays the addresses it was recorded with
    (another cache would have it recorded again, a graph more each request). A generation that finds
    it taken (another running meanwhile) makes its own."""

    run: Step
    kept: list[KVCache] = field(default_factory=list)
    kind: str = "compiled"  # or "native": the blocks on anyformer's own kernel, eager (plan/decode_native.py)


# Beside the model, not on it: a deep copy of a model must not carry steps compiled for the original.
_COMPILED: "weakref.WeakKeyDictionary[GPT, dict[tuple[int, int], CompiledStep]]" = weakref.WeakKeyDictionary()


def compiled_steps(model: "GPT") -> dict[tuple[int, int], CompiledStep]:
    """The steps compiled for `model`, by (batch, cache size) (`cache_length`); empty: all eager."""
    return _COMPILED.setdefault(model, {})


def cache_length(model: "GPT", total: int) -> int:
    """Positions to allocate for `total` tokens where a compiled step may run: the next power of two
    (at least 64), at most the context. One compiled graph serves every request of the same size; the
    unused positions are masked, not read into the softmax."""
    n = 64
    while n < total:
        n *= 2
    return min(n, model.config.context)


def window_keep(context: int) -> int:
    """The tokens a full window keeps when it slides: three quarters of the context, so that a refill
    (one forward over them) comes once every quarter context of new tokens."""
    return max(1, context - max(1, context // 4))


def check_request(idx: Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
                  top_p: float | None) -> None:
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"prompt ids must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
    if max_new_tokens < 0 or temperature < 0:
        raise ValueError(f"max_new_tokens and temperature must be >= 0, got {max_new_tokens}, {temperature}")
    if top_k is not None and top_k < 1 or top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_k must be >= 1 and top_p in (0, 1]; got top_k={top_k}, top_p={top_p}")


@torch.no_grad()
def stream(model: "GPT", idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, generator: torch.Generator | None = None,
           use_cache: bool = True) -> Iterator[Tensor]:
    """GPT.stream: yield each new (B, 1) token as soon as it is sampled (see there)."""
    check_request(idx, max_new_tokens, temperature, top_k, top_p)
    context = model.config.context
    recent = idx[:, -context:]  # the window: the last `context` tokens, what an uncached step reads
    with _decoding(model, recent.shape[0], min(recent.shape[1] + max_new_tokens, context), use_cache) as (cache, step):
        ids, filled = recent, 0  # what the next forward reads; the positions the cache holds
        for _ in range(max_new_tokens):
            # Inference mode skips autograd's per-op bookkeeping (5-12% of a small model's step). Sampling
            # runs outside it, so the tokens handed out are ordinary tensors; the cache stays inside.
            with torch.inference_mode():
                if cache is not None and filled + ids.shape[1] > cache.max_len:  # the window is full
                    ids, filled = _refill(cache, recent, window_keep(context)), 0
                logits = step(model, ids, cache)
            filled += ids.shape[1]
            nxt = sample(logits.float(), temperature, top_k, top_p, generator)
            recent = torch.cat([recent, nxt], dim=1)[:, -context:]
            ids = recent if cache is None else nxt
            yield nxt


@contextlib.contextmanager
def _decoding(model: "GPT", batch: int, total: int, use_cache: bool) -> Iterator[tuple[KVCache | None, Step]]:
    """For one generation of `batch` prompts and `total` tokens in all (the window's most), the model
    in eval mode meanwhile: the cache (None without `use_cache`) and the step that continues it, the
    step compiled for its size where the plan made one (with the cache kept from the generation
    before), else the eager forward over a cache of exactly `total` positions."""
    compiled = compiled_steps(model).get((batch, cache_length(model, total))) if use_cache else None
    was_training, cache = model.training, None
    model.eval()
    try:
        if use_cache:
            with torch.inference_mode():  # the cache is written in inference mode: it must be made there
                cache = _kept(compiled) or model.new_cache(batch, cache_length(model, total) if compiled else total)
        yield cache, next_logits if compiled is None else compiled.run
    finally:
        model.train(was_training)
        if compiled is not None and cache is not None and not compiled.kept:
            compiled.kept.append(cache)


def _kept(compiled: CompiledStep | None) -> KVCache | None:
    """The compiled step's kept cache, emptied, unless another generation has it (or none is kept)."""
    if compiled is None:
        return None
    try:
        cache = compiled.kept.pop()
    except IndexError:  # none kept, or another generation took it meanwhile (list.pop is atomic)
        return None
    cache.reset()
    return cache


def _refill(cache: KVCache, recent: Tensor, keep: int) -> Tensor:
    """Empty the full cache and give the window's last `keep` tokens (B, keep) to fill it again at
    positions 0..keep-1: their pass gives the next token's logits, exactly the uncached model's on them."""
    cache.reset()
    return recent[:, -keep:]
