"""Multi-head attention: softmax(Q K^T / sqrt(D_h)) V, per head, heads concatenated, then U_msa.

The layer projects, splits the heads, rotates (rotary positions), writes its keys and values into a
cache where one is given, and calls one attention function (`attend.py`: SDPA by default, the
matrix written out with `impl="explicit"`); which function is the layer's `attend` attribute, set
before a model runs (`anyformer.plan.prepare` may choose another for this machine). A plain
self-attention call (nothing between the projection and attention) may instead go whole to
`attend_packed`, a function of the packed projection that writes the heads concatenated: none by
default; the plan sets one where a kernel that needs no per-head views measured faster. Attention
weights leave by a hook (`register_weights_hook`): a layer with one computes them written out.

`locality=True` is Lee et al.'s (2021) locality self-attention for ViTs on small data: softmax(Q K^T / tau) V
with a learned temperature tau (from sqrt(D_h), where plain attention stays), and each token kept from
attending to itself (the diagonal masked), so that attention goes to the other tokens rather than
mostly to its own, as a plain ViT trained on little data learns to.

With a cache (`KVCache`: generation) the layer writes its keys and values at the cache's position
and attends over the buffer, the positions not yet written masked: compiled, over the whole
preallocated buffer (one graph for every step); eager on the CPU, over the positions written.
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Callable, Literal

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .attend import Attend, explicit, sdpa
from .dropout import Dropout
from .functional import attention_explicit
from .positions import RotaryEmbedding

AttentionImpl = Literal["auto", "fused", "explicit"]
ATTENTION_IMPLS = ("auto", "fused", "explicit")
WeightsHook = Callable[[Tensor], None]
# (qkv (B, N, 3, H, D_h), causal) -> the heads concatenated (B, N, H*D_h), or None for a call it does not take.
AttendPacked = Callable[[Tensor, bool], "Tensor | None"]


class KVCache:
    """The keys and values of every attention layer of a model, kept between generation steps, and
    the one position where the next tokens go (gpt-fast's static cache, one for the whole model).

    Preallocated to `max_len` positions: a new token is a copy into place, never a concat of the
    prefix. `position` is a 0-dim int64 tensor on the cache's device, so that no shape depends on
    it: one compiled graph serves every step, and the buffers keep their addresses (what CUDA graphs
    replay). Attention reads each layer's buffer with the positions not yet written masked (see `update`).
    `k[i]`, `v[i]`: layer i's (B, H, M, D_h) buffers, a tensor each: a compiled step then writes each
    in place, where slices of one (L, ...) tensor cost it copies of the whole."""

    def __init__(self, layers: int, batch: int, heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        # Zeros, not empty: attention reads every position and masks those not yet written, and a
        # masked weight of 0 times a NaN left in fresh memory is NaN.
        shape = (batch, heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.position = torch.zeros((), dtype=torch.long, device=device)
        self.slots = torch.arange(max_len, device=device)  # 0 .. max_len - 1, made once, not per layer

    @property
    def layers(self) -> int:
        return len(self.k)

    @property
    def max_len(self) -> int:
        return self.slots.shape[0]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Write `layer`'s (B, H, T, D_h) keys and values at positions position .. position + T - 1;
        return that layer's buffers (B, H, M, D_h) and the (T, M) bool mask of what each new token may
        see: the positions before it and its own (None: every position given). The last layer's write
        moves the position on by T. The caller keeps position + T within `max_len`.

        Under torch.compile and off the CPU, M is the whole buffer: no shape depends on the position,
        which is not read. Eager on the CPU, where reading it waits for nothing, M is the positions
        written so far (the rest would be masked anyway): an eager step, as in a process's first
        requests before the plan compiled one, reads as many keys as tokens came, and one new token
        sees them all."""
        T, keys, values = k.shape[2], self.k[layer], self.v[layer]
        if keys.device.type == "cpu" and not torch.compiler.is_compiling():
            p = int(self.position)
            # narrow + copy_: two ops where slicing goes through Python indexing (several).
            keys.narrow(2, p, T).copy_(k)  # copied into the cache's precision
            values.narrow(2, p, T).copy_(v)
            keys, values = keys.narrow(2, 0, p + T), values.narrow(2, 0, p + T)
            visible = None if T == 1 else self.slots[:p + T] <= (p + self.slots[:T])[:, None]
        else:
            if k.dtype != keys.dtype:  # under autocast the projections are in a lower precision
                k, v = k.to(keys.dtype), v.to(values.dtype)
            at = self.position + self.slots[:T]
            keys.index_copy_(2, at, k)
            values.index_copy_(2, at, v)
            visible = self.slots <= at[:, None]
        if layer == self.layers - 1:
            self.position += T
        return keys, values, visible

    def reset(self) -> None:
        """Empty again, for another request (zeroed: see __init__; a reused buffer keeps its address)."""
        for t in (*self.k, *self.v):
            t.zero_()
        self.position.zero_()


def check_heads(width: int, heads: int) -> None:
    """The heads split the width evenly (D_h = D / H each): the rule a model's config is checked by
    too, before anything is built."""
    if width % heads != 0:
        raise ValueError(f"width must be divisible by heads: got width={width}, heads={heads}")


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


class MultiHeadAttention(nn.Module):
    """Self-attention over x, or cross-attention from x to `context` when `cross=True`.

    Weights: `qkv` (D -> 3D) for self-attention, `q` and `kv` for cross-attention, `proj` (U_msa).
    """

    def __init__(self, width: int, heads: int, *, cross: bool = False, context_width: int | None = None,
                 bias: bool = True, attn_dropout: float = 0.0, proj_dropout: float = 0.0,
                 rotary: RotaryEmbedding | None = None, impl: AttentionImpl = "auto", locality: bool = False) -> None:
        super().__init__()
        check_heads(width, heads)
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention impl {impl!r}; expected one of {ATTENTION_IMPLS}")
        if locality and cross:
            raise ValueError("locality self-attention masks each token's own key; cross-attention has none")
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
        self.locality = locality
        # tau of softmax(Q K^T / tau), learned; None: the plain sqrt(D_h)
        self.temperature = nn.Parameter(torch.tensor(math.sqrt(self.head_dim))) if locality else None
        # The attention function this layer calls (attend.py); `anyformer.plan.prepare` may set another.
        self.attend: Attend = explicit if impl == "explicit" else sdpa
        self.attend_packed: AttendPacked | None = None  # see the module's docstring; set by the plan only
        # Weights hooks by handle id: (the thread that registered it, the hook). A hook sees the weights
        # of its own thread's calls only: a server may run other requests through the layer meanwhile.
        self._weights_hooks: OrderedDict[int, tuple[int, WeightsHook]] = OrderedDict()  # weakly referenced by handles

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
                mask: Tensor | None = None, cache: KVCache | None = None, layer: int = 0,
                queries: int | None = None) -> Tensor:
        """x: (B, N, D); context: (B, M, D_c) for cross-attention. Returns y: (B, N, D).

        `queries=n`: only the first n tokens query (all N are keys and values); y is (B, n, D).
        A classifier that reads the class token needs no more from the last layer.
        `cache`: x's keys and values are written into its `layer` (`KVCache.update`) at its position,
        where x's first token stands, and each query attends over the buffer masked to its own
        position and those before (the causal mask, whatever `causal` says); a `mask` is given over
        the whole buffer.
        """
        B, N, _ = x.shape
        self._check(context, causal, mask, cache, queries)
        if self.cross:
            q = self._heads(self.q(x), 1)[0]
            k, v = self._heads(self.kv(context), 2)
        else:
            packed = self.qkv(x)
            if self.attend_packed is not None and self._plain(mask, cache, queries):
                out = self.attend_packed(packed.unflatten(-1, (3, self.heads, self.head_dim)), causal)
                if out is not None:
                    return self._project(out)
            q, k, v = self._heads(packed, 3)
        if self.rotary is not None:
            offset = 0 if cache is None else cache.position
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        visible = None
        if cache is not None:  # the cache's mask is the causal one, whatever `causal` says
            k, v, visible = cache.update(layer, k, v)
            mask, causal = None if mask is None else mask[..., :k.shape[2]], False  # a mask over the buffer
        if queries is not None:
            q, N = q[:, :, :queries], min(queries, N)
        mask = _as_attn_mask(mask, B, N, k.shape[2])
        if visible is not None:
            mask = visible if mask is None else mask & visible
        if self.locality:
            q, mask = self._local(q, mask, k.shape[2])
        out = self._attend(q, k, v, mask, causal, self.attn_dropout if self.training else 0.0)
        # (B, H, N, D_h) -> (B, N, D); for one position the heads are already in that order.
        out = out.reshape(B, 1, self.width) if N == 1 else out.transpose(1, 2).reshape(B, N, self.width)
        return self._project(out)

    def _project(self, heads: Tensor) -> Tensor:
        """U_msa over the heads concatenated (B, N, D), then the projection's dropout."""
        y = self.proj(heads)
        return y if self.proj_drop is None else self.proj_drop(y)

    def _local(self, q: Tensor, mask: Tensor | None, keys: int) -> tuple[Tensor, Tensor | None]:
        """Locality self-attention's two changes: q scaled so that the attention function's Q K^T / sqrt(D_h)
        is Q K^T / tau, and the diagonal (query i, key i) masked; a lone token keeps its only key."""
        q = q * (math.sqrt(self.head_dim) / self.temperature)
        if keys == 1:
            return q, mask
        others = ~torch.eye(q.shape[2], keys, dtype=torch.bool, device=q.device)
        return q, others if mask is None else mask & others

    def _plain(self, mask: Tensor | None, cache: KVCache | None, queries: int | None) -> bool:
        """Nothing comes between the projection and attention: no rotary positions, cache, fewer
        queries, mask, locality, attention dropout in training or weights hook of this thread."""
        return (self.rotary is None and cache is None and mask is None and queries is None and not self.locality
                and not (self.training and self.attn_dropout > 0) and not (self._weights_hooks and self.hooks_here()))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
        """The layer's attention function, or where this thread registered a weights hook the matrix
        written out, its weights (B, H, N, M) handed to each hook."""
        hooks = self._weights_hooks and self.hooks_here()  # no call at all on the usual path: no hooks
        if not hooks:
            return self.attend(q, k, v, mask, causal, dropout)
        out, weights = attention_explicit(q, k, v, causal=causal, mask=mask, dropout=dropout, training=dropout > 0)
        for hook in hooks:
            hook(weights)
        return out

    def hooks_here(self) -> list[WeightsHook]:
        """The weights hooks this thread registered (none asked of the thread where there are none at all,
        so that a compiled forward without hooks traces no thread lookup)."""
        if not self._weights_hooks:
            return []
        me = threading.get_ident()
        return [hook for thread, hook in self._weights_hooks.values() if thread == me]

    def register_weights_hook(self, hook: WeightsHook) -> RemovableHandle:
        """Call `hook(weights)` with this layer's attention weights (B, H, N, M) at each of this
        thread's forward calls until the handle is removed; those calls compute the matrix written
        out (`functional.attention_explicit`), the rest of the model as before."""
        handle = RemovableHandle(self._weights_hooks)
        self._weights_hooks[handle.id] = (threading.get_ident(), hook)
        return handle

    def _check(self, context: Tensor | None, causal: bool, mask: Tensor | None, cache: KVCache | None,
               queries: int | None) -> None:
        if queries is not None and (causal or cache is not None or (mask is not None and mask.dim() != 2)):
            raise ValueError("queries=n takes no causal mask, cache or per-query mask (key padding only)")
        if self.locality and (causal or cache is not None):
            raise ValueError("locality self-attention masks each token's own key; a causal or cached call would "
                             "leave the first token nothing to attend to")
        if self.cross and context is None:
            raise ValueError("cross-attention needs a context tensor (B, M, D_c)")
        if not self.cross and context is not None:
            raise ValueError("this attention layer is self-attention; it takes no context")
