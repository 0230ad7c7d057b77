"""Masked autoencoder (He et al., 2021): hide most patches, encode the rest, rebuild the hidden ones.

    visible = shuffle(x_p E + E_pos)[:keep];  z = encoder([x_class; visible])
    u = unshuffle([W z; mask token ...]) + E_pos';  x_hat = PatchOutput(decoder(u))
    loss = mean over masked patches of mean_pixels (x_hat - x)^2

The encoder is a ViT's trunk with the same parameter names as `ViT` with a patch stem
(`patch_embed`, `prefix`, `pos`, `backbone`), so `vit_state_dict()` loads straight into a ViT of
`vit_config()` for fine-tuning. Everything of the decoder is named `decoder_*` and is dropped then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..nn import ClassToken, LearnedPosition, PatchEmbedding, PatchOutput, SinusoidalPosition, Transformer, init_weights
from ..nn.heads import unpatchify
from ..shapes import pair, patch_grid
from .base import Model, check_sizes, matmul_weights
from .vit import ViTConfig

MAE_POSITIONS = ("sinusoidal", "learned")
ENCODER_KEYS = ("patch_embed.", "prefix.", "pos.", "backbone.")  # the ViT trunk's parameter names


@dataclass
class MAEConfig:
    image_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    in_chans: int = 3
    # Encoder: a ViT trunk.
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_hidden: int = 3072
    position: str = "sinusoidal"    # fixed 2-D sinusoids, as the MAE paper; or learned
    class_token: bool = True
    norm_eps: float = 1e-6
    # Decoder: narrower and shallower; only pre-training uses it.
    decoder_width: int = 512
    decoder_depth: int = 8
    decoder_heads: int = 16
    decoder_mlp_hidden: int = 2048
    mask_ratio: float = 0.75
    norm_pix_loss: bool = False     # targets normalised per patch (the paper's better-features option)
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.position not in MAE_POSITIONS:
            raise ValueError(f"unknown MAE position {self.position!r}; expected one of {MAE_POSITIONS}")
        check_sizes(self, ("in_chans", "width", "depth", "heads", "mlp_hidden"))
        dec = dict(width=self.decoder_width, heads=self.decoder_heads, depth=self.decoder_depth,
                   mlp_hidden=self.decoder_mlp_hidden)
        for name, value in dec.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"decoder_{name} must be a positive integer, got {value!r}")
        if self.decoder_width % self.decoder_heads:
            raise ValueError(f"decoder_width must be divisible by decoder_heads: got {self.decoder_width}, "
                             f"{self.decoder_heads}")
        if self.decoder_width % 4:  # the decoder's fixed 2-D sinusoids split the width in four
            raise ValueError(f"decoder_width must be divisible by 4, got {self.decoder_width}")
        if self.position == "sinusoidal" and self.width % 4:
            raise ValueError(f"position='sinusoidal' needs a width divisible by 4, got {self.width}")
        if not isinstance(self.mask_ratio, (int, float)) or not 0 < self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {self.mask_ratio!r}")
        patch_grid(self.image_size, self.patch_size)  # refuses a patch that does not tile the image
        if self.num_visible < 1:
            raise ValueError(f"mask_ratio {self.mask_ratio} hides every one of the {self.num_patches} patches")

    @property
    def grid(self) -> tuple[int, int]:
        return patch_grid(self.image_size, self.patch_size)

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def num_visible(self) -> int:
        # The paper's int(N * (1 - ratio)): 49 patches at 75% keep 12 (24.5%), 196 keep 49 (25%).
        return int(self.num_patches * (1 - self.mask_ratio))


def patchify(images: Tensor, patch_size: int | tuple[int, int]) -> Tensor:
    """(B, C, H, W) -> (B, N, C * p * p), patches row-major over the grid (PatchEmbedding's order)."""
    B, C, H, W = images.shape
    ph, pw = pair(patch_size)
    x = images.reshape(B, C, H // ph, ph, W // pw, pw)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, (H // ph) * (W // pw), C * ph * pw)


def masked_patch_errors(prediction: Tensor, images: Tensor, mask: Tensor, patch_size: int | tuple[int, int],
                        norm_pix: bool = False) -> Tensor:
    """Per-patch mean squared error (B, N) of a predicted image against the true one, zero on
    visible patches (`mask` (B, N): True where hidden). `norm_pix`: each true patch is first
    standardised by its own mean and variance."""
    target = patchify(images.float(), patch_size)
    if norm_pix:
        mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
        target = (target - mean) / (var + 1e-6).sqrt()
    err = (patchify(prediction.float(), patch_size) - target).square().mean(-1)
    return err * mask


class MAE(Model):
    """`mae(images, noise)` -> the masked-patch loss; `noise` (B, N) picks the hidden patches (the
    largest `mask_ratio` of each row), so a seeded `random_noise` makes batches reproducible."""

    family = "mae"
    config_class = MAEConfig

    def __init__(self, config: MAEConfig) -> None:
        super().__init__()
        self.config = c = config
        self.patch_embed = PatchEmbedding(c.patch_size, c.in_chans, c.width)
        self.prefix = ClassToken(c.width, 0, c.class_token)
        p, n = self.prefix.num_prefix, c.num_patches
        self.pos = (SinusoidalPosition(n + p, c.width, grid=c.grid, prefix=p) if c.position == "sinusoidal"
                    else LearnedPosition(n + p, c.width))
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm_eps=c.norm_eps,
                                    impl=c.attn_impl)
        self.decoder_embed = nn.Linear(c.width, c.decoder_width)
        self.decoder_mask_token = nn.Parameter(torch.zeros(1, 1, c.decoder_width))
        self.decoder_pos = SinusoidalPosition(n + p, c.decoder_width, grid=c.grid, prefix=p)
        self.decoder = Transformer(c.decoder_width, c.decoder_depth, c.decoder_heads,
                                   mlp_hidden=c.decoder_mlp_hidden, norm_eps=c.norm_eps, impl=c.attn_impl)
        self.decoder_out = PatchOutput(c.decoder_width, c.patch_size, c.in_chans)
        self.decoder_embed.apply(init_weights)
        self.decoder_out.apply(init_weights)
        with torch.no_grad():
            nn.init.normal_(self.decoder_mask_token, std=0.02)
            if self.prefix.cls_token is not None:
                nn.init.normal_(self.prefix.cls_token, std=0.02)

    # ---------------------------------------------------------------- masking
    def random_noise(self, batch: int, generator: torch.Generator | None = None,
                     device: torch.device | str | None = None) -> Tensor:
        """(B, N) uniform noise: each image's own random order of patches (drawn on the CPU from
        `generator`, so a seed gives the same masks on every device)."""
        noise = torch.rand(batch, self.config.num_patches, generator=generator)
        return noise if device is None else noise.to(device)

    def _check_noise(self, images: Tensor, noise: Tensor) -> None:
        expected = (images.shape[0], self.config.num_patches)
        if noise.shape != expected:
            raise ValueError(f"expected noise of shape {expected} (one value per patch), got {tuple(noise.shape)}")

    def split(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        """(indices of the visible patches (B, keep), mask (B, N): True where hidden)."""
        keep = self.config.num_visible
        order = noise.argsort(dim=1)  # the smallest `keep` values stay visible
        visible = order[:, :keep]
        mask = torch.ones_like(noise, dtype=torch.bool).scatter(1, visible, False)
        return visible, mask

    # ---------------------------------------------------------------- encoder and decoder
    def _pos_table(self) -> Tensor:
        return self.pos.table if isinstance(self.pos, SinusoidalPosition) else self.pos.pos_embed

    def encode(self, images: Tensor, visible: Tensor | None = None) -> Tensor:
        """Encoder tokens (B, prefix + visible, D) after the final norm; every patch when `visible` is None."""
        expected = pair(self.config.image_size)
        if images.dim() == 4 and tuple(images.shape[-2:]) != expected:
            raise ValueError(f"expected images of size {expected[0]}x{expected[1]} (the model's image_size), "
                             f"got {images.shape[-2]}x{images.shape[-1]}")
        x = self.patch_embed(images)
        table, p = self._pos_table().to(x.dtype), self.prefix.num_prefix
        x = x + table[:, p:]
        if visible is not None:  # positions first: each kept token remembers where it came from
            x = x.gather(1, visible[..., None].expand(-1, -1, x.shape[-1]))
        x = self.prefix(x)
        if p:
            x = torch.cat([x[:, :p] + table[:, :p], x[:, p:]], dim=1)
        return self.backbone(x)

    def features(self, images: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, D): the mean of the patch tokens of the unmasked image (linear probes)."""
        return self.encode(images)[:, self.prefix.num_prefix:].mean(dim=1)

    def decode(self, tokens: Tensor, visible: Tensor) -> Tensor:
        """Encoder tokens of the visible patches -> the predicted image (B, C, H, W)."""
        c, p = self.config, self.prefix.num_prefix
        y = self.decoder_embed(tokens)
        B, D = y.shape[0], y.shape[-1]
        full = self.decoder_mask_token.to(y.dtype).expand(B, c.num_patches, D)
        full = full.scatter(1, visible[..., None].expand(-1, -1, D), y[:, p:])
        y = self.decoder_pos(torch.cat([y[:, :p], full], dim=1))
        return self.decoder_out(self.decoder(y)[:, p:], c.grid)

    def predict(self, images: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """(predicted image (B, C, H, W), mask (B, N): True where hidden)."""
        self._check_noise(images, noise)
        visible, mask = self.split(noise.to(images.device))
        return self.decode(self.encode(images, visible), visible), mask

    def patch_errors(self, images: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """(per-patch squared error (B, N), zero where visible; mask (B, N))."""
        prediction, mask = self.predict(images, noise)
        return masked_patch_errors(prediction, images, mask, self.config.patch_size, self.config.norm_pix_loss), mask

    def forward(self, images: Tensor, noise: Tensor | None = None, *,
                generator: torch.Generator | None = None) -> Tensor:
        """images (B, C, H, W) -> the mean squared error over the hidden patches' pixels (a scalar)."""
        if noise is None:
            noise = self.random_noise(images.shape[0], generator, images.device)
        errors, mask = self.patch_errors(images, noise)
        return errors.sum() / mask.sum()

    @torch.no_grad()
    def reconstruct(self, images: Tensor, noise: Tensor, fill: float = 0.0) -> tuple[Tensor, Tensor, Tensor]:
        """(masked input, reconstruction, original), each (B, C, H, W): the input with hidden
        patches set to `fill`; the prediction on hidden patches pasted among the visible ones
        (with `norm_pix_loss`, given back each true patch's mean and spread, as the paper shows it)."""
        prediction, mask = self.predict(images, noise)
        ps, grid = self.config.patch_size, self.config.grid
        pred, true = patchify(prediction.float(), ps), patchify(images.float(), ps)
        if self.config.norm_pix_loss:
            pred = pred * (true.var(-1, keepdim=True) + 1e-6).sqrt() + true.mean(-1, keepdim=True)
        hidden = mask[..., None]
        masked = torch.where(hidden, torch.full_like(true, fill), true)
        recon = torch.where(hidden, pred, true)
        return unpatchify(masked, ps, grid), unpatchify(recon, ps, grid), images.float()

    # ---------------------------------------------------------------- fine-tuning
    def vit_config(self, **overrides: Any) -> ViTConfig:
        """The ViT whose trunk is this encoder (mean-pooled patch tokens, as the paper fine-tunes)."""
        c = self.config
        values = dict(image_size=c.image_size, patch_size=c.patch_size, in_chans=c.in_chans, width=c.width,
                      depth=c.depth, heads=c.heads, mlp_hidden=c.mlp_hidden, position=c.position,
                      class_token=c.class_token, norm_eps=c.norm_eps, pool="mean", attn_impl=c.attn_impl)
        return ViTConfig(**{**values, **overrides})

    def vit_state_dict(self) -> dict[str, Tensor]:
        """The encoder's weights under a ViT's names (the same names: the decoder is left out)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith(ENCODER_KEYS)}

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one image's pre-training forward pass: the patch embedding of every patch
        (one convolution over the image, before the visible are kept), the encoder over the visible
        patches (and class token), the decoder over every patch. `seq_len` is not used."""
        c, p = self.config, self.prefix.num_prefix
        n_enc, n_dec = c.num_visible + p, c.num_patches + p
        enc = 2 * n_enc * matmul_weights(self.backbone) + 2 * c.num_patches * matmul_weights(self.patch_embed)
        dec = (2 * n_enc * matmul_weights(self.decoder_embed) + 2 * n_dec * matmul_weights(self.decoder)
               + 2 * c.num_patches * matmul_weights(self.decoder_out))
        attn = 4 * c.depth * n_enc ** 2 * c.width + 4 * c.decoder_depth * n_dec ** 2 * c.decoder_width
        return float(enc + dec + attn)
