"""GPT: token lookup + positions -> causal backbone -> LM head (GPT-2's layout: Radford et al. 2019)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from ..nn import KVCache, LearnedPosition, LMHead, SinusoidalPosition, TokenEmbedding, Transformer, planned_kernels
from ..nn.dropout import Dropout
from .base import Model, check_seq_len, check_sizes, matmul_weights
from . import decode_plan
from .sampling import sample
from .gpt_decode import cache_length, static_decode_unsupported

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
                    cache = decode_plan.take_cache(self, idx.shape[0], size, static) if use_cache else None
                step_in = idx  # with the cache, then each new token alone; without it, the whole window
                step = None    # the one-token step after the prompt: eager, or compiled where the plan chose it
                recent = idx   # the last `context` tokens, for a window that slides
                for i in range(max_new_tokens):
                    with torch.inference_mode():
                        if step is None and use_cache and i == 1:
                            step = decode_plan.decode_step(self, step_in, cache, max_new_tokens - 1)
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
                decode_plan.count_steps(self, (idx.shape[0], cache[0].max_len), computed - 1)
            if static and cache is not None:
                decode_plan.keep_cache(self, cache)

    def _slide(self, cache: list[KVCache], window: Tensor) -> Tensor:
        """Refill the full cache with `window` (B, W), the most recent tokens, at positions 0..W-1:
        the next token's logits (B, vocab), exactly the uncached model's on the window."""
        for c in cache:
            c.reset()
        return self(window, cache=cache, last_only=True)[:, -1]

    def compiled_decode(self, batch: int, total: int) -> bool:
        """Whether `generate` (and `stream`) now takes its one-token steps for `batch` prompts and
        `total` tokens in all through the compiled static graph: the speed plan chose it in this
        process (it does once the steps taken have cost about a compile, and it measured faster)."""
        return decode_plan.compiled_decode(self, batch, total)

    def settle_decode(self, batch: int, total: int) -> bool:
        """Decide now, for good in this process, whether the one-token steps of `batch` prompts and
        `total` tokens in all run compiled: measured (and compiled where faster) as for a process
        that runs for days, rather than once the steps taken repay a compile. A server calls this
        before it listens, so that no request ever waits for a compile. True: they run compiled."""
        return decode_plan.settle(self, batch, total)

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
