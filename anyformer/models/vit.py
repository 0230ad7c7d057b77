"""Vision Transformer: patches -> [class; patch tokens] + positions -> backbone -> classifier.

z0 = [x_class; x_p E] + E_pos;  z_l = blocks(z_{l-1});  y = head(LN(z_L)[class])   (Dosovitskiy et al., 2021)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from ..nn import (ClassifierHead, ClassToken, ConcatPosition, LearnedPosition, PatchEmbedding,
                  SinusoidalPosition, Transformer, attention_weights, init_weights)
from ..shapes import pair, patch_grid
from ..nn.dropout import Dropout
from ..nn.mlp import GridMixing
from ..nn.stems import STEM_NORMS, ConvStem
from .base import Model, check_seq_len, check_sizes, matmul_weights
from .eval_views import stack_views, view_count

VIT_POSITIONS = ("learned", "concat", "sinusoidal", "none")
VIT_STEMS = ("patch", "conv")


@dataclass
class ViTConfig:
    image_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    in_chans: int = 3
    num_classes: int = 1000
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_hidden: int = 3072
    mlp_layers: int = 1
    activation: str = "gelu"
    stem: str = "patch"              # patch: one strided conv (ViT); conv: 3x3 stride-2 convs (hybrid ViT)
    stem_channels: int = 0           # the conv stem's last-stage channels (0: width / 2)
    stem_convs: int = 1              # the conv stem's 3x3 convolutions a stage (the first stride 2, the rest 1)
    stem_norm: str = "none"          # none | batch: BatchNorm after each of the conv stem's 3x3 convolutions
    shifted_patches: bool = False    # the stem also sees four copies moved half a patch diagonally (Lee et al. 2021)
    position: str = "learned"        # learned | concat | sinusoidal (2-D) | none
    pos_width: int = 0               # channels of concatenated positions (position="concat")
    class_token: bool = True
    num_registers: int = 0
    pool: str = "cls"                # cls | mean | attention (a learned weighting of the patch tokens)
    head_hidden: int | None = None   # pre-logits layer (ViT-B pre-training: tanh; Turner's MNIST ViT: GELU)
    head_activation: str = "tanh"
    final_norm: bool = True
    norm_eps: float = 1e-6
    bias: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0
    layer_scale: float | None = None
    attn_impl: str = "auto"
    attn_locality: bool = False      # locality self-attention (Lee et al. 2021): learned temperature, no self-key
    mlp_conv: int = 0                # a depthwise k x k convolution over the patch grid in each MLP (0: none; Mix-FFN's 3)
    flip_average: bool = False       # in eval mode, the logits averaged over each image and its mirror image
    shift_average: int = 0           # in eval mode, also over its shifts by this many pixels up, down, left, right

    def __post_init__(self) -> None:
        if self.stem not in VIT_STEMS:
            raise ValueError(f"unknown ViT stem {self.stem!r}; expected one of {VIT_STEMS}")
        if self.position not in VIT_POSITIONS:
            raise ValueError(f"unknown ViT position {self.position!r}; expected one of {VIT_POSITIONS}")
        if self.position == "concat" and not 0 < self.pos_width < self.width:
            raise ValueError(f"position='concat' needs 0 < pos_width < width, got pos_width={self.pos_width}")
        check_sizes(self, ("in_chans", "num_classes", "width", "depth", "heads", "mlp_hidden"))
        if isinstance(self.stem_channels, bool) or not isinstance(self.stem_channels, int) or self.stem_channels < 0:
            raise ValueError(f"stem_channels must be 0 (half the width) or a positive integer, got {self.stem_channels!r}")
        if isinstance(self.stem_convs, bool) or not isinstance(self.stem_convs, int) or self.stem_convs < 1:
            raise ValueError(f"stem_convs must be a positive integer (3x3 convolutions a stage), got {self.stem_convs!r}")
        if self.stem_norm not in STEM_NORMS:
            raise ValueError(f"unknown stem_norm {self.stem_norm!r}; expected one of {STEM_NORMS}")
        if isinstance(self.mlp_conv, bool) or not isinstance(self.mlp_conv, int) or self.mlp_conv < 0 or (
                self.mlp_conv and self.mlp_conv % 2 == 0):
            raise ValueError(f"mlp_conv must be 0 (none) or an odd kernel size (3: a 3x3 window), got {self.mlp_conv!r}")
        if self.mlp_conv and self.mlp_layers != 1:
            raise ValueError(f"mlp_conv needs MLPs of one hidden layer, got mlp_layers={self.mlp_layers}")
        if not isinstance(self.shifted_patches, bool):
            raise ValueError(f"shifted_patches must be true or false, got {self.shifted_patches!r}")
        if isinstance(self.shift_average, bool) or not isinstance(self.shift_average, int) or not (
                0 <= self.shift_average < min(pair(self.image_size))):
            raise ValueError(f"shift_average must be 0 (none) or a shift in pixels under the image's shorter side "
                             f"({min(pair(self.image_size))}), got {self.shift_average!r}")
        patch_grid(self.image_size, self.patch_size)  # refuses a patch that does not tile the image

    @property
    def grid(self) -> tuple[int, int]:
        return patch_grid(self.image_size, self.patch_size)


class ViT(Model):
    """A ViT classifier. `vit(images)` -> logits (B, classes); images are (B, C, H, W) floats."""

    family = "vit"
    config_class = ViTConfig

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = c = config
        token_width = c.width - (c.pos_width if c.position == "concat" else 0)
        self.patch_embed = (PatchEmbedding(c.patch_size, c.in_chans, token_width, bias=c.bias,
                                           shifted=c.shifted_patches) if c.stem == "patch"
                            else ConvStem(c.patch_size, c.in_chans, token_width, c.stem_channels, c.stem_convs,
                                          c.stem_norm, shifted=c.shifted_patches))
        self.prefix = ClassToken(token_width, c.num_registers, c.class_token)
        n = c.grid[0] * c.grid[1] + self.prefix.num_prefix
        self.pos = {"learned": lambda: LearnedPosition(n, c.width),
                    "concat": lambda: ConcatPosition(n, c.pos_width),
                    "sinusoidal": lambda: SinusoidalPosition(n, c.width, grid=c.grid, prefix=self.prefix.num_prefix),
                    "none": lambda: None}[c.position]()
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, mlp_layers=c.mlp_layers,
                                    final_norm=c.final_norm, norm_eps=c.norm_eps, activation=c.activation,
                                    bias=c.bias, dropout=c.dropout, attn_dropout=c.attn_dropout,
                                    drop_path=c.drop_path, layer_scale=c.layer_scale, impl=c.attn_impl,
                                    locality=c.attn_locality,
                                    mlp_mixing=GridMixing(c.mlp_conv, c.grid, self.prefix.num_prefix) if c.mlp_conv else None)
        self.pos_drop = Dropout(c.dropout) if c.dropout > 0 else None
        self.head = ClassifierHead(c.width, c.num_classes, pool=c.pool, hidden=c.head_hidden,
                                   activation=c.head_activation, num_prefix=self.prefix.num_prefix)
        self.head.apply(init_weights)
        with torch.no_grad():  # tiny random prefix tokens, as timm, so they are not a symmetric zero
            for t in (self.prefix.cls_token, self.prefix.reg_token):
                if t is not None:
                    nn.init.normal_(t, std=1e-6)

    def tokens(self, images: Tensor) -> Tensor:
        """Input head: (B, C, H, W) -> (B, prefix + H/p * W/p, D) with positions."""
        expected = pair(self.config.image_size)
        if images.dim() == 4 and tuple(images.shape[-2:]) != expected and self.config.position != "none":
            raise ValueError(f"expected images of size {expected[0]}x{expected[1]} (the model's image_size), "
                             f"got {images.shape[-2]}x{images.shape[-1]}")
        x = self.prefix(self.patch_embed(images))
        x = x if self.pos is None else self.pos(x)
        return x if self.pos_drop is None else self.pos_drop(x)

    def forward_features(self, images: Tensor) -> Tensor:
        """Backbone output tokens (B, N, D), after the final norm."""
        return self.backbone(self.tokens(images))

    def forward(self, images: Tensor, return_attention: bool | Sequence[int] = False, *, views: bool | None = None):
        """images (B, C, H, W) -> logits (B, classes). With `return_attention` (True, or layer numbers):
        (logits, weights), one (B, heads, N, N) per layer asked over every token (class, registers,
        patches), taken by the hook (`nn.attention_weights`). `views`: the logits the mean over the
        config's test-time views (`flip_average`: the mirror image; `shift_average`: four shifts), in one
        batch (as many times the work); default (None): in eval mode; False: the images alone. Attention
        weights are the images' own: a call that asks for them reads one view."""
        if return_attention is not False and return_attention is not None:
            with attention_weights(self, return_attention) as weights:
                logits = self.forward(images, views=False)
            return logits, weights
        # A class-token head reads token 0 alone: the last block computes nothing else (unless its
        # weights are asked for). Any other head, e.g. one swapped in, gets every token.
        keep = 1 if isinstance(self.head, ClassifierHead) and self.head.pool == "cls" else None
        c = self.config
        n_views = view_count(c.flip_average, c.shift_average)
        if n_views > 1 and (views or (views is None and not self.training)):
            # Test-time augmentation with the views the model was trained on (mirror images, shifts).
            stacked = stack_views(images, c.flip_average, c.shift_average)
            logits = self.head(self.backbone(self.tokens(stacked), keep=keep))
            return logits.view(n_views, -1, *logits.shape[1:]).mean(0)
        return self.head(self.backbone(self.tokens(images), keep=keep))

    def pre_logits(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> (B, F): the penultimate features, what the head's final linear layer
        reads (the pooled token, after the pre-logits layer when there is one); `head.fc` of them
        gives the logits. A judge of generated images compares these (a Fréchet distance)."""
        head = self.head
        if not isinstance(head, ClassifierHead):
            raise TypeError(f"pre_logits needs the ViT's ClassifierHead, got a {type(head).__name__} head")
        keep = 1 if head.pool == "cls" else None  # as forward: a class-token head needs token 0 alone
        x = head.pooled(self.backbone(self.tokens(images), keep=keep))
        return x if head.pre_logits is None else head.pre_logits(x)

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one image's forward pass, as train/perf.py has counted them: 2 per
        weight per token it multiplies (the patch projection per patch, the blocks per token, the
        head once) and 4 N^2 D per layer for attention's two products over N tokens. `seq_len`:
        tokens per image, class and registers included (default: those of `image_size`). A conv
        stem counts each weight once per patch token, as a patch projection would: the finer
        positions its first convolutions also visit are left out."""
        c, prefix = self.config, self.prefix.num_prefix
        n = check_seq_len(seq_len, c.grid[0] * c.grid[1] + prefix, prefix + 1, None,
                          f"tokens per image: {prefix} class and register tokens and at least one patch")
        fwd = 2 * n * matmul_weights(self.backbone) + 2 * (n - prefix) * matmul_weights(self.patch_embed)
        return float(fwd + 4 * c.depth * n * n * c.width + 2 * matmul_weights(self.head))

    @classmethod
    def from_timm(cls, model_or_state_dict, **kwargs) -> "ViT":
        """From a timm VisionTransformer or its state dict; `image_size=(h, w)` resamples positions."""
        from ..interop.timm import from_timm
        return from_timm(model_or_state_dict, **kwargs)

    def to_timm(self, **kwargs) -> dict:
        """A state dict that timm's VisionTransformer loads with strict=True (see interop.timm)."""
        from ..interop.timm import to_timm
        return to_timm(self, **kwargs)

    @classmethod
    def from_hf(cls, model, **overrides) -> "ViT":
        """From a Hugging Face ViTModel or ViTForImageClassification."""
        from ..interop.hf import vit_from_hf
        return vit_from_hf(model, **overrides)

    def to_hf(self, architecture: str = "ViTForImageClassification"):
        """A Hugging Face ViTForImageClassification (or ViTModel) with these weights."""
        from ..interop.hf import vit_to_hf
        return vit_to_hf(self, architecture)
