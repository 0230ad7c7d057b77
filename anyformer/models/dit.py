"""Diffusion Transformer (DiT, Peebles & Xie) trained by flow matching: the same backbone, with the
output side put to work. A noisy image goes in as patch tokens, its velocity comes out of
`PatchOutput` (the patch-output head), and the flow time and class steer every block.

c = TimeEmbedding(t) + ClassEmbedding(y)
z0 = x_t E + E_pos;  z_l = adaLN-block(z_{l-1}, c);  out = PatchOutput(adaLN(z_L, c))

`predict="v"`: out is the velocity (DiT, SiT). `predict="x"`: out is the clean image x^ and the
velocity follows from the path, v = (x_t - x^) / t (Li & He 2025, "Back to Basics"): clean images lie
near a low-dimensional manifold, noise does not, which matters for large patches. t is floored at
T_MIN there. On MNIST with 4x4 patches, 600 proxy steps of either looked alike; v is the default.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..nn import (ClassEmbedding, FinalAdaLN, LearnedPosition, PatchEmbedding, PatchOutput, SinusoidalPosition,
                  TimeEmbedding, Transformer)
from ..nn.conditioning import AdaLNModulation
from ..nn.embeddings import index_span
from ..shapes import pair, patch_grid
from . import flow
from .base import Model, check_sizes, matmul_weights

DIT_POSITIONS = ("sinusoidal", "learned")
DIT_PREDICTS = ("x", "v")
T_MIN = 0.05  # predict="x": v = (x_t - x^) / max(t, T_MIN), so that t -> 0 cannot blow the velocity up


@dataclass
class DiTConfig:
    image_size: int | tuple[int, int] = 28
    in_chans: int = 1
    patch_size: int | tuple[int, int] = 2
    num_classes: int = 10
    width: int = 256
    depth: int = 6
    heads: int = 4
    mlp_hidden: int = 1024
    position: str = "sinusoidal"     # sinusoidal (fixed 2-D, as DiT) | learned
    predict: str = "v"               # what the head outputs: v (the velocity, DiT/SiT) or x (the clean image)
    time_freq_dim: int = 256         # channels of the time sinusoid before its MLP
    norm_eps: float = 1e-6
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.position not in DIT_POSITIONS:
            raise ValueError(f"unknown DiT position {self.position!r}; expected one of {DIT_POSITIONS}")
        if self.predict not in DIT_PREDICTS:
            raise ValueError(f"unknown DiT prediction {self.predict!r}; expected one of {DIT_PREDICTS}")
        check_sizes(self, ("in_chans", "num_classes", "width", "depth", "heads", "mlp_hidden", "time_freq_dim"))
        patch_grid(self.image_size, self.patch_size)  # refuses a patch that does not tile the image

    @property
    def grid(self) -> tuple[int, int]:
        return patch_grid(self.image_size, self.patch_size)


class DiT(Model):
    """A class-conditional generator. `dit(x_t, t, y)` -> velocity (B, C, H, W), for noisy images
    x_t (B, C, H, W), flow times t (B,) in [0, 1] and labels y (B,) (index num_classes: no class).
    `dit.sample(labels, steps=, cfg=, seed=, method=)` -> uint8 images (N, C, H, W)."""

    family = "dit"
    config_class = DiTConfig

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        self.config = c = config
        n = c.grid[0] * c.grid[1]
        self.patch_embed = PatchEmbedding(c.patch_size, c.in_chans, c.width)
        self.pos = SinusoidalPosition(n, c.width, grid=c.grid) if c.position == "sinusoidal" else LearnedPosition(n, c.width)
        self.time_embed = TimeEmbedding(c.width, c.time_freq_dim)
        self.class_embed = ClassEmbedding(c.num_classes, c.width)
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, final_norm=False,
                                    norm_eps=c.norm_eps, impl=c.attn_impl, adaln=True)
        self.final = FinalAdaLN(c.width, c.norm_eps)
        self.head = PatchOutput(c.width, c.patch_size, c.in_chans)
        for m in self.time_embed.mlp:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)  # DiT's choice: the time MLP starts mild, not truncated
        # Zero-initialised output (DiT): the untrained model predicts 0 (v = 0, or x^ = 0: the mean
        # pixel), and the first gradients shape the head before they reach the blocks through it.
        nn.init.zeros_(self.head.proj.weight)
        nn.init.zeros_(self.head.proj.bias)
        with torch.no_grad():  # a patch embedding like a linear layer's (DiT: Xavier on the flattened kernel)
            w = self.patch_embed.proj.weight
            nn.init.xavier_uniform_(w.view(w.shape[0], -1))
            nn.init.zeros_(self.patch_embed.proj.bias)

    @property
    def null_class(self) -> int:
        return self.config.num_classes

    def image_shape(self) -> tuple[int, int, int]:
        h, w = pair(self.config.image_size)
        return self.config.in_chans, h, w

    def condition(self, t: Tensor, y: Tensor) -> Tensor:
        """c (B, D) from flow times t (B,) and labels y (B,), the null class allowed."""
        span = index_span(y)
        if span is not None and (span[0] < 0 or span[1] > self.null_class):
            raise ValueError(f"labels must lie in [0, {self.null_class}] ({self.null_class} = no class); "
                             f"got values in [{span[0]}, {span[1]}]")
        return self.time_embed(t) + self.class_embed(y)

    def forward(self, x: Tensor, t: Tensor | float, y: Tensor) -> Tensor:
        """x_t (B, C, H, W), t (B,) or one number, y (B,) -> velocity (B, C, H, W)."""
        expected = pair(self.config.image_size)
        if x.dim() != 4 or tuple(x.shape[-2:]) != expected:
            raise ValueError(f"expected images (B, {self.config.in_chans}, {expected[0]}, {expected[1]}), "
                             f"got {tuple(x.shape)}")
        t = torch.as_tensor(t, dtype=torch.float32, device=x.device)
        t = t.expand(x.shape[0]) if t.dim() == 0 else t
        if t.shape != (x.shape[0],) or y.shape != (x.shape[0],):
            raise ValueError(f"expected one time and one label per image ({x.shape[0]}), got t {tuple(t.shape)} "
                             f"and y {tuple(y.shape)}")
        c = self.condition(t, y)
        tokens = self.backbone(self.pos(self.patch_embed(x)), cond=c)
        out = self.head(self.final(tokens, c), self.config.grid)
        if self.config.predict == "v":
            return out
        return (x - out) / t.clamp_min(T_MIN).view(-1, 1, 1, 1)

    def sample(self, labels: Tensor, *, steps: int = 50, cfg: float = 1.0, seed: int | None = None,
               method: str = "heun") -> Tensor:
        """uint8 images (N, C, H, W) of classes `labels` (N,), from noise by `steps` ODE steps
        (method "heun" or "euler"), guidance scale `cfg` (1: none); a seed fixes the images."""
        return flow.sample(self, labels, steps=steps, cfg=cfg, seed=seed, method=method)

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one image's forward pass: 2 per weight per token for the patch projection,
        the blocks' attention and MLP and the output head; 2 per weight once per image for the
        condition (time MLP and every adaLN modulation); 4 N^2 D per layer for attention."""
        c = self.config
        n = c.grid[0] * c.grid[1]
        if seq_len is not None and seq_len != n:
            raise ValueError(f"seq_len must be {n} (the patch tokens of a {c.image_size} image), got {seq_len!r}")
        modulation = sum(m.proj.weight.numel() for m in self.modules() if isinstance(m, AdaLNModulation))
        per_token = (matmul_weights(self.patch_embed) + matmul_weights(self.backbone) + matmul_weights(self.final)
                     + matmul_weights(self.head) - modulation)
        per_image = modulation + matmul_weights(self.time_embed)
        return float(2 * n * per_token + 2 * per_image + 4 * c.depth * n * n * c.width)
