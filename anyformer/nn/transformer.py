"""The backbone: a stack of identical blocks, each attention then MLP, with residuals and LayerNorm.

Pre-norm (seeds 000, 001, 002; GPT-2, ViT):   x = x + MHA(LN(x));  x = x + MLP(LN(x))
Post-norm (BERT):                              x = LN(x + MHA(x));  x = LN(x + MLP(x))
"""
from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import Tensor, nn

from .attention import AttentionImpl, KVCache, MultiHeadAttention
from .dropout import Dropout
from .mlp import MLP
from .positions import RotaryEmbedding

NormPlacement = Literal["pre", "post"]


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth: drop a sample's whole residual branch with probability p."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty(x.shape[0], *([1] * (x.dim() - 1))).bernoulli_(1 - p)
    return x * keep / (1 - p)


class LayerScale(nn.Module):
    """Per-channel learned scale on a residual branch (CaiT), started small so deep stacks train."""

    def __init__(self, width: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((width,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class TransformerBlock(nn.Module):
    """One block: multi-head self-attention and a token-wise MLP, each behind a residual.

    With `cross=True` a cross-attention sub-layer sits between them (decoder style).
    """

    def __init__(self, width: int, heads: int, *, mlp_hidden: int | None = None, mlp_layers: int = 1,
                 norm: NormPlacement = "pre", norm_eps: float = 1e-5, activation: str = "gelu",
                 bias: bool = True, dropout: float = 0.0, attn_dropout: float = 0.0,
                 drop_path: float = 0.0, layer_scale: float | None = None, cross: bool = False,
                 rotary: RotaryEmbedding | None = None, impl: AttentionImpl = "auto") -> None:
        super().__init__()
        if norm not in ("pre", "post"):
            raise ValueError(f"unknown norm placement {norm!r}; expected 'pre' or 'post'")
        self.pre_norm = norm == "pre"
        self.cross = cross
        self.norm1 = nn.LayerNorm(width, eps=norm_eps)
        self.attn = MultiHeadAttention(width, heads, bias=bias, attn_dropout=attn_dropout,
                                       proj_dropout=dropout, rotary=rotary, impl=impl)
        if cross:
            self.norm_cross = nn.LayerNorm(width, eps=norm_eps)
            self.cross_attn = MultiHeadAttention(width, heads, cross=True, bias=bias,
                                                 attn_dropout=attn_dropout, proj_dropout=dropout, impl=impl)
        self.norm2 = nn.LayerNorm(width, eps=norm_eps)
        # `dropout` acts where GPT-2, nanoGPT, BERT and HF's ViT put it: on each residual branch's
        # output (after the attention projection and after the MLP); the models add one after the
        # embeddings. Not on the MLP's hidden activations (timm's Mlp also drops there: a 4x wider
        # tensor to mask, which nanoGPT and GPT-2 do not do) and not on the attention matrix unless
        # `attn_dropout` asks, since on CPU a dropped attention matrix forces SDPA off its fast kernel.
        self.mlp = MLP(width, mlp_hidden or 4 * width, layers=mlp_layers, activation=activation, bias=bias)
        # Unused parts are None rather than nn.Identity: each module call costs about a microsecond
        # of Python, and a one-token generation step of gpt2 makes over a hundred of them.
        self.mlp_drop = Dropout(dropout) if dropout > 0 else None
        self.ls1 = LayerScale(width, layer_scale) if layer_scale else None
        self.ls2 = LayerScale(width, layer_scale) if layer_scale else None
        self.drop_path = drop_path

    def _residual(self, x: Tensor, branch: Tensor, ls: nn.Module | None, norm: nn.Module) -> Tensor:
        if ls is not None:
            branch = ls(branch)
        if self.drop_path:
            branch = drop_path(branch, self.drop_path, self.training)
        x = x + branch
        return x if self.pre_norm else norm(x)

    def forward(self, x: Tensor, *, causal: bool = False, mask: Tensor | None = None,
                context: Tensor | None = None, context_mask: Tensor | None = None,
                need_weights: bool = False, cache: KVCache | None = None,
                queries: int | None = None) -> tuple[Tensor, Tensor | None]:
        """`queries=n`: outputs for the first n tokens only, which attend to all of them."""
        h = self.norm1(x) if self.pre_norm else x
        a, weights = self.attn(h, causal=causal, mask=mask, need_weights=need_weights, cache=cache, queries=queries)
        x = self._residual(x if queries is None else x[:, :queries], a, self.ls1, self.norm1)
        if self.cross:
            h = self.norm_cross(x) if self.pre_norm else x
            c, _ = self.cross_attn(h, context, mask=context_mask)
            x = self._residual(x, c, None, self.norm_cross)
        h = self.norm2(x) if self.pre_norm else x
        m = self.mlp(h)
        x = self._residual(x, m if self.mlp_drop is None else self.mlp_drop(m), self.ls2, self.norm2)
        return x, weights


class Transformer(nn.Module):
    """The backbone: (B, N, D) tokens in, (B, N, D) tokens out.

    `return_attention=True` returns every layer's weights, a list of ints only those layers (in
    the order asked); only the layers asked take the explicit, slower path.
    """

    def __init__(self, width: int, depth: int, heads: int, *, mlp_hidden: int | None = None,
                 mlp_layers: int = 1, norm: NormPlacement = "pre", final_norm: bool = True,
                 norm_eps: float = 1e-5, activation: str = "gelu", bias: bool = True,
                 dropout: float = 0.0, attn_dropout: float = 0.0, drop_path: float = 0.0,
                 layer_scale: float | None = None, cross: bool = False, rotary: bool = False,
                 max_len: int = 4096, impl: AttentionImpl = "auto") -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if width % heads != 0:
            raise ValueError(f"width must be divisible by heads: got width={width}, heads={heads}")
        self.width, self.depth, self.heads = width, depth, heads
        rope = RotaryEmbedding(width // heads, max_len) if rotary else None
        self.blocks = nn.ModuleList(
            TransformerBlock(width, heads, mlp_hidden=mlp_hidden, mlp_layers=mlp_layers, norm=norm,
                             norm_eps=norm_eps, activation=activation, bias=bias, dropout=dropout,
                             attn_dropout=attn_dropout, layer_scale=layer_scale, cross=cross,
                             rotary=rope, impl=impl,
                             drop_path=drop_path * i / max(depth - 1, 1))  # deeper blocks drop more
            for i in range(depth))
        # Pre-norm leaves the residual stream unnormalised, so a final norm precedes the heads.
        self.norm = nn.LayerNorm(width, eps=norm_eps) if final_norm else nn.Identity()
        self.apply(init_weights)

    def _layers_asked(self, return_attention: bool | Sequence[int]) -> list[int]:
        if return_attention is True:
            return list(range(self.depth))
        if return_attention is False or return_attention is None:
            return []
        layers = []
        for i in return_attention:
            if not isinstance(i, int) or not -self.depth <= i < self.depth:
                raise ValueError(f"return_attention layers must be ints in [-{self.depth}, {self.depth}); got {i!r}")
            layers.append(i % self.depth)
        return layers

    def forward(self, x: Tensor, *, causal: bool = False, mask: Tensor | None = None,
                return_attention: bool | Sequence[int] = False, context: Tensor | None = None,
                context_mask: Tensor | None = None, cache: list[KVCache] | None = None,
                keep: int | None = None):
        """`keep=n`: return only the first n tokens (e.g. 1: the class token). The last block then
        computes its attention queries, MLP and the final norm for those n alone: the same
        values, for half (MLP as wide as the tokens) to three quarters (MLP 4x) of a block's work
        less. Attention weights asked of the last block then have n query rows."""
        if keep is not None and not (isinstance(keep, int) and keep >= 1):
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        if x.dim() != 3 or x.shape[-1] != self.width:
            raise ValueError(f"expected tokens of shape (B, N, {self.width}), got {tuple(x.shape)}")
        if cache is not None and len(cache) != self.depth:
            raise ValueError(f"cache must hold one KVCache per layer ({self.depth}), got {len(cache)}")
        asked = self._layers_asked(return_attention)
        weights: dict[int, Tensor] = {}
        for i, block in enumerate(self.blocks):
            last = i == self.depth - 1
            x, w = block(x, causal=causal, mask=mask, context=context, context_mask=context_mask,
                         need_weights=i in asked, cache=None if cache is None else cache[i],
                         queries=keep if last else None)
            if w is not None:
                weights[i] = w
        x = self.norm(x)
        if return_attention is False or return_attention is None:
            return x
        return x, [weights[i] for i in asked]


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """Truncated-normal linear weights and zero biases, as ViT and GPT-2 initialise them."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
