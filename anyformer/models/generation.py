"""Generation with a GPT: the loop, the one-token step, and who runs the step.

Every token comes from the model's one forward. With a `KVCache` per layer a new token costs one
position: its keys and values are written into the preallocated cache (`KVCache.update`) and it
attends over those before. `decode_step` is that forward in the static cache mode, the position a
0-dim tensor, for a step compiled as one graph (as gpt-fast's and Hugging Face's StaticCache steps
are): no shape depends on the position, so one compile serves every step of a cache size.

Who runs the one-token steps is the model's `Decoder`: the eager forward by default; the speed
plan's (`anyformer.plan.prepare` installs it, `plan/decode.py`) runs `decode_step` compiled where it
measured that faster. The loop here does not know which.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Callable, Iterator

import torch
from torch import Tensor

from ..nn import KVCache
from .sampling import sample

if TYPE_CHECKING:
    from .gpt import GPT

Step = Callable[[Tensor, list[KVCache]], Tensor]  # (B, 1) ids, caches -> (B, vocab) logits


def decode_step(model: "GPT", ids: Tensor, position: Tensor, cache: list[KVCache]) -> Tensor:
    """Logits (B, vocab) for tokens `ids` (B, 1) standing at `position` (a 0-dim int64 tensor), after
    the positions before it held in `cache` (written here at `position`): the model's forward in its
    static cache mode. Eval mode: no dropout."""
    return model(ids, cache=cache, position=position, last_only=True)[:, -1]


def eager_step(model: "GPT") -> Step:
    """The model's own cached forward, one position, the cache's length moved on."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        return model(ids, cache=cache, last_only=True)[:, -1]
    return step


class Decoder:
    """Runs a GPT's one-token steps: here the eager forward, every step. The plan's decoder
    (plan/decode.py) overrides `step` (and the cache it is given, `take_cache`/`done`) to run a
    compiled static step where it measured that faster."""

    static = False  # whether caches are sized to the static step's buckets (`cache_length`)

    def take_cache(self, model: "GPT", batch: int, size: int) -> list[KVCache]:
        """An empty cache for `batch` prompts and `size` positions. Called in inference mode."""
        return model.new_cache(batch, size)

    def step(self, model: "GPT", ids: Tensor, cache: list[KVCache], steps: int) -> Step:
        """The step for the `steps` one-token calls from here (`ids` (B, 1), the cache after the prompt)."""
        return eager_step(model)

    def done(self, model: "GPT", cache: list[KVCache], steps: int) -> None:
        """A generation ended after `steps` one-token steps, however it ended."""

    def compiled(self, model: "GPT", batch: int, total: int) -> bool:
        """Whether the steps of `batch` prompts and `total` tokens in all now run compiled."""
        return False

    def settle(self, model: "GPT", batch: int, total: int) -> bool:
        """Decide now, for good in this process, whether those steps run compiled; True: they do."""
        return False


EAGER = Decoder()
# Beside the model, not on it: a deep copy of a model must not carry steps compiled for the original.
_DECODERS: "weakref.WeakKeyDictionary[GPT, Decoder]" = weakref.WeakKeyDictionary()


def decoder_of(model: "GPT") -> Decoder:
    return _DECODERS.get(model, EAGER)


def set_decoder(model: "GPT", decoder: Decoder | None) -> None:
    """`model`'s steps run by `decoder` from now on (None: the eager forward)."""
    if decoder is None:
        _DECODERS.pop(model, None)
    else:
        _DECODERS[model] = decoder


def cache_length(model: "GPT", total: int) -> int:
    """Positions to allocate for `total` tokens where a static step may run: the next power of two
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
    context, decoder = model.config.context, decoder_of(model)
    idx = idx[:, -context:]
    total = min(idx.shape[1] + max_new_tokens, context)  # the window's most: what the cache holds
    was_training, cache, computed = model.training, None, 0  # computed: the steps run, the prompt's first
    model.eval()
    try:
        # Inference mode skips autograd's per-op bookkeeping (5-12% of a small model's step). Sampling
        # runs outside it, so the tokens handed out are ordinary tensors; the cache stays inside.
        with torch.inference_mode():
            size = cache_length(model, total) if decoder.static else total
            cache = decoder.take_cache(model, idx.shape[0], size) if use_cache else None
        step_in, step, recent = idx, None, idx  # recent: the last `context` tokens, for a window that slides
        for i in range(max_new_tokens):
            with torch.inference_mode():
                if step is None and use_cache and i == 1:
                    step = decoder.step(model, step_in, cache, max_new_tokens - 1)
                if use_cache and cache[0].length + step_in.shape[1] > cache[0].max_len:
                    logits = _slide(model, cache, recent[:, -window_keep(context):])  # the window is full
                elif step is not None:
                    logits = step(step_in, cache)
                else:
                    logits = model(step_in, cache=cache, last_only=True)[:, -1]
            computed = i + 1
            nxt = sample(logits.float(), temperature, top_k, top_p, generator)
            recent = torch.cat([recent, nxt], dim=1)[:, -context:]
            step_in = nxt if use_cache else recent
            yield nxt
    finally:
        model.train(was_training)
        if cache is not None:
            decoder.done(model, cache, max(0, computed - 1))


def _slide(model: "GPT", cache: list[KVCache], window: Tensor) -> Tensor:
    """Refill the full cache with `window` (B, W), the most recent tokens, at positions 0..W-1: the
    next token's logits (B, vocab), exactly the uncached model's on the window."""
    for c in cache:
        c.reset()
    return model(window, cache=cache, last_only=True)[:, -1]
