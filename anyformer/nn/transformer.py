"""The backbone: a stack of identical blocks, each attention then MLP, with residuals and LayerNorm.

Pre-norm (Turner 2023; GPT-2, ViT):   x = x + MHA(LN(x));  x = x + MLP(LN(x))
Post-norm (BERT):                              x = LN(x + MHA(x));  x = LN(x + MLP(x))
adaLN-Zero (DiT), conditioned on c (B, D):     x = x + g1 MHA(LN(x)(1 + s1) + b1);  x = x + g2 MLP(LN(x)(1 + s2) + b2)
                                               (b, s, g) from a zero-initialised linear map of c
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Callable, Iterator, Literal, Sequence

import torch
from torch import Tensor, nn

from .attention import AttentionImpl, KVCache, MultiHeadAttention
from .conditioning import AdaLNModulation, modulate
from .dropout import Dropout
from .mlp import MLP, ConvMLP, GridMixing
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

    With `cross=True` a cross-attention sub-layer sits between them (decoder style). `queries=n` (the last block of a
    class-token classifier): outputs for the first n tokens only, which attend to all of them.
    `adaln=True` (pre-norm only): norms without affine parameters, modulated by a condition c
    (B, D) given to forward as `cond`, with gated branches that start closed (the identity).
    `mlp_mixing`: the MLP also mixes neighbouring patch tokens (`ConvMLP`); it needs every token, so
    not `queries=n` (a Transformer's `keep` then runs the last block whole).
    """

    def __init__(self, width: int, heads: int, *, mlp_hidden: int | None = None, mlp_layers: int = 1,
                 norm: NormPlacement = "pre", norm_eps: float = 1e-5, activation: str = "gelu",
                 bias: bool = True, dropout: float = 0.0, attn_dropout: float = 0.0,
                 drop_path: float = 0.0, layer_scale: float | None = None, cross: bool = False,
                 rotary: RotaryEmbedding | None = None, impl: AttentionImpl = "auto", adaln: bool = False,
                 locality: bool = False, mlp_mixing: GridMixing | None = None) -> None:
        super().__init__()
        if norm not in ("pre", "post"):
            raise ValueError(f"unknown norm placement {norm!r}; expected 'pre' or 'post'")
        if adaln and norm != "pre":
            raise ValueError("adaln=True modulates pre-norm blocks; it needs norm='pre'")
        self.pre_norm = norm == "pre"
        self.cross = cross
        # adaLN's shift and scale come from the condition: a norm's own affine parameters would be redundant.
        self.modulation = AdaLNModulation(width, 6) if adaln else None
        self.norm1 = nn.LayerNorm(width, eps=norm_eps, elementwise_affine=not adaln)
        self.attn = MultiHeadAttention(width, heads, bias=bias, attn_dropout=attn_dropout,
                                       proj_dropout=dropout, rotary=rotary, impl=impl, locality=locality)
        if cross:
            self.norm_cross = nn.LayerNorm(width, eps=norm_eps)
            self.cross_attn = MultiHeadAttention(width, heads, cross=True, bias=bias,
                                                 attn_dropout=attn_dropout, proj_dropout=dropout, impl=impl)
        self.norm2 = nn.LayerNorm(width, eps=norm_eps, elementwise_affine=not adaln)
        # `dropout` acts where GPT-2, nanoGPT, BERT and HF's ViT put it: on each residual branch's
        # output; not on the MLP's 4x wider hidden activations (as timm also does), nor on the
        # attention matrix unless `attn_dropout` asks (on CPU that forces SDPA off its fast kernel).
        if mlp_mixing is not None and mlp_layers != 1:
            raise ValueError(f"an MLP that mixes the patch grid has one hidden layer, got mlp_layers={mlp_layers}")
        self.mlp = (MLP(width, mlp_hidden or 4 * width, layers=mlp_layers, activation=activation, bias=bias)
                    if mlp_mixing is None else
                    ConvMLP(width, mlp_hidden or 4 * width, mlp_mixing, activation=activation, bias=bias))
        # Unused parts are None rather than nn.Identity: each module call costs about a microsecond
        # of Python, and a one-token generation step of gpt2 makes over a hundred of them.
        self.mlp_drop = Dropout(dropout) if dropout > 0 else None
        self.ls1 = LayerScale(width, layer_scale) if layer_scale else None
        self.ls2 = LayerScale(width, layer_scale) if layer_scale else None
        self.drop_path = drop_path

    def forward(self, x: Tensor, *, causal: bool = False, mask: Tensor | None = None,
                context: Tensor | None = None, context_mask: Tensor | None = None,
                cache: KVCache | None = None, layer: int = 0, queries: int | None = None,
                cond: Tensor | None = None) -> Tensor:
        """x (B, N, D) -> (B, N, D); with `queries=n`, (B, n, D). `cond` (B, D): adaLN blocks only.
        `cache`, `layer`: see MultiHeadAttention.forward (generation: the block's layer of the cache)."""
        if self.modulation is not None:
            if cond is None:
                raise ValueError("this block is adaLN-modulated: give forward a condition cond of shape (B, D)")
            if cache is not None or queries is not None:
                raise ValueError("adaLN blocks are for generators of whole images: no KV cache, no queries=n")
            return self._adaln(x, cond, causal, mask, context, context_mask)
        if cond is not None:
            raise ValueError("cond was given to a block built without adaln=True")
        if self.pre_norm:
            return self._pre_norm(x, causal, mask, context, context_mask, cache, layer, queries)
        return self._post_norm(x, causal, mask, context, context_mask, cache, layer, queries)

    def _pre_norm(self, x: Tensor, causal: bool, mask: Tensor | None, context: Tensor | None,
                  context_mask: Tensor | None, cache: KVCache | None, layer: int,
                  queries: int | None) -> Tensor:
        """x = x + MHA(LN(x));  x = x + MLP(LN(x))"""
        a = self.attn(self.norm1(x), causal=causal, mask=mask, cache=cache, layer=layer, queries=queries)
        x = (x if queries is None else x[:, :queries]) + self._branch(a, self.ls1)
        if self.cross:
            x = x + self._branch(self.cross_attn(self.norm_cross(x), context, mask=context_mask))
        return x + self._branch(self._mlp(self.norm2(x)), self.ls2)

    def _post_norm(self, x: Tensor, causal: bool, mask: Tensor | None, context: Tensor | None,
                   context_mask: Tensor | None, cache: KVCache | None, layer: int,
                   queries: int | None) -> Tensor:
        """x = LN(x + MHA(x));  x = LN(x + MLP(x))"""
        a = self.attn(x, causal=causal, mask=mask, cache=cache, layer=layer, queries=queries)
        x = self.norm1((x if queries is None else x[:, :queries]) + self._branch(a, self.ls1))
        if self.cross:
            x = self.norm_cross(x + self._branch(self.cross_attn(x, context, mask=context_mask)))
        return self.norm2(x + self._branch(self._mlp(x), self.ls2))

    def _adaln(self, x: Tensor, c: Tensor, causal: bool, mask: Tensor | None, context: Tensor | None,
               context_mask: Tensor | None) -> Tensor:
        """x = x + g1 MHA(LN(x)(1 + s1) + b1);  x = x + g2 MLP(LN(x)(1 + s2) + b2)"""
        b1, s1, g1, b2, s2, g2 = self.modulation(c)
        a = self.attn(modulate(self.norm1(x), b1, s1), causal=causal, mask=mask)
        x = x + self._branch(g1[:, None] * a, self.ls1)
        if self.cross:
            x = x + self._branch(self.cross_attn(self.norm_cross(x), context, mask=context_mask))
        return x + self._branch(g2[:, None] * self._mlp(modulate(self.norm2(x), b2, s2)), self.ls2)

    def _mlp(self, h: Tensor) -> Tensor:
        m = self.mlp(h)
        return m if self.mlp_drop is None else self.mlp_drop(m)

    def _branch(self, h: Tensor, ls: LayerScale | None = None) -> Tensor:
        """A residual branch as it joins the stream: layer-scaled, and dropped per sample in training."""
        if ls is not None:
            h = ls(h)
        return drop_path(h, self.drop_path, self.training) if self.drop_path else h


class Transformer(nn.Module):
    """The backbone: (B, N, D) tokens in, (B, N, D) tokens out.

    Attention weights leave by one way, the hook (`attention_weights`, below): the layers asked
    take the explicit, slower path while it is on. `trunk(x, return_attention=...)` is the public
    contract's shorthand for it.
    """

    def __init__(self, width: int, depth: int, heads: int, *, mlp_hidden: int | None = None,
                 mlp_layers: int = 1, norm: NormPlacement = "pre", final_norm: bool = True,
                 norm_eps: float = 1e-5, activation: str = "gelu", bias: bool = True,
                 dropout: float = 0.0, attn_dropout: float = 0.0, drop_path: float = 0.0,
                 layer_scale: float | None = None, cross: bool = False, rotary: bool = False,
                 max_len: int = 4096, impl: AttentionImpl = "auto", adaln: bool = False,
                 locality: bool = False, mlp_mixing: GridMixing | None = None) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.width, self.depth, self.heads = width, depth, heads  # width % heads: each block's attention checks
        rope = RotaryEmbedding(width // heads, max_len) if rotary else None
        self.blocks = nn.ModuleList(
            TransformerBlock(width, heads, mlp_hidden=mlp_hidden, mlp_layers=mlp_layers, norm=norm,
                             norm_eps=norm_eps, activation=activation, bias=bias, dropout=dropout,
                             attn_dropout=attn_dropout, layer_scale=layer_scale, cross=cross,
                             rotary=rope, impl=impl, adaln=adaln, locality=locality, mlp_mixing=mlp_mixing,
                             drop_path=drop_path * i / max(depth - 1, 1))  # deeper blocks drop more
            for i in range(depth))
        # Pre-norm leaves the residual stream unnormalised, so a final norm precedes the heads.
        self.norm = nn.LayerNorm(width, eps=norm_eps) if final_norm else None
        self.apply(init_weights)
        for block in self.blocks:  # adaLN-Zero: the truncated-normal init above must not open the gates
            if block.modulation is not None:
                block.modulation.reset_parameters()

    def forward(self, x: Tensor, *, causal: bool = False, mask: Tensor | None = None,
                return_attention: bool | Sequence[int] = False, context: Tensor | None = None,
                context_mask: Tensor | None = None, cache: KVCache | None = None,
                keep: int | None = None, cond: Tensor | None = None):
        """(B, N, D) -> (B, N, D). With `return_attention` (True, or layer numbers: negative from the
        end, in the order asked) it returns (tokens, weights), one (B, heads, N, N) per layer asked.

        `cache`: the KVCache of every layer (generation), x standing at its position
        (MultiHeadAttention.forward), which moves on by N. `keep=n`:
        return only the first n tokens (e.g. 1: the class token). The last block then computes its
        attention queries, MLP and the final norm for those n alone: the same values, for half (MLP
        as wide as the tokens) to three quarters (MLP 4x) of a block's work less. `cond` (B, D): the
        condition of adaLN blocks."""
        if return_attention is not False and return_attention is not None:
            with attention_weights(self, return_attention) as weights:
                y = self._blocks(x, causal, mask, context, context_mask, cache, keep, cond)
            return y, weights
        return self._blocks(x, causal, mask, context, context_mask, cache, keep, cond)

    def _blocks(self, x: Tensor, causal: bool, mask: Tensor | None, context: Tensor | None,
                context_mask: Tensor | None, cache: KVCache | None, keep: int | None,
                cond: Tensor | None = None) -> Tensor:
        if keep is not None and not (isinstance(keep, int) and keep >= 1):
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        if x.dim() != 3 or x.shape[-1] != self.width:
            raise ValueError(f"expected tokens of shape (B, N, {self.width}), got {tuple(x.shape)}")
        if cache is not None and cache.layers != self.depth:
            raise ValueError(f"the cache holds {cache.layers} layers; this backbone has {self.depth}")
        last = self.depth - 1
        # A hooked last layer computes every query row, so that its weights are whole (N x N, as rollout
        # needs them); the tokens beyond `keep` are then dropped, and what comes out is the same.
        # So does a last block whose MLP mixes the patch grid: it needs every token's neighbours.
        whole = keep is not None and (bool(self.blocks[last].attn.hooks_here())
                                      or isinstance(self.blocks[last].mlp, ConvMLP))
        for i, block in enumerate(self.blocks):
            x = block(x, causal=causal, mask=mask, context=context, context_mask=context_mask,
                      cache=cache, layer=i, queries=keep if i == last and not whole else None, cond=cond)
        if whole:
            x = x[:, :keep]
        return x if self.norm is None else self.norm(x)

    def _layers_asked(self, layers: bool | Sequence[int]) -> list[int]:
        if layers is True:
            return list(range(self.depth))
        if layers is False or layers is None:
            return []
        asked = []
        for i in layers:
            if not isinstance(i, int) or not -self.depth <= i < self.depth:
                raise ValueError(f"attention layers must be ints in [-{self.depth}, {self.depth}); got {i!r}")
            asked.append(i % self.depth)
        return asked


def backbone_of(model: nn.Module) -> Transformer:
    """The Transformer a model's blocks live in: the model itself, or its `backbone`."""
    trunk = model if isinstance(model, Transformer) else getattr(model, "backbone", None)
    if not isinstance(trunk, Transformer):
        raise TypeError(f"{type(model).__name__} has no transformer backbone to take attention from "
                        f"(expected a Transformer, or a model whose .backbone is one)")
    return trunk


@contextmanager
def attention_weights(model: nn.Module, layers: bool | Sequence[int] = True,
                      on_layer: Callable[[int, Tensor], None] | None = None) -> Iterator[list[Tensor]]:
    """While open, each forward of `model` (any anyformer model, or a Transformer) hands out the
    attention weights of the layers asked (True: all; ints, negative from the end: those, in that
    order), each (B, heads, N, M):

        with attention_weights(gpt, [-1]) as weights:
            logits = gpt(idx)
        weights[0]  # the last layer's

    The list holds the last forward's weights in the order asked. With `on_layer`, each asked layer's
    weights go to `on_layer(layer, weights)` as soon as the layer has computed them and the list
    stays empty: nothing keeps them, so the extra memory is one layer's weights (rollout over a large
    image; under `torch.no_grad()`, or autograd keeps them for backward)."""
    trunk = backbone_of(model)
    asked = trunk._layers_asked(layers)
    kept: dict[int, Tensor] = {}
    weights: list[Tensor] = []

    def keep(i: int, w: Tensor) -> None:
        kept[i] = w
        weights[:] = [kept[j] for j in asked if j in kept]

    hand_over = keep if on_layer is None else on_layer
    handles = [trunk.blocks[i].attn.register_weights_hook(partial(hand_over, i)) for i in dict.fromkeys(asked)]
    try:
        yield weights
    finally:
        for handle in handles:
            handle.remove()


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """Truncated-normal linear weights and zero biases, as ViT and GPT-2 initialise them."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
