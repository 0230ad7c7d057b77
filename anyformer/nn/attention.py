"""Multi-head attention: softmax(Q K^T / sqrt(D_h)) V, per head, heads concatenated, then U_msa.

Three paths compute the same thing. The fused path calls
`torch.nn.functional.scaled_dot_product_attention`; the explicit path builds the attention
matrix with a softmax and hands it to a `sink` when one is given; the native path
(`anyformer.plan.native`, fp32 CPU self-attention) reads the packed q/k/v projection in place and
writes the heads concatenated. A layer takes the explicit path when its weights are asked for (a
sink is given) or when `impl="explicit"`; with `impl="auto"` on the CPU it takes the path the
speed plan (`anyformer.plan.attention_kernel`) measured fastest on this machine for the case
(shapes, dtype, causal, training, where q/k/v come from), SDPA until measured otherwise.

With a static cache (`forward(position=...)`: a generation step compiled as one graph) the layer
attends over the whole preallocated cache with the positions not yet written masked; one query on
the CPU takes a fourth path there, products and sums that inductor fuses (`attend_by_sums`).
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..plan import attention_kernel, choices, native, planner, sdpa_backend, sdpa_context
from ..plan.decisions import SDPA
from .dropout import Dropout
from .functional import attention_explicit, causal_mask
from .linear import plain_eager
from .positions import RotaryEmbedding

AttentionImpl = Literal["auto", "fused", "explicit"]
ATTENTION_IMPLS = ("auto", "fused", "explicit")


class KVCache:
    """Keys and values of one attention layer kept between generation steps.

    Preallocated to `max_len` so that appending a token is a copy into place, not a concat
    of the whole prefix. Two ways to fill it: `append` (eager calls: the positions so far, a view
    that grows) and `write` (the static mode of a compiled step: the whole buffer, masked).
    """

    def __init__(self, batch: int, heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        # Zeros, not empty: the static mode (`write`) reads every position and masks those not yet
        # written, and a masked weight of 0 times a NaN left in fresh memory is NaN.
        self.k = torch.zeros(batch, heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store (B, H, T, D_h) new keys/values; return all keys/values so far."""
        start, t = self.length, k.shape[2]
        end = start + t
        if end > self.max_len:
            raise ValueError(f"KV cache holds at most {self.max_len} positions; "
                             f"got {start} cached + {t} new")
        # narrow + copy_: two ops where slice assignment goes through Python indexing (several).
        self.k.narrow(2, start, t).copy_(k)
        self.v.narrow(2, start, t).copy_(v)
        self.length = end
        return self.k.narrow(2, 0, end), self.v.narrow(2, 0, end)

    def write(self, position: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The static mode: store (B, H, T, D_h) keys/values at positions position .. position + T - 1
        (`position` a 0-dim int64 tensor, below `max_len - T + 1`: not checked, its value is not
        read) and return the whole buffers with a (T, max_len) bool mask, True where each new token
        may look (its own position and those before). As in gpt-fast and Hugging Face's StaticCache,
        no shape depends on the position, so one compiled graph serves every step, and the buffers
        keep their addresses (what CUDA graphs replay). `length` is neither read nor moved: the
        caller, who knows the position's value, keeps it."""
        at = position + torch.arange(k.shape[2], device=position.device)
        # Cast as `append`'s copy_ does: under autocast the projections are in a lower precision.
        self.k.index_copy_(2, at, k.to(self.k.dtype))
        self.v.index_copy_(2, at, v.to(self.v.dtype))
        return self.k, self.v, torch.arange(self.max_len, device=at.device) <= at[:, None]

    def reset(self) -> None:
        """Empty again, for another request (zeroed: see __init__; a reused buffer keeps its address)."""
        self.k.zero_()
        self.v.zero_()
        self.length = 0


def attend_by_sums(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    """softmax(q K^T / sqrt(D_h)) V for queries q (B, H, N, D_h) over keys and values (B, H, L, D_h),
    the keys not `allowed` (a bool mask broadcast to (B, H, N, L)) masked; written as products and
    sums over D_h and L, the softmax and its weighted sum in float32 at least. For one query over a
    static cache on the CPU, which inductor fuses into two passes over the cache with the rest of the
    step. With SDPA, a profile of the compiled char GPT step (2-core Intel Xeon, 6 heads of 64 over
    512 positions) showed six opaque ATen calls a step, one a layer, of about 0.17 ms each: a fifth
    of the step. N queries cost an (N, L, D_h) product per head: this is for N = 1."""
    scores = (k[:, :, None] * q[:, :, :, None]).sum(-1) * q.shape[-1] ** -0.5  # (B, H, N, L)
    at_least_fp32 = torch.promote_types(scores.dtype, torch.float32)  # half precision loses small weights
    weights = scores.to(at_least_fp32).masked_fill(~allowed, float("-inf")).softmax(-1)
    return (weights[..., None] * v[:, :, None]).sum(-2).to(q.dtype)


def _as_attn_mask(mask: Tensor | None, batch: int, nq: int, nk: int) -> Tensor | None:
    """Normalise a boolean mask (True = may attend) to a shape SDPA broadcasts: (B|1, 1|H, Nq|1, Nk)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
    if mask.dim() == 2:  # key-padding mask (B, Nk)
        if mask.shape != (batch, nk):
            raise ValueError(f"key-padding mask must have shape (B, Nk) = ({batch}, {nk}), "
                             f"got {tuple(mask.shape)}")
        return mask[:, None, None, :]
    if mask.dim() == 3:  # (B, Nq, Nk)
        return mask[:, None]
    if mask.dim() == 4:
        return mask
    raise ValueError(f"mask must be (B, Nk), (B, Nq, Nk) or (B, H, Nq, Nk); got shape {tuple(mask.shape)}")


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float, causal: bool) -> Tensor:
    """F.scaled_dot_product_attention; `causal` aligned bottom-right (a KV cache's last queries)."""
    nq, nk = q.shape[2], k.shape[2]
    if causal and mask is None and nq == nk:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
    if causal and nq > 1:  # one query after a cache sees every key: no mask needed
        cm = causal_mask(nq, nk, q.device)
        mask = cm if mask is None else mask & cm
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


class MultiHeadAttention(nn.Module):
    """Self-attention over x, or cross-attention from x to `context` when `cross=True`.

    Weights: `qkv` (D -> 3D) for self-attention, `q` and `kv` for cross-attention, `proj` (U_msa).
    """

    def __init__(self, width: int, heads: int, *, cross: bool = False, context_width: int | None = None,
                 bias: bool = True, attn_dropout: float = 0.0, proj_dropout: float = 0.0,
                 rotary: RotaryEmbedding | None = None, impl: AttentionImpl = "auto") -> None:
        super().__init__()
        if width % heads != 0:
            raise ValueError(f"width must be divisible by heads: got width={width}, heads={heads}")
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention impl {impl!r}; expected one of {ATTENTION_IMPLS}")
        self.width, self.heads, self.head_dim = width, heads, width // heads
        self.cross = cross
        if cross:
            self.q = nn.Linear(width, width, bias=bias)
            self.kv = nn.Linear(context_width or width, 2 * width, bias=bias)
        else:
            self.qkv = nn.Linear(width, 3 * width, bias=bias)  # fused: one matmul for Q, K, V
        self.proj = nn.Linear(width, width, bias=bias)
        self.attn_dropout = attn_dropout
        self.proj_drop = Dropout(proj_dropout) if proj_dropout > 0 else None
        self.rotary = rotary
        self.impl = impl
        # The plan's answers for this layer's eager calls, by case (gradients, shape, dtype, masks):
        # what a torch.compile'd graph of the layer follows, since the plan cannot time inside a trace.
        self._planned: dict[tuple, str] = {}

    def _heads(self, t: Tensor, n: int) -> list[Tensor]:
        """(B, N, n*D) -> n tensors of (B, H, N, D_h), views of t.

        Unbinding dim 2 of (B, N, n, H, D_h) makes the backward stack the n gradients straight
        into t's layout: one pass, where unbinding a permuted (n, B, H, N, D_h) view costs a
        stack and then a copy back. One position (a generation step) needs no transpose.
        """
        B, N = t.shape[0], t.shape[1]
        if N == 1:
            return list(t.reshape(B, n, self.heads, 1, self.head_dim).unbind(1))
        return [u.transpose(1, 2) for u in t.unflatten(-1, (n, self.heads, self.head_dim)).unbind(2)]

    def forward(self, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                mask: Tensor | None = None, cache: KVCache | None = None, position: Tensor | None = None,
                queries: int | None = None, sink: Callable[[Tensor], None] | None = None) -> Tensor:
        """x: (B, N, D); context: (B, M, D_c) for cross-attention. Returns y: (B, N, D).

        `sink`: this call takes the explicit path and hands its weights (B, H, N, M) to
        `sink(weights)`; how they are kept is the caller's business (the backbone's
        `forward_with_attention` lists them).
        `queries=n`: only the first n tokens query (all N are keys and values); y is (B, n, D).
        A classifier that reads the class token needs no more from the last layer.
        `cache` with `position` (a 0-dim int64 tensor): the static cache mode, x's tokens standing at
        position, position + 1, ...: their keys and values are written there (`KVCache.write`) and
        attention reads the whole cache, each query masked to its own position and those before (the
        causal mask, whatever `causal` says). Without `position`, x continues after `cache.length`.
        """
        B, N, _ = x.shape
        # The native kernel takes a self-attention projection whole: nothing rotated, cached, cut,
        # masked or dropped between, and no weights asked for; in eager calls outside tracers,
        # transforms and dispatch modes, or under torch.compile (which calls it as one custom op).
        whole = (not self.cross and self.rotary is None and cache is None and queries is None and sink is None
                 and mask is None and not (self.training and self.attn_dropout > 0)
                 and (torch.compiler.is_compiling() or plain_eager(x)))
        if queries is not None and (causal or cache is not None or (mask is not None and mask.dim() != 2)):
            raise ValueError("queries=n takes no causal mask, cache or per-query mask (key padding only)")
        if position is not None and cache is None:
            raise ValueError("position is where a static cache is written: give the cache too")
        if self.cross:
            if context is None:
                raise ValueError("cross-attention needs a context tensor (B, M, D_c)")
            q = self._heads(self.q(x), 1)[0]
            k, v = self._heads(self.kv(context), 2)
        else:
            if context is not None:
                raise ValueError("this attention layer is self-attention; it takes no context")
            t = self.qkv(x)
            if whole:
                packed = t.unflatten(-1, (3, self.heads, self.head_dim))
                kernel = self._kernel(packed, N, causal, False, "packed")
                if kernel == "native":
                    y = self.proj(native.attention_packed(packed, causal))
                    return y if self.proj_drop is None else self.proj_drop(y)
            q, k, v = self._heads(t, 3)
        if self.rotary is not None:
            offset = position if position is not None else 0 if cache is None else cache.length
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        visible = None
        if position is not None:
            k, v, visible = cache.write(position, k, v)
        elif cache is not None:
            k, v = cache.append(k, v)
        if queries is not None:
            q, N = q[:, :, :queries], min(queries, N)
        nk = k.shape[2]
        attn_mask = None if mask is None else _as_attn_mask(mask, B, N, nk)
        drop = self.attn_dropout if self.training else 0.0
        if visible is not None:  # the static cache: its mask is the causal one, over the whole buffer
            attn_mask, causal = visible if attn_mask is None else attn_mask & visible, False
            kernel = self._static_kernel(q, drop)
        elif not whole:
            kernel = self._kernel(q, nk, causal, attn_mask is not None, "cache" if cache is not None else "views")
        if kernel == "sums" and sink is None:
            out = attend_by_sums(q, k, v, attn_mask)
        elif sink is not None or kernel == "explicit":
            out, weights = attention_explicit(q, k, v, causal=causal, mask=attn_mask,
                                              dropout=drop, training=self.training)
            if sink is not None:
                sink(weights)
        elif kernel in SDPA.choices:  # on CUDA, the SDPA backend the plan measured fastest ("default": torch's pick)
            with sdpa_context(kernel):
                out = _sdpa(q, k, v, attn_mask, drop, causal)
        else:
            out = _sdpa(q, k, v, attn_mask, drop, causal)
        # (B, H, N, D_h) -> (B, N, D); for one position the heads are already in that order.
        out = out.reshape(B, 1, self.width) if N == 1 else out.transpose(1, 2).reshape(B, N, self.width)
        y = self.proj(out)
        return y if self.proj_drop is None else self.proj_drop(y)

    def _static_kernel(self, q: Tensor, drop: float) -> str:
        """The attention path over a static cache, by device: for one query on the CPU, products and
        sums (`attend_by_sums`), which inductor fuses with the rest of the step where SDPA stays an
        opaque call; elsewhere SDPA (on CUDA one fused kernel, captured in the step's CUDA graph).
        `impl` other than "auto" is followed."""
        if self.impl != "auto":
            return self.impl
        return "sums" if q.device.type == "cpu" and q.shape[2] == 1 and drop == 0 else "fused"

    def _kernel(self, q: Tensor, nk: int, causal: bool, masked: bool, layout: str) -> str:
        """The attention path for this call: "fused", "explicit" or "native", or on CUDA one of SDPA's
        backends ("default": torch's pick, "flash", "efficient", "cudnn", "math"). `q` is (B, H, N,
        D_h) queries, or for layout "packed" the (B, N, 3, H, D_h) projection. `impl="auto"`: the
        plan's measured choice (`attention_kernel` on the CPU, `sdpa_backend` on CUDA), SDPA's own
        pick until measured otherwise. Under torch.compile, the choice the plan made for this
        layer's eager calls of the same case (a compile plan runs an eager step before it
        compiles), SDPA's own pick if none was made."""
        if self.impl != "auto":
            return self.impl
        kind = q.device.type
        on_cuda = kind == "cuda"
        if on_cuda:
            # Each SDPA backend draws its own dropout masks: with attention dropout there is nothing to
            # check a backend against, so torch picks. So it does after an eager KV cache, whose every
            # doubling would be measured in the first request, for a step a compiled graph takes over.
            if layout == "cache" or (self.training and self.attn_dropout > 0):
                return "fused"
        elif kind != "cpu":
            return "fused"
        if layout == "packed":
            b, nq, _, h, dh = q.shape
        else:
            b, h, nq, dh = q.shape
        grads = torch.is_grad_enabled() and q.requires_grad
        case = (kind, grads, b, nq, nk, q.dtype, causal, masked, layout)
        if torch.compiler.is_compiling():
            # A forced choice reaches traced graphs too (an export under `forcing("stock")` must not
            # follow what the layer's eager calls were told before).
            forced = choices.forced_choice(planner().forced()[0], "sdpa" if on_cuda else "attention")
            if forced is not None:
                return forced
            try:
                return self._planned.get(case, "fused")
            except TypeError:  # symbolic (dynamic) sizes: no eager answer to follow
                return "fused"
        if on_cuda:
            kernel = sdpa_backend(b, h, nq, nk, dh, q.dtype, causal, grads, masked=masked, device=q.device)
        else:
            kernel = attention_kernel(b, h, nq, nk, dh, q.dtype, causal, grads, masked=masked, layout=layout)
        if layout != "cache":  # a decode step's every cache length would be kept, and it is not compiled
            self._planned[case] = kernel
        return kernel
