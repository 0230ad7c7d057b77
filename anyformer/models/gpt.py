"""GPT: token lookup + positions -> causal backbone -> LM head (seed 002's text model)."""
from __future__ import annotations

import math
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from ..nn import KVCache, LearnedPosition, LMHead, SinusoidalPosition, TokenEmbedding, Transformer, planned_kernels
from ..nn.dropout import Dropout
from ..plan import choices, compile_for_decode, planner
from .base import Model, check_seq_len, check_sizes, matmul_weights
from .gpt_decode import (Step, cache_length, compute_dtype, decode_tolerance, eager_step, fresh_decode_step,
                         plan_fields, static_decode_unsupported, static_step)

# Per model, kept beside it rather than on it (a deep copy of the model must not carry steps bound to
# the original), by (batch, cache size): the compiled decode functions (None: eager, settled), the
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

GPT_POSITIONS = ("learned", "sinusoidal", "rotary", "none")


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    context: int = 1024
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_hidden: int | None = None    # default 4 * width
    activation: str = "gelu_tanh"
    position: str = "learned"        # learned | sinusoidal | rotary | none
    norm_eps: float = 1e-5
    bias: bool = True
    tie_weights: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.position not in GPT_POSITIONS:
            raise ValueError(f"unknown GPT position {self.position!r}; expected one of {GPT_POSITIONS}")
        check_sizes(self, ("vocab_size", "context", "width", "depth", "heads"))


class GPT(Model):
    """`gpt(idx)` with idx (B, T) token ids -> next-token logits (B, T, vocab)."""

    family = "gpt"
    config_class = GPTConfig

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_embed = TokenEmbedding(c.vocab_size, c.width)
        # Rotary positions live inside attention; the input head then adds none.
        self.pos = {"learned": lambda: LearnedPosition(c.context, c.width),
                    "sinusoidal": lambda: SinusoidalPosition(c.context, c.width)}.get(c.position, lambda: None)()
        self.drop = Dropout(c.dropout) if c.dropout > 0 else None
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm_eps=c.norm_eps,
                                    activation=c.activation, bias=c.bias, dropout=c.dropout,
                                    attn_dropout=c.attn_dropout, rotary=c.position == "rotary",
                                    max_len=c.context, impl=c.attn_impl)
        self.lm_head = LMHead(c.width, c.vocab_size, tie_to=self.tok_embed if c.tie_weights else None)
        # GPT-2: residual projections scaled by 1/sqrt(2 * depth) so the stream's variance does not grow.
        for name, p in self.backbone.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.trunc_normal_(p, std=0.02 / math.sqrt(2 * c.depth), a=-0.04, b=0.04)

    def forward(self, idx: Tensor, *, cache: list[KVCache] | None = None, position: Tensor | None = None,
                return_attention: bool | Sequence[int] = False, last_only: bool = False):
        """idx (B, T) -> logits (B, T, V); `last_only`: the last position's only, (B, 1, V).

        `cache`: one KVCache per layer (`new_cache`); idx then continues the cached positions.
        `position` (with `cache`; a 0-dim int64 tensor): the static cache mode of a compiled decode
        step (models/gpt_decode.py): idx stands at that position, its keys and values are written
        there, and attention reads the whole cache with the later positions masked; the caches'
        `length` is neither read nor moved, and the caller checks the position against the context.
        With `return_attention`: `forward_with_attention(idx, return_attention, ...)`."""
        if return_attention is not False and return_attention is not None:
            return self.forward_with_attention(idx, return_attention, cache=cache, position=position,
                                               last_only=last_only)
        h = self.backbone(self.tokens(idx, cache, position), causal=True, cache=cache, position=position)
        return self.lm_head(h[:, -1:] if last_only else h)

    def forward_with_attention(self, idx: Tensor, layers: bool | Sequence[int] = True, *,
                               cache: list[KVCache] | None = None, position: Tensor | None = None,
                               last_only: bool = False,
                               on_layer: Callable[[int, Tensor], None] | None = None) -> tuple[Tensor, list[Tensor]]:
        """(logits, weights), weights (B, heads, T, T) per layer asked: see Transformer.forward_with_attention."""
        h, attn = self.backbone.forward_with_attention(self.tokens(idx, cache, position), layers,
                                                       on_layer=on_layer, causal=True, cache=cache, position=position)
        return self.lm_head(h[:, -1:] if last_only else h), attn

    def tokens(self, idx: Tensor, cache: list[KVCache] | None = None, position: Tensor | None = None) -> Tensor:
        """Input head: ids (B, T) -> (B, T, D) with positions, counted on from the cached ones (from
        `position` in the static cache mode: see forward)."""
        if position is not None:
            offset = position
        else:
            offset = cache[0].length if cache else 0
            T = idx.shape[-1] if idx.dim() == 2 else 0
            if offset + T > self.config.context:
                raise ValueError(f"sequence of {offset + T} tokens is longer than the model's context "
                                 f"({self.config.context})")
        x = self.tok_embed(idx)
        x = x if self.pos is None else self.pos(x, offset)
        return x if self.drop is None else self.drop(x)

    def new_cache(self, batch: int, max_len: int | None = None) -> list[KVCache]:
        """One empty key/value cache per layer, for `max_len` positions (default: the context)."""
        c, p = self.config, next(self.parameters())
        return [KVCache(batch, c.heads, c.width // c.heads, max_len or c.context, p.dtype, p.device)
                for _ in range(c.depth)]

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> Tensor:
        """Continue (B, T) prompts by `max_new_tokens` tokens; returns (B, T + max_new_tokens).

        temperature=0 is greedy. With the cache each new token costs one position, not the prefix.
        Any length: past the context the model reads the most recent tokens (`stream` says how).
        """
        return torch.cat([idx, *self.stream(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                                            top_p=top_p, generator=generator, use_cache=use_cache)], dim=1)

    @torch.no_grad()
    def stream(self, idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, generator: torch.Generator | None = None,
               use_cache: bool = True) -> Iterator[Tensor]:
        """Yield each new (B, 1) token as soon as it is sampled (for streaming to a terminal).

        Any number of tokens. A prompt longer than the context is cut to its last `context` tokens
        (as nanoGPT crops). With the cache, once the window is full the cache is refilled from the
        last `window_keep(context)` tokens (three quarters of it) and generation goes on: each
        token's logits are the uncached model's on the tokens in the window then, 3/4 to all of the
        context, the prompt's or the generation's own. Without the cache each step reads the last
        `context` tokens, as nanoGPT's loop does."""
        if idx.dim() != 2 or idx.shape[1] < 1:
            raise ValueError(f"prompt ids must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
        if max_new_tokens < 0 or temperature < 0:
            raise ValueError(f"max_new_tokens and temperature must be >= 0, got {max_new_tokens}, {temperature}")
        if top_k is not None and top_k < 1 or top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_k must be >= 1 and top_p in (0, 1]; got top_k={top_k}, top_p={top_p}")
        context = self.config.context
        idx = idx[:, -context:]
        total = min(idx.shape[1] + max_new_tokens, context)  # the window's most: what the cache holds
        keep = window_keep(context)
        was_training = self.training
        self.eval()
        cache, computed, static = None, 0, False  # computed: the steps run, the prompt's first among them
        try:
            # Generation is anyformer's loop: the plan's kernels for its length (anyformer/nn/linear.py).
            with planned_kernels(self):
                # Every step is the one forward: with the cache it computes one position, attending
                # over the cached keys and values (tests/models hold its logits equal to the uncached).
                # Inference mode skips autograd's per-op bookkeeping: measured 5-12% of a small
                # model's step, ~1% of gpt2's (memory-bound). Sampling runs outside it, so the tokens
                # handed out are ordinary tensors; the cache, made inside, stays inside.
                # Sized for the static decode step's buckets where it may run (one graph per size).
                static = static_decode_unsupported(self) is None
                size = cache_length(self, total) if static else total
                with torch.inference_mode():
                    cache = self._take_cache(idx.shape[0], size, static) if use_cache else None
                step_in = idx  # with the cache, then each new token alone; without it, the whole window
                step = None    # the one-token step after the prompt: eager, or compiled where the plan chose it
                recent = idx   # the last `context` tokens, for a window that slides
                for i in range(max_new_tokens):
                    with torch.inference_mode():
                        if step is None and use_cache and i == 1:
                            step = self._decode_step(step_in, cache, max_new_tokens - 1)
                        if use_cache and cache[0].length + step_in.shape[1] > cache[0].max_len:
                            logits = self._slide(cache, recent[:, -keep:])  # the window is full
                        elif step is not None:
                            logits = step(step_in, cache)
                        else:
                            logits = self(step_in, cache=cache, last_only=True)[:, -1]
                    computed = i + 1
                    nxt = sample(logits.float(), temperature, top_k, top_p, generator)
                    recent = torch.cat([recent, nxt], dim=1)[:, -context:]
                    step_in = nxt if use_cache else recent
                    yield nxt
        finally:
            self.train(was_training)
            if static and cache is not None and computed > 1:  # one-token steps taken, however it ended
                self._count_decode_steps((idx.shape[0], cache[0].max_len), computed - 1)
            if static and cache is not None:
                self._keep_cache(cache)

    def _slide(self, cache: list[KVCache], window: Tensor) -> Tensor:
        """Refill the full cache with `window` (B, W), the most recent tokens, at positions 0..W-1:
        the next token's logits (B, vocab), exactly the uncached model's on the window."""
        for c in cache:
            c.reset()
        return self(window, cache=cache, last_only=True)[:, -1]

    def _take_cache(self, batch: int, size: int, static: bool) -> list[KVCache]:
        """An empty cache for `batch` prompts and `size` positions: the one kept from an earlier request
        where the compiled step serves this size (`_STATIC_CACHES`), else a new one. Call in inference mode."""
        kept = _STATIC_CACHES.get(self, {}).pop((batch, size), None) if static else None
        if kept is None:
            return self.new_cache(batch, size)
        for c in kept:
            c.reset()
        return kept

    def _keep_cache(self, cache: list[KVCache]) -> None:
        """Keep `cache` for the next request of its size, if the compiled step serves that size and
        none is kept yet (concurrent requests take new ones)."""
        key = (cache[0].k.shape[0], cache[0].max_len)
        if _DECODE_STEPS.get(self, {}).get(key) is not None:
            _STATIC_CACHES.setdefault(self, {}).setdefault(key, cache)

    def _count_decode_steps(self, key: tuple[int, int], steps: int) -> None:
        """Add `steps` one-token steps taken to the tally of a batch and cache size whose step is not
        settled yet: what a compile would have been paid back over (the ski-rental rule)."""
        if key in _DECODE_STEPS.get(self, {}):
            return
        with _TALLY_LOCK:
            tally = _DECODE_TALLY.setdefault(self, {})
            tally[key] = tally.get(key, 0) + steps

    def compiled_decode(self, batch: int, total: int) -> bool:
        """Whether `generate` (and `stream`) now takes its one-token steps for `batch` prompts and
        `total` tokens in all through the compiled static graph: the speed plan chose it in this
        process (it does once the steps taken have cost about a compile, and it measured faster)."""
        return _DECODE_STEPS.get(self, {}).get((batch, cache_length(self, total))) is not None

    def settle_decode(self, batch: int, total: int) -> bool:
        """Decide now, for good in this process, whether the one-token steps of `batch` prompts and
        `total` tokens in all run compiled: measured (and compiled where faster) as for a process
        that runs for days, rather than once the steps taken repay a compile. A server calls this
        before it listens, so that no request ever waits for a compile. True: they run compiled."""
        if static_decode_unsupported(self) is not None:
            return False
        device = next(self.parameters()).device
        with planned_kernels(self), torch.inference_mode():
            cache = self.new_cache(batch, cache_length(self, total))
            ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
            self(ids, cache=cache, last_only=True)  # a one-token prompt: the step computes position 1
            self._decode_step(ids, cache, None)
        return self.compiled_decode(batch, total)

    def _decode_step(self, ids: Tensor, cache: list[KVCache], steps: int | None) -> Step:
        """The step for `steps` one-token calls from here: this model's eager forward, or its static
        graph compiled (gpt_decode.py) where the speed plan measured that faster and the steps this
        model has taken in this process (counted as they are taken: a request that stops early
        counts what it ran) and those asked now repay the compile; `steps=None`: measured now, as
        for a server (`settle_decode`). Settled once per batch and cache size (asked again while the
        plan waits for the steps to repay a compile); the cache is left as it came."""
        eager = eager_step(self)
        if static_decode_unsupported(self) is not None or choices.forced_choice(
                planner().forced()[0], "compile") == "eager":
            return eager
        key = (ids.shape[0], cache[0].max_len)
        with _DECODE_LOCKS.setdefault(self, threading.Lock()):  # one plan and compile per key, however many callers
            memo = _DECODE_STEPS.setdefault(self, {})
            if key not in memo:
                with _TALLY_LOCK:
                    taken = _DECODE_TALLY.get(self, {}).get(key, 0)
                compiled = self._plan_decode(eager, ids, cache, None if steps is None else taken + steps)
                if compiled is not False:  # settled: compiled, or None for eager; False: not yet
                    memo[key] = compiled
            compiled = memo.get(key)
        return eager if compiled is None else static_step(self, compiled)

    def _plan_decode(self, eager: Step, ids: Tensor, cache: list[KVCache],
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
            return static_step(self, compiled)(ids, cache)

        fields = plan_fields(self, ids.shape[0], cache[0].max_len)
        chosen = compile_for_decode(fresh_decode_step(), run_with, run_eager, device=ids.device, tokens=tally,
                                    fields=fields, tolerance=decode_tolerance(compute_dtype(self, ids.device)))
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

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of a forward pass over one sequence of `seq_len` tokens (default: the
        context), counted as nanoGPT does (Kaplan et al.; PaLM's appendix B): per token, 2 per
        weight of the blocks and of the LM head, and 4 T D per layer for attention's two products
        over the T positions (the causally masked half included)."""
        c = self.config
        t = check_seq_len(seq_len, c.context, 1, c.context, "the model's context")
        per_token = 2 * matmul_weights(self.backbone) + 2 * c.vocab_size * c.width + 4 * c.depth * t * c.width
        return float(t * per_token)

    @classmethod
    def from_hf(cls, model, **overrides) -> "GPT":
        """From a Hugging Face GPT2LMHeadModel."""
        from ..interop.hf import gpt_from_hf
        return gpt_from_hf(model, **overrides)

    def to_hf(self):
        """A Hugging Face GPT2LMHeadModel with these weights."""
        from ..interop.hf import gpt_to_hf
        return gpt_to_hf(self)


def window_keep(context: int) -> int:
    """The tokens a full window keeps when it slides: three quarters of the context, so that a refill
    (one forward over them) comes once every quarter context of new tokens."""
    return max(1, context - max(1, context // 4))


def sample(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits -> (B, 1) ids: greedy at temperature 0, else top-k / nucleus sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cum - sorted_logits.softmax(dim=-1) >= top_p  # keep the smallest set reaching top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = logits.softmax(dim=-1)
    # Drawn where the generator lives (the CLI's and the server's are CPU generators, which CUDA's
    # multinomial refuses), then moved to the logits: the same seed gives the same tokens on any device.
    device = logits.device if generator is None else generator.device
    return torch.multinomial(probs.to(device), 1, generator=generator).to(logits.device)
