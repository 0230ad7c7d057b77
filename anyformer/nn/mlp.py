"""The token-wise MLP: the same small network applied to every token independently (Turner, 2023);
and its variant for image tokens, whose hidden layer also mixes each token with its neighbours on the
patch grid (a depthwise convolution: SegFormer's Mix-FFN, Xie et al. 2021; LocalViT, Li et al. 2021)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .dropout import Dropout

ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),                        # exact erf GELU (ViT, BERT)
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's approximation
    "relu": lambda: nn.ReLU(),
    "tanh": lambda: nn.Tanh(),
}


def make_activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {tuple(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class MLP(nn.Module):
    """D -> hidden -> (hidden ->)* D with an activation after each hidden layer.

    `layers` counts hidden layers (Turner's (2023) ViT has one); weights are named `fc1`, `fc2`
    (and `hidden.i` for the extra layers) as in timm, so that layouts convert one to one.
    """

    def __init__(self, width: int, hidden: int, *, out: int | None = None, layers: int = 1,
                 activation: str = "gelu", bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"an MLP needs at least one hidden layer, got layers={layers}")
        self.fc1 = nn.Linear(width, hidden, bias=bias)
        self.act = make_activation(activation)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden, bias=bias) for _ in range(layers - 1))
        self.fc2 = nn.Linear(hidden, out or width, bias=bias)
        self.drop = Dropout(dropout) if dropout > 0 else None

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self.fc1(x))
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.fc2(x if self.drop is None else self.drop(x))


class GridMixing(NamedTuple):
    """Where an MLP's depthwise convolution runs: a `kernel` x `kernel` window over the `grid`
    (rows, columns) of patch tokens, which follow `prefix` tokens (class, registers) it leaves as they are."""
    kernel: int
    grid: tuple[int, int]
    prefix: int = 0


class ConvMLP(MLP):
    """D -> hidden -> depthwise k x k convolution over the patch grid -> activation -> D (Mix-FFN).

    A plain MLP sees one token; a ViT on a few thousand images must learn locality from the data
    alone, which a convolutional network is given. The depthwise convolution gives each hidden channel
    its neighbours on the grid for k^2 weights a channel, a few per cent of the block's work; the
    prefix tokens (no place on the grid) skip it. One activation, after the convolution, as Mix-FFN.
    """

    def __init__(self, width: int, hidden: int, mixing: GridMixing, *, activation: str = "gelu",
                 bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__(width, hidden, activation=activation, bias=bias, dropout=dropout)
        k = mixing.kernel
        if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0:
            raise ValueError(f"the MLP's convolution needs an odd kernel of at least 1 (3: a 3x3 window), got {k!r}")
        self.grid, self.prefix = tuple(mixing.grid), mixing.prefix
        self.conv = nn.Conv2d(hidden, hidden, k, padding=k // 2, groups=hidden, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        rows, cols = self.grid
        if x.shape[1] != self.prefix + rows * cols:
            raise ValueError(f"expected {self.prefix} prefix tokens and a {rows}x{cols} grid of patch tokens "
                             f"({self.prefix + rows * cols} in all), got {x.shape[1]} tokens")
        h = self.fc1(x)
        p = self.prefix
        # (B, rows*cols, C) read as (B, C, rows, cols) in channels-last strides: no copy either way.
        patches = h[:, p:].unflatten(1, (rows, cols)).permute(0, 3, 1, 2)
        mixed = self.conv(patches).permute(0, 2, 3, 1).flatten(1, 2)
        h = self.act(mixed if p == 0 else torch.cat([h[:, :p], mixed], 1))
        return self.fc2(h if self.drop is None else self.drop(h))
