"""The attention function `prepare` gives a layer: its choices per kind of call, made before it runs."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..nn.attend import by_sums, sdpa
from .decisions import sdpa_context

_is_compiling = torch.compiler.is_compiling


class SdpaBackend:
    """SDPA on one named backend (CUDA: "flash", "efficient", "cudnn", "math"); torch.compile traces
    the backend context, so a compiled layer follows it too."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
        with sdpa_context(self.backend):
            return sdpa(q, k, v, mask, causal, dropout)

    def __repr__(self) -> str:
        return f"SdpaBackend({self.backend!r})"


class AttentionChoice:
    """An attention function per kind of call, (needs gradients, one query), as the plan chose them for
    the calls `prepare` saw (SDPA for a kind it did not see). Under torch.compile, one query over a
    static cache on the CPU (its (1, M) mask is the only 2-D one a layer passes) is written as products
    and sums (`attend.by_sums`), which inductor fuses with the rest of a generation step."""

    def __init__(self, table: dict[tuple[bool, bool], Callable[..., Tensor]]) -> None:
        self.table = dict(table)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
        one = q.shape[2] == 1
        if one and _is_compiling() and mask is not None and mask.dim() == 2 and q.device.type == "cpu" and dropout == 0:
            return by_sums(q, k, v, mask, causal, dropout)
        grads = torch.is_grad_enabled() and q.requires_grad
        return self.table.get((grads, one), sdpa)(q, k, v, mask, causal, dropout)

    def __repr__(self) -> str:
        return f"AttentionChoice({self.table!r})"
