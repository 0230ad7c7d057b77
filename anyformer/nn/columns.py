"""Input heads for a table's row: each column one token (Gorishniy et al., 2021, FT-Transformer),
the seeds' two tokenisers side by side: a linear map for a number, a lookup table for a category.

number j:      t_j = x_j w_j + b_j                                   (linear)
               t_j = ReLU(W_j [sin 2 pi c_j x_j; cos 2 pi c_j x_j] + b_j)   (periodic: c_j (k,) learned
               frequencies, as the "PLR" embeddings of Gorishniy et al., 2022; a number's size then
               reaches the backbone through k waves rather than one line)
               a missing x_j (NaN): t_j = m_j, the column's own learned token
category j:    t_j = E_j[v] + b_j, E_j the column's lookup table (row 0: missing, 1: unknown, 2..: values)

Each column has its own weights, so a token also says which column it came from: no positions are
needed, and none are added (a row's columns are a set; attention is permutation-equivariant).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

NUMBER_EMBEDDINGS = ("linear", "periodic")

__all__ = ["NUMBER_EMBEDDINGS", "CategoryEmbedding", "NumberEmbedding"]


class NumberEmbedding(nn.Module):
    """(B, F) numbers, NaN where missing -> (B, F, D) tokens, one set of weights per column."""

    def __init__(self, features: int, width: int, kind: str = "linear", frequencies: int = 16,
                 sigma: float = 0.1) -> None:
        super().__init__()
        if kind not in NUMBER_EMBEDDINGS:
            raise ValueError(f"unknown number embedding {kind!r}; expected one of {NUMBER_EMBEDDINGS}")
        self.features, self.kind = features, kind
        bound = 1 / math.sqrt(width)
        if kind == "linear":
            self.weight = nn.Parameter(torch.empty(features, width).uniform_(-bound, bound))
        else:
            # sigma sets how fast the waves turn per unit of a standardised number (0.1: ten units per turn
            # for the slowest typical one), the scale Gorishniy et al. (2022) found to suit most data.
            self.frequencies = nn.Parameter(torch.randn(features, frequencies).mul_(sigma))
            self.weight = nn.Parameter(torch.empty(features, 2 * frequencies, width).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(features, width).uniform_(-bound, bound))
        self.missing = nn.Parameter(torch.randn(features, width).mul_(0.02))

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 2 or x.shape[1] != self.features:
            raise ValueError(f"expected numbers of shape (B, {self.features}), got {tuple(x.shape)}")
        missing = torch.isnan(x)
        x = torch.where(missing, torch.zeros_like(x), x)
        if self.kind == "linear":
            tokens = x[..., None] * self.weight + self.bias
        else:
            angle = 2 * math.pi * x[..., None] * self.frequencies                     # (B, F, k)
            waves = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)           # (B, F, 2k)
            tokens = torch.relu(torch.einsum("bfk,fkd->bfd", waves, self.weight) + self.bias)
        return torch.where(missing[..., None], self.missing.to(tokens.dtype), tokens)


class CategoryEmbedding(nn.Module):
    """(B, F) category indices -> (B, F, D): column j's index v reads row v of its own table (one table
    of sum(cardinalities) rows, each column at its offset), plus the column's bias."""

    def __init__(self, cardinalities: list[int], width: int) -> None:
        super().__init__()
        if any(c < 1 for c in cardinalities):
            raise ValueError(f"every category column needs at least one row in its table, got {cardinalities}")
        self.cardinalities = list(cardinalities)
        self.register_buffer("offsets", torch.tensor([0, *cardinalities[:-1]], dtype=torch.int64).cumsum(0),
                             persistent=False)
        self.register_buffer("limits", torch.tensor(cardinalities, dtype=torch.int64), persistent=False)
        bound = 1 / math.sqrt(width)
        self.weight = nn.Parameter(torch.empty(max(1, sum(cardinalities)), width).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(len(cardinalities), width).uniform_(-bound, bound))

    def forward(self, index: Tensor) -> Tensor:
        if index.dim() != 2 or index.shape[1] != len(self.cardinalities):
            raise ValueError(f"expected category indices of shape (B, {len(self.cardinalities)}), got "
                             f"{tuple(index.shape)}")
        # Checked where it costs no wait for a device (as TokenEmbedding's ids, `index_span`).
        if not torch.compiler.is_compiling() and index.numel() and (index.device.type == "cpu"
                                                                    or not torch.is_grad_enabled()):
            if bool(((index < 0) | (index >= self.limits)).any()):
                raise ValueError(f"category indices must lie in [0, cardinality) per column {self.cardinalities}")
        return nn.functional.embedding(index + self.offsets, self.weight) + self.bias
