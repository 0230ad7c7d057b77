"""A GPT's one-token step with its blocks on anyformer's own kernel (native/decode.cpp), one call for all
of them: the decode decision's `native` choice (plan/decode.py), which the plan measures against the
model's own eager forward and takes where faster and equal within a summation order's rounding.

The input head (token and position), the final norm and the LM head stay the model's own modules;
the blocks between them run in one native call, which writes each layer's key and value into the
cache at its position, as `KVCache.update` does. Several tokens at once (a prompt, a refill) and any
call the kernel does not cover (attention weights hooked meanwhile) run the eager forward.
"""
from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..models.generation import next_logits
from ..nn import KVCache
from . import native

if TYPE_CHECKING:
    from ..models.gpt import GPT

__all__ = ["NativeDecodeStep", "unsupported"]

# native/decode.cpp's activation codes
ACTIVATIONS = {"gelu": 0, "gelu_tanh": 1, "relu": 2}
MAX_HEAD_DIM = 512  # the kernel's per-head buffer


def _activation(act: nn.Module) -> str | None:
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    return "relu" if isinstance(act, nn.ReLU) else None


def unsupported(model: "GPT") -> str | None:
    """Why the native step cannot run `model`'s blocks (None: it can). It takes fp32 CPU pre-norm blocks of
    self-attention and a one-hidden-layer MLP (GELU, tanh GELU or ReLU), without rotary positions, layer
    scale, adaLN or locality, where the kernel library builds here."""
    p = next(model.parameters())
    if p.device.type != "cpu" or p.dtype != torch.float32:
        return f"takes float32 CPU weights, not {p.dtype} on {p.device.type}"
    trunk = model.backbone
    if trunk.width // trunk.heads > MAX_HEAD_DIM:
        return f"heads of at most {MAX_HEAD_DIM} floats, not {trunk.width // trunk.heads}"
    for block in trunk.blocks:
        if not block.pre_norm or block.cross or block.modulation is not None or block.ls1 or block.ls2:
            return "pre-norm self-attention blocks without layer scale or adaLN only"
        attn, mlp = block.attn, block.mlp
        if attn.rotary is not None or attn.locality or attn.cross:
            return "no rotary positions or locality attention"
        if len(mlp.hidden) or mlp.drop is not None or _activation(mlp.act) is None:
            return "an MLP of one hidden layer with GELU, tanh GELU or ReLU only"
    first = trunk.blocks[0]
    if any(_activation(b.mlp.act) != _activation(first.mlp.act) or b.mlp.fc1.out_features != first.mlp.fc1.out_features
           or b.norm1.eps != first.norm1.eps or b.norm2.eps != first.norm1.eps for b in trunk.blocks):
        return "blocks of one activation, MLP width and norm eps"
    if native.library() is None:
        return f"the native kernels are not available here ({native.why_unavailable()})"
    return None


class NativeDecodeStep:
    """`step(model, ids, cache) -> (B, vocab) logits`, as `generation.next_logits`, for the model it was
    made for (`unsupported(model)` None): one token a sequence on the native kernel, anything else eager."""

    def __init__(self, model: "GPT") -> None:
        why = unsupported(model)
        if why is not None:
            raise ValueError(f"the native decode step cannot run this model: {why}")
        trunk = model.backbone
        self.width, self.heads, self.depth = trunk.width, trunk.heads, trunk.depth
        self.hidden = trunk.blocks[0].mlp.fc1.out_features
        self.eps = trunk.blocks[0].norm1.eps
        self.act = ACTIVATIONS[_activation(trunk.blocks[0].mlp.act)]
        # Where each block's 12 tensors live, in the kernel's order (native/decode.cpp's Slot): the modules'
        # own parameter tables, read at every call, so that parameters replaced (load_state_dict(assign=True))
        # or moved (.to()) after the step was made are read as they are now.
        self.slots: list[tuple[dict, str]] = []
        for blk in trunk.blocks:
            a, m = blk.attn, blk.mlp
            for module in (blk.norm1, a.qkv, a.proj, blk.norm2, m.fc1, m.fc2):
                self.slots += [(module._parameters, "weight"), (module._parameters, "bias")]
        # The last table of addresses, its cache (weakly: a cache freed gives its buffers back) and what it was
        # built from: building and checking it anew took about an eighth of a char GPT's step.
        self._memo: tuple[weakref.ref, tuple, ctypes.Array] | None = None

    def weights(self) -> list[Tensor | None]:
        """Each block's 12 tensors in the kernel's order, as the model holds them now."""
        return [params[name] for params, name in self.slots]

    def table(self, cache: KVCache) -> ctypes.Array:
        """The kernel's table of addresses for `cache`: rebuilt (and checked) where a weight's memory,
        dtype, device or layout, or the cache, differs from the last call's."""
        weights = self.weights()
        key = tuple(None if t is None else (t.data_ptr(), t.dtype, t.is_cpu, t.is_contiguous()) for t in weights)
        memo = self._memo  # one read: another thread's generation may replace it meanwhile
        if memo is not None and memo[0]() is cache and memo[1] == key:
            return memo[2]
        table = _table(weights, cache)
        self._memo = (weakref.ref(cache), key, table)
        return table

    def __call__(self, model: "GPT", ids: Tensor, cache: KVCache | None) -> Tensor:
        if ids.shape[1] != 1 or cache is None or torch.is_grad_enabled() or _hooked(model):
            return next_logits(model, ids, cache)
        B, D, p = ids.shape[0], self.width, int(cache.position)
        if tuple(cache.k[0].shape[:2]) != (B, self.heads) or cache.layers != self.depth:
            raise ValueError(f"a cache of {cache.layers} layers of {tuple(cache.k[0].shape[:2])} (batch, heads) "
                             f"for a batch of {B} through {self.depth} layers of {self.heads} heads")
        if p >= cache.max_len:
            raise ValueError(f"KV cache holds at most {cache.max_len} positions; got {p} cached + 1 new")
        x = model.tokens(ids, cache).reshape(B, D).clone()  # its own memory: updated in place below
        table = self.table(cache)
        scratch = x.new_empty(B * (2 * D + self.hidden) + B * self.heads * cache.max_len)
        rc = native.library().gpt_decode_blocks(
            x.data_ptr(), B, D, self.heads, self.hidden, self.depth, table, cache.max_len, p, self.eps, self.act,
            scratch.data_ptr(), torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"anyformer native decode step: the kernel refused the call (code {rc})")
        cache.position += 1
        h = x.view(B, 1, D)
        h = h if model.backbone.norm is None else model.backbone.norm(h)
        return model.lm_head(h)[:, -1]


def _hooked(model: "GPT") -> bool:
    """Attention weights asked of this thread's calls (`nn.attention_weights`): the eager path computes them."""
    return any(b.attn._weights_hooks and b.attn.hooks_here() for b in model.backbone.blocks)


def _table(weights: list[Tensor | None], cache: KVCache) -> ctypes.Array:
    """The kernel's table of addresses: each layer's 12 weights (0 for a missing bias), then its cache's
    key and value buffers, which must be contiguous float32 (B, H, M, D_h)."""
    addresses: list[int] = []
    for layer in range(cache.layers):
        k, v = cache.k[layer], cache.v[layer]
        if k.dtype != torch.float32 or not (k.is_contiguous() and v.is_contiguous()):
            raise ValueError("the native decode step needs a float32 cache of contiguous buffers")
        block = weights[12 * layer:12 * layer + 12]
        if not all(t is None or (t.dtype is torch.float32 and t.device.type == "cpu" and t.is_contiguous())
                   for t in block):
            raise ValueError("the native decode step reads contiguous float32 CPU weights")
        addresses += [0 if t is None else t.data_ptr() for t in block]
        addresses += [k.data_ptr(), v.data_ptr()]
    return (ctypes.c_void_p * len(addresses))(*addresses)
