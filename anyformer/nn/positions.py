"""Position information. Self-attention is permutation equivariant (Turner 2023), so order must
be put in: added learned vectors, concatenated learned vectors, fixed sinusoids in 1-D or 2-D,
or rotations of queries and keys inside attention (rotary)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

POSITION_KINDS = ("learned", "concat", "sinusoidal", "rotary", "none")


def _check_length(n: int, offset: int, length: int) -> None:
    if offset + n > length:
        raise ValueError(f"sequence of {offset + n} positions is longer than the position table "
                         f"({length}); use a shorter input or a model with a longer context")


def table_rows(table: Tensor, offset: int | Tensor, n: int) -> Tensor:
    """Rows offset .. offset + n - 1 of a (L, ...) table. `offset` may be a 0-dim int64 tensor (a
    static-cache decode step's position, `GPT.forward(position=...)`): read with index_select, so
    that a compiled graph takes the position as an input and serves every step, where a slice would
    bake its value in. The caller checks a tensor offset against the table: its value is not read."""
    if isinstance(offset, Tensor):
        return table.index_select(0, offset + torch.arange(n, device=offset.device))
    _check_length(n, offset, table.shape[0])
    return table[offset:offset + n]


class LearnedPosition(nn.Module):
    """A learned vector per position, added to the token: x_n + p_n. Shape of `pos_embed`: (1, L, D)."""

    def __init__(self, length: int, width: int, std: float = 0.02) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.randn(1, length, width).mul_(std))

    @property
    def length(self) -> int:
        return self.pos_embed.shape[1]

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, N, D) standing at positions offset.. (an int, or a 0-dim tensor: `table_rows`)."""
        return x + table_rows(self.pos_embed[0], offset, x.shape[1])


class ConcatPosition(nn.Module):
    """A learned vector per position, concatenated to the token: [x_n; p_n] (Turner 2023).
    The token width grows by `pos_width`."""

    def __init__(self, length: int, pos_width: int, std: float = 0.02) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.randn(1, length, pos_width).mul_(std))

    @property
    def length(self) -> int:
        return self.pos_embed.shape[1]

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        n = x.shape[1]
        _check_length(n, offset, self.length)
        return torch.cat([x, self.pos_embed[:, offset:offset + n].expand(x.shape[0], -1, -1)], dim=-1)


def sinusoidal_1d(length: int, width: int, base: float = 10000.0) -> Tensor:
    """(L, D) table of Vaswani et al.: sin on even, cos on odd channels."""
    if width % 2:
        raise ValueError(f"sinusoidal positions need an even width, got {width}")
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
    table = torch.zeros(length, width, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()


def sinusoidal_2d(height: int, width: int, dim: int, base: float = 10000.0) -> Tensor:
    """(H*W, D) table for a grid: half the channels encode the row, half the column."""
    if dim % 4:
        raise ValueError(f"2-D sinusoidal positions need a width divisible by 4, got {dim}")
    rows = sinusoidal_1d(height, dim // 2, base)  # (H, D/2)
    cols = sinusoidal_1d(width, dim // 2, base)   # (W, D/2)
    grid = torch.cat([rows[:, None].expand(-1, width, -1), cols[None].expand(height, -1, -1)], dim=-1)
    return grid.reshape(height * width, dim)


class SinusoidalPosition(nn.Module):
    """Fixed sinusoids added to the tokens; 1-D for sequences, 2-D when `grid=(H, W)` is given.
    `prefix` leading tokens (class, registers) get a zero vector."""

    def __init__(self, length: int, width: int, grid: tuple[int, int] | None = None, prefix: int = 0) -> None:
        super().__init__()
        table = sinusoidal_2d(*grid, width) if grid is not None else sinusoidal_1d(length - prefix, width)
        table = torch.cat([torch.zeros(prefix, width), table])
        self.register_buffer("table", table[None], persistent=False)

    @property
    def length(self) -> int:
        return self.table.shape[1]

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, N, D) standing at positions offset.. (an int, or a 0-dim tensor: `table_rows`)."""
        return x + table_rows(self.table[0], offset, x.shape[1]).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary positions (RoPE): rotate channel pairs of q and k by position-dependent angles,
    so that q.k depends on the relative offset only. Applied inside attention."""

    def __init__(self, head_dim: int, max_len: int = 4096, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq  # (L, D_h/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, t: Tensor, offset: int | Tensor = 0) -> Tensor:
        """t: (B, H, N, D_h), rotated as if its first token stood at position `offset` (an int, or a
        0-dim tensor: `table_rows`)."""
        n = t.shape[-2]
        cos = table_rows(self.cos, offset, n).to(t.dtype)
        sin = table_rows(self.sin, offset, n).to(t.dtype)
        return rotate_pairs(t, cos, sin)


def rotate_pairs(t: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE's rotation of the channel pairs (even, odd) of t (..., D_h) by angles given as their
    cos and sin (..., D_h / 2), broadcast against t's pairs."""
    t1, t2 = t[..., 0::2], t[..., 1::2]
    return torch.stack([t1 * cos - t2 * sin, t1 * sin + t2 * cos], dim=-1).flatten(-2)

