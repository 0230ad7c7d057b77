"""Series Transformer: a time series cut into patches, each patch a token by one linear map, then
the same backbone and classifier head as the ViT.

across channels:  z0 = [x_class; P E] + E_pos,    P (L, C p): the p steps of every channel at once
per channel:      z0 = [x_class; P_c E + e_c] + E_pos(time),  P_c (L, p): each channel's own patches,
                  e_c a learned channel vector, so that C x L tokens share one map E (PatchTST-style)
difference=True: each channel's first difference x[t] - x[t-1] read beside it, as C more channels.
stem="kernels":   z0 = [x_class + K(x) E; K_1(x) E; ...; K_L(x) E] + E_pos, K_l(x) the proportions of
                  positive values of MiniRocket's fixed random kernels over patch l (K(x): over the whole
                  series), standardised with the training series' statistics (series_kernels.py)
pool="mean":      the head reads the mean of the tokens a series has instead of the first token.
Series shorter than the model's length are zero-padded; their padded patches are masked out of
every attention (a key-padding mask), so a series reads the same whatever it is batched with.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import ClassifierHead, ClassToken, LearnedPosition, LinearEmbedding, Transformer, init_weights, sinusoidal_1d
from ..nn.dropout import Dropout
from .base import Model, check_sizes, matmul_weights
from .series_kernels import RandomKernelFeatures

PATCHINGS = ("across", "channel")
SERIES_POSITIONS = ("learned", "sinusoidal", "rotary")
STEMS = ("patches", "kernels")
SERIES_POOLS = ("cls", "mean")


@dataclass
class SeriesConfig:
    channels: int = 1
    length: int = 128                # the longest series the model takes (shorter ones are padded)
    patch_size: int = 8
    patch_stride: int | None = None  # steps between patch starts; None: patch_size (patches do not overlap)
    patching: str = "across"         # across: one token per patch of all channels; channel: one per channel
    num_classes: int = 2
    position: str = "learned"        # learned | sinusoidal (fixed, added) | rotary (relative, in attention)
    difference: bool = False         # also read each channel's first difference, as extra channels
    stem: str = "patches"            # patches: a linear map of each patch's values; kernels: random-kernel features
    kernel_features: int = 10_000    # kernels: features a token (84 kernels x dilations x biases, as MiniRocket)
    kernel_seed: int = 0             # kernels: the channels each kernel sums over, the series its biases come from
    pool: str = "cls"                # what the head reads: the first token, or the mean of the tokens a series has
    token_drop: float = 0.0          # training only: each patch token masked out with this probability
    width: int = 64
    depth: int = 3
    heads: int = 4
    mlp_hidden: int = 128
    dropout: float = 0.1
    attn_dropout: float = 0.0
    drop_path: float = 0.1
    norm_eps: float = 1e-6
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.patching not in PATCHINGS:
            raise ValueError(f"unknown patching {self.patching!r}; expected one of {PATCHINGS}")
        if self.position not in SERIES_POSITIONS:
            raise ValueError(f"unknown position {self.position!r}; expected one of {SERIES_POSITIONS}")
        if self.position == "rotary" and self.patching == "channel":
            raise ValueError("position='rotary' rotates by token order, which per-channel patching does not "
                             "keep in time; use learned or sinusoidal positions with patching='channel'")
        if self.stem not in STEMS:
            raise ValueError(f"unknown stem {self.stem!r}; expected one of {STEMS}")
        if self.pool not in SERIES_POOLS:
            raise ValueError(f"unknown pool {self.pool!r}; expected one of {SERIES_POOLS}")
        if self.stem == "kernels" and (self.patching != "across" or self.difference):
            raise ValueError("stem='kernels' reads every channel in each kernel and makes its own slopes; "
                             "it takes patching='across' and difference=False")
        if not 0.0 <= self.token_drop < 1.0:
            raise ValueError(f"token_drop must be in [0, 1), got {self.token_drop!r}")
        check_sizes(self, ("channels", "length", "patch_size", "num_classes", "width", "depth", "heads",
                           "mlp_hidden", "kernel_features"))
        if self.patch_stride is not None and not 1 <= self.patch_stride <= self.patch_size:
            raise ValueError(f"patch_stride must be in [1, patch_size={self.patch_size}] (or null), "
                             f"got {self.patch_stride!r}")

    @property
    def in_channels(self) -> int:
        """Channels the input head reads: the series' own, and their first differences when asked."""
        return self.channels * (2 if self.difference else 1)

    @property
    def stride(self) -> int:
        return self.patch_stride or self.patch_size

    @property
    def patches(self) -> int:
        """Patches along time: starts 0, s, 2s, ... until one reaches the end (the last padded)."""
        return math.ceil(max(self.length - self.patch_size, 0) / self.stride) + 1

    @property
    def num_tokens(self) -> int:
        return self.patches * (self.channels if self.patching == "channel" else 1)


class SeriesTransformer(Model):
    """`model(series, lengths)` -> logits (B, classes); series (B, C, T) floats, T <= config.length,
    lengths (B,) ints (None: every series is T long)."""

    family = "series"
    config_class = SeriesConfig

    def __init__(self, config: SeriesConfig) -> None:
        super().__init__()
        self.config = c = config
        if c.stem == "kernels":
            self.kernels = RandomKernelFeatures(c.channels, c.length, c.kernel_features, c.patch_size, c.stride,
                                                seed=c.kernel_seed)
            per_token = self.kernels.num_features
            # The training series' feature statistics (fit_stem): proportions near 0 or 1 for most series
            # would otherwise reach the embedding at very different scales.
            self.register_buffer("feature_mean", torch.zeros(per_token))
            self.register_buffer("feature_std", torch.ones(per_token))
        else:
            self.kernels = None
            per_token = c.patch_size * (1 if c.patching == "channel" else c.in_channels)
        self.patch_embed = LinearEmbedding(per_token, c.width)
        self.channel_embed = (nn.Parameter(torch.randn(1, c.in_channels, 1, c.width).mul_(0.02))
                              if c.patching == "channel" else None)
        self.prefix = ClassToken(c.width)
        # Time positions as a (1, 1 + L, D) table: learned, fixed sinusoids, or zeros under rotary
        # (positions then enter attention as rotations of queries and keys, relative by construction).
        if c.position == "learned":
            self.pos = LearnedPosition(1 + c.patches, c.width)
        else:
            table = sinusoidal_1d(1 + c.patches, c.width) if c.position == "sinusoidal" else torch.zeros(1 + c.patches, c.width)
            self.register_buffer("pos_table", table[None], persistent=False)
        self.pos_drop = Dropout(c.dropout) if c.dropout > 0 else None
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm_eps=c.norm_eps,
                                    dropout=c.dropout, attn_dropout=c.attn_dropout, drop_path=c.drop_path,
                                    rotary=c.position == "rotary", max_len=1 + c.num_tokens, impl=c.attn_impl)
        self.head = ClassifierHead(c.width, c.num_classes)
        self.patch_embed.apply(init_weights)
        self.head.apply(init_weights)
        with torch.no_grad():
            nn.init.normal_(self.prefix.cls_token, std=1e-6)

    def _check(self, series: Tensor, lengths: Tensor | None) -> None:
        c = self.config
        if series.dim() != 3 or series.shape[1] != c.channels:
            raise ValueError(f"expected series of shape (B, {c.channels}, T) (channels fixed at {c.channels}), "
                             f"got {tuple(series.shape)}")
        if series.shape[2] > c.length:
            raise ValueError(f"series of {series.shape[2]} steps is longer than the {c.length} this model takes")
        if not series.is_floating_point():
            raise TypeError(f"series must be a floating-point tensor, got dtype {series.dtype}")
        if lengths is not None and (lengths.dim() != 1 or lengths.shape[0] != series.shape[0]):
            raise ValueError(f"lengths must have shape ({series.shape[0]},), got {tuple(lengths.shape)}")

    def tokens(self, series: Tensor | None, lengths: Tensor | None = None, *,
               features: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Input head: (B, C, T) -> tokens (B, 1 + N, D) with positions, and the key-padding mask
        (B, 1 + N), True where a token holds data (None when every token does). `features`: the kernel
        stem's output for these series (`stem_features`), when computed before (the stem is fixed)."""
        c = self.config
        if features is not None:
            if c.stem != "kernels":
                raise ValueError("features are the kernel stem's; this model's stem is 'patches'")
            B, T = features.shape[0], c.length
        else:
            self._check(series, lengths)
            B, T = series.shape[0], series.shape[2]
        if c.stem == "kernels":
            f = self.stem_features(series, lengths) if features is None else features
            emb = self.patch_embed((f - self.feature_mean) / self.feature_std)       # (B, 1 + L, D)
            whole, tok = emb[:, :1], emb[:, 1:]
        else:
            whole, tok = 0.0, self._patch_tokens(series, lengths)
        device = tok.device
        # Positions by time; the channel tokens of one time share a position.
        table = self.pos.pos_embed if self.config.position == "learned" else self.pos_table
        time_pos = table[:, 1:]
        tok = (tok + time_pos) if c.patching == "across" else (tok + time_pos[:, None]).flatten(1, 2)
        cls = self.prefix.cls_token.expand(B, -1, -1) + table[:, :1] + whole
        z = torch.cat([cls, tok], dim=1)
        z = z if self.pos_drop is None else self.pos_drop(z)
        steps = torch.full((B,), T, device=device) if lengths is None else lengths.to(device).clamp(max=T)
        dropping = self.training and c.token_drop > 0
        if bool((steps > (c.patches - 1) * c.stride).all()) and not dropping:
            return z, None  # no patch is empty: the fused attention path without a mask
        have = torch.arange(c.patches, device=device)[None] * c.stride < steps[:, None]  # (B, L)
        if dropping:  # patch dropout: the first token always stays, so no series is left without one
            have = have & (torch.rand(have.shape, device=device) >= c.token_drop)
        have = have if c.patching == "across" else have[:, None].expand(-1, c.in_channels, -1).flatten(1)
        return z, torch.cat([torch.ones(B, 1, dtype=torch.bool, device=device), have], dim=1)

    def _patch_tokens(self, series: Tensor, lengths: Tensor | None) -> Tensor:
        """The linear patch stem: (B, C, T) -> (B, L, D), or (B, C' L, D) per channel."""
        c, (_, C, T) = self.config, series.shape
        # Whatever lies past a series' end is not part of it (nor is the step down to zero there).
        keep = None if lengths is None else (torch.arange(T, device=series.device)
                                             < lengths.to(series.device)[:, None])[:, None]
        series = series if keep is None else series * keep
        if c.difference:
            series = torch.cat([series, self._difference(series, keep)], dim=1)
            C = c.in_channels
        x = F.pad(series, (0, (c.patches - 1) * c.stride + c.patch_size - T))
        x = x.unfold(-1, c.patch_size, c.stride)                         # (B, C, L, p)
        if c.patching == "across":
            return self.patch_embed(x.permute(0, 2, 1, 3).flatten(2))    # (B, L, D) from (B, L, C p)
        return self.patch_embed(x.flatten(1, 2)).unflatten(1, (C, c.patches)) + self.channel_embed

    def stem_features(self, series: Tensor, lengths: Tensor | None = None) -> Tensor:
        """The kernel stem's proportions (B, 1 + L, F), before standardisation: fixed once fitted, so
        training computes them once per series."""
        if self.kernels is None:
            raise ValueError("stem_features needs stem='kernels'")
        self._check(series, lengths)
        return self.kernels(series, lengths).transpose(1, 2)

    @torch.no_grad()
    def fit_stem(self, series: Tensor, lengths: Tensor, chunk: int = 16) -> Tensor:
        """Fits the kernel stem to the training series (its biases, then the features' mean and
        standard deviation over the tokens that hold data) and returns their features (N, 1 + L, F)."""
        if self.kernels is None:
            raise ValueError("fit_stem needs stem='kernels'")
        self.kernels.fit(series, lengths)
        feats = torch.cat([self.stem_features(series[i:i + chunk], lengths[i:i + chunk])
                           for i in range(0, len(series), chunk)])
        c = self.config
        steps = lengths.clamp(max=series.shape[-1])
        have = torch.cat([torch.ones(len(series), 1, dtype=torch.bool),
                          torch.arange(c.patches)[None] * c.stride < steps[:, None].cpu()], dim=1)
        rows = feats[have.to(feats.device)].double()                                   # (tokens, F)
        self.feature_mean.copy_(rows.mean(0).float())
        # A feature that never varies in training carries nothing; a floor keeps it from being blown up.
        self.feature_std.copy_(rows.std(0).clamp(min=1e-2).float())
        return feats

    @staticmethod
    def _difference(series: Tensor, keep: Tensor | None) -> Tensor:
        """x[t] - x[t-1] (0 at t = 0), zero where `keep` (B, 1, T) is False: a series' slope, read
        beside its level."""
        d = F.pad(series[..., 1:] - series[..., :-1], (1, 0))
        return d if keep is None else d * keep

    def forward(self, series: Tensor | None, lengths: Tensor | None = None, *,
                features: Tensor | None = None) -> Tensor:
        """(B, C, T), (B,) -> logits (B, classes). `features`: the kernel stem's output for the series, in
        place of them (`stem_features`). Attention weights, (B, heads, 1 + N, 1 + N) with the class token
        first: `nn.attention_weights(model, layers)` around the call."""
        z, mask = self.tokens(series, lengths, features=features)
        if self.config.pool == "cls":
            return self.head(self.backbone(z, mask=mask, keep=1))  # the head reads the class token alone
        return self.head(self._mean(self.backbone(z, mask=mask), mask))

    @staticmethod
    def _mean(out: Tensor, mask: Tensor | None) -> Tensor:
        """(B, N, D) -> (B, 1, D): the mean of the tokens that hold data, as the one token the head reads."""
        if mask is None:
            return out.mean(1, keepdim=True)
        # Summed and counted in fp32 and int64, rounded once: bf16 holds integers exactly only up to
        # 256, so a bf16 count of 257 tokens (or a sum of 257 ones) would be 256.
        m = mask[..., None]
        return ((out.float() * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)).to(out.dtype)

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one full-length series: 2 per weight per token, 4 N^2 D per layer."""
        c = self.config
        n = 1 + c.num_tokens if seq_len is None else seq_len
        return float(2 * n * matmul_weights(self.backbone) + 2 * (n - 1) * matmul_weights(self.patch_embed)
                     + 4 * c.depth * n * n * c.width + 2 * matmul_weights(self.head))
