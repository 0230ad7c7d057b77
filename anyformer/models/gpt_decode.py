"""One generation step of a GPT as one static graph, for `torch.compile`: the fast decode path.

A cached step computes one position, so it is bound by memory: every weight is read once per
token. Eager PyTorch spends it in ~10 separate kernels per block (and Python between them), and
sends each one-row product to a GEMM library, which reached 10-24 GB/s of weights here (2-core AMD
EPYC, the char GPT and gpt2) against 28-44 GB/s for a plain pass over them. Written below as a
product and a sum over the input features, each one-row product is a reduction that inductor fuses
into one loop over the weight; the norms, activations and residuals fuse around them. Same maths
as the eager step (IEEE products; only the summation order differs, as between MKL and oneDNN).

Static shapes, so one compile serves every step: the token's position is a tensor, its keys and
values are written into the preallocated cache at that position, and attention reads the whole
cache with the positions not yet written masked out (a mask, not a slice: the shape never
changes). The caches are `KVCache`s of `GPT.new_cache`, so eager and compiled steps share them.

Whether the compiled step runs is the speed plan's call (`anyformer.plan.compile_for_decode`):
measured against the eager step, numerics checked, compile time counted.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor, nn

from ..nn import KVCache
from ..nn.positions import rotate_pairs

if TYPE_CHECKING:
    from .gpt import GPT

Step = Callable[[Tensor, list[KVCache]], Tensor]  # (B, 1) ids, caches -> (B, vocab) logits


def static_decode_unsupported(model: "GPT") -> str | None:
    """Why `model` has no static decode step (None: it has one). The step below covers the
    pre-norm blocks a GPT is built from, on the CPU in float32, where it was measured."""
    p = next(model.parameters())
    if p.device.type != "cpu" or p.dtype != torch.float32:
        return f"measured for float32 on the CPU only, not {p.dtype} on {p.device.type}"
    for block in model.backbone.blocks:
        if not block.pre_norm or block.cross or block.modulation is not None:
            return "the step is written for pre-norm self-attention blocks"
    return None


def cache_length(model: "GPT", total: int) -> int:
    """Positions to allocate for `total` tokens: the next power of two (at least 64), at most the
    context. One compiled graph serves every request of the same bucket; the unused positions are
    masked, not read into the softmax."""
    n = 64
    while n < total:
        n *= 2
    return min(n, model.config.context)


def _matvec(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (B, K) W^T + b as a product and a sum over K: one fused pass over W under inductor."""
    y = (weight * x[:, None, :]).sum(-1)
    return y if bias is None else y + bias


def _lin(x: Tensor, layer: nn.Module) -> Tensor:
    return _matvec(x, layer.weight, layer.bias)


def _attend(q: Tensor, keys: Tensor, values: Tensor, visible: Tensor) -> Tensor:
    """One query per head, q (B, H, D_h), over the cache (B, H, L, D_h), the positions not `visible`
    (1, 1, L) masked: softmax(q K^T / sqrt(D_h)) V as products and sums, which inductor fuses into
    two passes over the cache. With SDPA, a profile of the compiled char GPT step (2-core Intel Xeon,
    6 heads of 64 over 512 positions) showed six opaque ATen calls a step, one a layer, of about
    0.17 ms each: a fifth of the step; written this way the step is one fused kernel."""
    scores = (keys * q[:, :, None, :]).sum(-1) * q.shape[-1] ** -0.5  # (B, H, L)
    weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
    return (weights[..., None] * values).sum(2)


def decode_step(model: "GPT", ids: Tensor, pos: Tensor, keys: list[Tensor], values: list[Tensor]) -> Tensor:
    """Logits (B, vocab) for tokens `ids` (B,) standing at position `pos` (a 0-dim int64 tensor),
    after the positions before it held in `keys`/`values` (one (B, H, L, D_h) buffer per layer,
    written here at `pos`). Eval mode: no dropout."""
    at = pos.view(1)  # index_select with a tensor: a plain index by a tensor would leave the graph
    x = model.tok_embed.weight.index_select(0, ids)
    pe = model.pos
    if pe is not None:
        table = pe.pos_embed if hasattr(pe, "pos_embed") else pe.table
        x = x + table[0].index_select(0, at).to(x.dtype)
    length = keys[0].shape[2]
    visible = (torch.arange(length, device=x.device) <= pos).view(1, 1, length)
    for block, kb, vb in zip(model.backbone.blocks, keys, values):
        a = block.attn
        b, heads, dh = x.shape[0], a.heads, a.head_dim
        q, k, v = _lin(block.norm1(x), a.qkv).view(b, 3, heads, dh).unbind(1)  # each (B, H, D_h)
        if a.rotary is not None:
            cos, sin = (t.index_select(0, at).to(x.dtype) for t in (a.rotary.cos, a.rotary.sin))
            q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
        kb.index_copy_(2, at, k[:, :, None])
        vb.index_copy_(2, at, v[:, :, None])
        o = _attend(q, kb, vb, visible)  # (B, H, D_h)
        x = x + block._branch(_lin(o.reshape(b, heads * dh), a.proj), block.ls1)
        m = block.mlp
        h = m.act(_lin(block.norm2(x), m.fc1))
        for layer in m.hidden:
            h = m.act(_lin(h, layer))
        x = x + block._branch(_lin(h, m.fc2), block.ls2)
    if model.backbone.norm is not None:
        x = model.backbone.norm(x)
    return _matvec(x, model.lm_head.weight, model.lm_head.bias)


def fresh_decode_step() -> Callable[..., Tensor]:
    """`decode_step` with a code object of its own. torch.compile keeps its graphs per code object and
    stops compiling a code object after a few recompiles (`recompile_limit`, 8), running it eagerly
    from then on: here that would be the slow product-and-sum form, unfused. With one code object
    per (model shape, batch, cache size) each compiles exactly one graph, however many a process makes."""
    f = decode_step
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def eager_step(model: "GPT") -> Step:
    """The model's own cached forward, one position: the stock candidate."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        return model(ids, cache=cache, last_only=True)[:, -1]
    return step


def static_step(model: "GPT", compiled: Callable[..., Tensor]) -> Step:
    """`compiled` (decode_step under torch.compile) behind the eager step's signature: it reads the
    position from the cache and moves every layer's length on by one, as `KVCache.append` does."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        pos = cache[0].length
        if pos >= cache[0].max_len:
            raise ValueError(f"KV cache holds at most {cache[0].max_len} positions; got {pos} cached + 1 new")
        out = compiled(model, ids[:, 0], torch.tensor(pos, device=ids.device),
                       [c.k for c in cache], [c.v for c in cache])
        for c in cache:
            c.length = pos + 1
        return out
    return step


def model_key(model: "GPT") -> str:
    """The shape of `model` as the plan file names it: what the compiled graph depends on."""
    c = model.config
    return (f"gpt-d{c.depth}-w{c.width}-h{c.heads}-m{c.mlp_hidden or 4 * c.width}-v{c.vocab_size}"
            f"-{c.position}-{c.activation}{'' if c.bias else '-nobias'}")


def plan_fields(model: "GPT", batch: int, cache: int) -> dict[str, object]:
    """The decode step's key in the plan file (`compile_for_decode` adds pass=decode)."""
    p = next(model.parameters())
    return dict(model=model_key(model), batch=batch, cache=cache, dtype=str(p.dtype).removeprefix("torch."),
                device=p.device.type)
