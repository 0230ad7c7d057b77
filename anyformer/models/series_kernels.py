"""Random-kernel features as tokens: MiniRocket's convolutions (Dempster et al. 2021), pooled per patch.

MiniRocket convolves a series with 84 fixed kernels of 9 taps (weight -1 everywhere, 2 at three of the
nine taps: every choice of three) at dilations spread exponentially up to the series' length, and
thresholds each output at biases taken from quantiles of a training series' own output. A feature is
the proportion of positive values (PPV) above its bias. MiniRocket takes that proportion over the whole
series, one number per (kernel, dilation, bias), and fits a linear classifier on ~10,000 of them.

Here the same proportions are taken over each patch of the series as well as over all of it: the patch
proportions are tokens (one vector of F features a patch, what each kernel found there), the whole
series' proportions one more token in front. A transformer then reads where in the series each pattern
occurs, which a global proportion forgets. The kernels and dilations depend on the length alone; the
biases are fitted once, from the training series (`fit`), and saved with the model as buffers.

Multivariate series: each (kernel, dilation) sums its convolution over a random subset of 1 to 9
channels, as MiniRocket's multivariate transform does. Unequal lengths: steps past a series' end are
never counted, and a patch that starts past the end is empty (a zero vector, masked by the model).
"""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

TAPS = 9
KERNELS = 84  # every choice of the 3 taps (of 9) that weigh 2; the other 6 weigh -1, so each sums to 0
GOLDEN = (math.sqrt(5) + 1) / 2


def kernel_weights() -> Tensor:
    """(84, 9): MiniRocket's kernels."""
    w = torch.full((KERNELS, TAPS), -1.0)
    for k, taps in enumerate(combinations(range(TAPS), 3)):
        w[k, list(taps)] = 2.0
    return w


def dilations_for(length: int, features: int, max_dilations: int = 32) -> tuple[list[int], list[int]]:
    """MiniRocket's dilations for a series of `length` steps and how many biases each gets per kernel:
    up to 32 dilations spaced exponentially from 1 to (length - 1) / 8, so that the widest kernel spans
    the series; the features per kernel (`features` / 84) shared out among them."""
    per_kernel = max(1, features // KERNELS)
    count = min(per_kernel, max_dilations)
    top = math.log2(max(length - 1, TAPS - 1) / (TAPS - 1))
    spaced = np.logspace(0, top, count, base=2).astype(np.int64)
    dilations, repeats = np.unique(spaced, return_counts=True)
    shares = (repeats * (per_kernel / count)).astype(np.int64)
    for i in range(int(per_kernel - shares.sum())):  # the remainder, one each from the smallest dilation
        shares[i % len(shares)] += 1
    return [int(d) for d in dilations], [int(s) for s in shares]


class RandomKernelFeatures(nn.Module):
    """(B, C, T), lengths -> proportions of positive values (B, F, 1 + L): over the whole series, then
    over each of the L patches of `patch` steps every `stride` steps."""

    def __init__(self, channels: int, length: int, features: int, patch: int, stride: int, seed: int = 0) -> None:
        super().__init__()
        self.channels, self.length, self.patch, self.stride = channels, length, patch, stride
        self.dilations, self.shares = dilations_for(length, features)
        base = kernel_weights()
        combos = len(self.dilations) * KERNELS
        # Which channels each (dilation, kernel) sums over: 1 to min(C, 9), few more often than many.
        # Drawn by numpy, so that a model built on the meta device (shapes only) draws nothing there.
        rng = np.random.default_rng(seed)
        counts = (2 ** rng.uniform(0, math.log2(min(channels, TAPS) + 1), combos)).astype(np.int64)
        chosen = np.zeros((combos, channels), dtype=np.float32)
        for i, n in enumerate(counts):
            chosen[i, rng.permutation(channels)[:max(1, min(int(n), channels))]] = 1.0
        mask = torch.from_numpy(chosen).to(base.device)
        self.register_buffer("weight", base[None].repeat(len(self.dilations), 1, 1).flatten(0, 1)[:, None, :]
                             * mask[:, :, None], persistent=False)  # (combos, C, 9)
        # Half the (dilation, kernel) pairs count only the steps their kernel sees without zero padding
        # (MiniRocket alternates, so that both the edges and the interior are read).
        self.register_buffer("unpadded", (torch.arange(combos) + torch.arange(combos) // KERNELS) % 2 == 1,
                             persistent=False)
        self.register_buffer("biases", torch.zeros(sum(self.shares) * KERNELS))
        self.seed = seed

    @property
    def num_features(self) -> int:
        return int(self.biases.numel())

    @property
    def patches(self) -> int:
        return math.ceil(max(self.length - self.patch, 0) / self.stride) + 1

    def _convolve(self, series: Tensor, j: int) -> Tensor:
        """(B, C, T) -> (B, 84, T): the kernels at dilation j, zero padding keeping the length."""
        d = self.dilations[j]
        w = self.weight[j * KERNELS:(j + 1) * KERNELS]
        return F.conv1d(series, w, padding=4 * d, dilation=d)

    def _valid(self, lengths: Tensor, T: int, j: int) -> Tensor:
        """(B, 84, T) bool: the steps each kernel of dilation j counts in a series of `lengths` steps."""
        d, t = self.dilations[j], torch.arange(T, device=lengths.device)
        inside = t[None] < lengths[:, None]                                            # (B, T)
        edge = 4 * d
        # Where a series is too short for an unpadded interior, its kernel counts every step it has.
        interior = inside & (t[None] >= edge) & (t[None] < (lengths[:, None] - edge))
        interior = torch.where((lengths > 2 * edge)[:, None], interior, inside)
        unpadded = self.unpadded[j * KERNELS:(j + 1) * KERNELS]
        return torch.where(unpadded[None, :, None], interior[:, None], inside[:, None])

    @torch.no_grad()
    def fit(self, series: Tensor, lengths: Tensor) -> None:
        """Biases from the training series: for each (dilation, kernel), quantiles of one randomly drawn
        series' output over the steps it has, at MiniRocket's low-discrepancy levels (i * golden) mod 1."""
        g = torch.Generator().manual_seed(self.seed + 1)
        levels = torch.tensor([(i * GOLDEN) % 1 for i in range(1, self.num_features + 1)], dtype=torch.float64)
        biases, start = [], 0
        for j, share in enumerate(self.shares):
            picks = torch.randint(len(series), (KERNELS,), generator=g)
            for k in range(KERNELS):
                i = int(picks[k])
                out = self._convolve(series[i:i + 1].float(), j)[0, k, :int(lengths[i])].double()
                biases.append(torch.quantile(out, levels[start:start + share]))
                start += share
        self.biases.copy_(torch.cat(biases).float())

    def forward(self, series: Tensor, lengths: Tensor | None = None) -> Tensor:
        """(B, C, T) -> (B, F, 1 + L) proportions: the whole series first, then each patch in order."""
        B, _, T = series.shape
        lengths = (torch.full((B,), T, device=series.device) if lengths is None
                   else lengths.to(series.device).clamp(max=T))
        starts = torch.arange(self.patches, device=series.device) * self.stride
        # A series shorter than the model's length has patches past its last step: empty, zero features.
        starts, ends = starts.clamp(max=T), (starts + self.patch).clamp(max=T)
        out, start = [], 0
        for j, share in enumerate(self.shares):
            conv = self._convolve(series.float(), j)                                   # (B, 84, T)
            valid = self._valid(lengths, T, j)                                         # (B, 84, T)
            b = self.biases[start:start + share * KERNELS].view(KERNELS, share, 1)
            start += share * KERNELS
            hits = ((conv[:, :, None] > b) & valid[:, :, None]).float()                # (B, 84, s, T)
            # Counts over any window from running sums: one cumsum, then differences at the edges.
            run = F.pad(hits.cumsum(-1), (1, 0))
            seen = F.pad(valid.float().cumsum(-1), (1, 0))[:, :, None]
            whole = run[..., -1:] / seen[..., -1:].clamp(min=1)
            parts = (run[..., ends] - run[..., starts]) / (seen[..., ends] - seen[..., starts]).clamp(min=1)
            out.append(torch.cat([whole, parts], dim=-1).flatten(1, 2))                # (B, 84 s, 1 + L)
        return torch.cat(out, dim=1)
