"""Table Transformer: a row of a table as tokens, one per column (a linear map or periodic waves for
a number, a lookup table for a category; nn/columns.py), a class token before them, no positions, the
same backbone as every other model, and a classifier or a regression head on the class token: the
FT-Transformer of Gorishniy et al. (2021) built from anyformer's blocks.

    z0 = [x_class; t_1; ...; t_F]        y = head(Transformer(z0)[:, 0])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..nn import (NUMBER_EMBEDDINGS, CategoryEmbedding, ClassifierHead, ClassToken, NumberEmbedding, RegressionHead,
                  Transformer, init_weights)
from .base import Model, check_sizes, matmul_weights

TABLE_TASKS = ("classify", "regress")


@dataclass
class TableConfig:
    numbers: int = 0                              # number inputs (dates count one each)
    categories: list[int] = field(default_factory=list)  # each category input's table rows (missing, unknown, values)
    task: str = "classify"                        # classify: logits out; regress: numbers out
    outputs: int = 2                              # classes, or numbers predicted per row
    number_embedding: str = "linear"              # linear | periodic (nn/columns.py)
    frequencies: int = 16                         # periodic: waves per number
    width: int = 64
    depth: int = 3
    heads: int = 4
    mlp_hidden: int = 128
    dropout: float = 0.1                          # after the MLP's hidden layer and each residual branch
    attn_dropout: float = 0.2                     # FT-Transformer's default: attention weights are dropped most
    drop_path: float = 0.0
    norm_eps: float = 1e-5
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.task not in TABLE_TASKS:
            raise ValueError(f"unknown task {self.task!r}; expected one of {TABLE_TASKS}")
        if self.number_embedding not in NUMBER_EMBEDDINGS:
            raise ValueError(f"unknown number_embedding {self.number_embedding!r}; expected one of {NUMBER_EMBEDDINGS}")
        if isinstance(self.numbers, bool) or not isinstance(self.numbers, int) or self.numbers < 0:
            raise ValueError(f"numbers must be a count >= 0, got {self.numbers!r}")
        self.categories = list(self.categories)
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.categories):
            raise ValueError(f"categories must list positive table sizes, got {self.categories!r}")
        if self.numbers + len(self.categories) == 0:
            raise ValueError("a table model needs at least one number or category column")
        check_sizes(self, ("outputs", "width", "depth", "heads", "mlp_hidden", "frequencies"))

    @property
    def columns(self) -> int:
        return self.numbers + len(self.categories)


class TableTransformer(Model):
    """`model(numbers, categories)` -> (B, classes) logits, or (B,) numbers for regression (standardised:
    the run's encoding turns them back into the target's units). numbers (B, F_num) float, NaN where
    missing; categories (B, F_cat) int64 indices (0 missing, 1 unknown)."""

    family = "table"
    config_class = TableConfig

    def __init__(self, config: TableConfig) -> None:
        super().__init__()
        self.config = c = config
        self.number_embed = NumberEmbedding(c.numbers, c.width, c.number_embedding, c.frequencies) if c.numbers else None
        self.category_embed = CategoryEmbedding(c.categories, c.width) if c.categories else None
        self.prefix = ClassToken(c.width)
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm_eps=c.norm_eps,
                                    dropout=c.dropout, attn_dropout=c.attn_dropout, drop_path=c.drop_path,
                                    impl=c.attn_impl)
        head = ClassifierHead if c.task == "classify" else RegressionHead
        self.head = head(c.width, c.outputs)
        self.head.apply(init_weights)
        with torch.no_grad():
            nn.init.normal_(self.prefix.cls_token, std=0.02)

    def tokens(self, numbers: Tensor | None, categories: Tensor | None) -> Tensor:
        """Input head: a batch of rows -> (B, 1 + F, D), the class token first."""
        c = self.config
        parts = []
        if c.numbers:
            if numbers is None or not numbers.is_floating_point():
                raise TypeError(f"this model reads {c.numbers} number columns: expected a float tensor (B, {c.numbers})")
            parts.append(self.number_embed(numbers))
        if c.categories:
            if categories is None or categories.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"this model reads {len(c.categories)} category columns: expected an integer tensor "
                                f"(B, {len(c.categories)})")
            parts.append(self.category_embed(categories))
        if len(parts) == 2 and parts[0].shape[0] != parts[1].shape[0]:
            raise ValueError(f"numbers and categories hold {parts[0].shape[0]} and {parts[1].shape[0]} rows; "
                             f"expected one of each per row")
        return self.prefix(torch.cat(parts, dim=1) if len(parts) == 2 else parts[0])

    def forward(self, numbers: Tensor | None, categories: Tensor | None = None) -> Tensor:
        """(B, F_num), (B, F_cat) -> (B, classes) or (B,). Attention weights, (B, heads, 1 + F, 1 + F)
        with the class token first: `nn.attention_weights(model, layers)` around the call."""
        return self.head(self.backbone(self.tokens(numbers, categories), keep=1))

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one row: 2 per backbone weight per token, 4 N^2 D per layer for attention, and
        the embeddings' and head's products."""
        c = self.config
        n = 1 + c.columns if seq_len is None else seq_len
        embed = 2 * c.numbers * c.width * (2 * c.frequencies if c.number_embedding == "periodic" else 1)
        return float(2 * n * matmul_weights(self.backbone) + 4 * c.depth * n * n * c.width + embed
                     + 2 * matmul_weights(self.head))
