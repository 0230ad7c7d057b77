"""Output heads: turn tokens back into answers."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..shapes import pair
from .embeddings import TokenEmbedding
from .mlp import make_activation

POOLS = ("cls", "mean", "attention")


class ClassifierHead(nn.Module):
    """(B, N, D) tokens -> (B, classes) logits, pooling the class token, the mean of the rest, or their
    attention-weighted mean.

    pool="attention" is the sequence pooling of Hassani et al. (2021, "Escaping the Big Data Paradigm
    with Compact Transformers"): one learned score a token, softmax over the patch tokens, and their
    mean under those weights, so the head can lean on the patches that tell classes apart where the
    mean weighs every patch alike. It starts near the plain mean (small scores: nearly equal weights).
    `hidden` adds a pre-logits layer with an activation: tanh for pre-training as in ViT-B
    (Dosovitskiy et al., 2021), GELU for the final MLP of Turner's (2023) MNIST ViT.
    """

    def __init__(self, width: int, num_classes: int, *, pool: str = "cls", hidden: int | None = None,
                 activation: str = "tanh", num_prefix: int = 1) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pooling {pool!r}; expected one of {POOLS}")
        if pool == "cls" and num_prefix < 1:
            raise ValueError("pool='cls' needs a class token; use pool='mean' without one")
        self.pool, self.num_prefix = pool, num_prefix
        self.score = nn.Linear(width, 1) if pool == "attention" else None
        self.pre_logits = nn.Sequential(nn.Linear(width, hidden), make_activation(activation)) if hidden else None
        self.fc = nn.Linear(hidden or width, num_classes)

    def pooled(self, tokens: Tensor) -> Tensor:
        if self.pool == "cls":
            return tokens[:, 0]
        patches = tokens[:, self.num_prefix:]
        if self.score is None:
            return patches.mean(dim=1)
        weights = self.score(patches).softmax(dim=1)  # (B, N, 1): a distribution over the patch tokens
        return (weights.transpose(1, 2) @ patches).squeeze(1)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.pooled(tokens)
        if self.pre_logits is not None:
            x = self.pre_logits(x)
        return self.fc(x)


class RegressionHead(ClassifierHead):
    """(B, N, D) tokens -> (B, outputs) numbers, read from the class token (or the mean) like a
    classifier's logits; with one output, (B,). Trained on standardised targets, so that one learning
    rate suits targets of any unit."""

    def __init__(self, width: int, outputs: int = 1, **kwargs) -> None:
        super().__init__(width, outputs, **kwargs)

    def forward(self, tokens: Tensor) -> Tensor:
        y = super().forward(tokens)
        return y[:, 0] if y.shape[-1] == 1 else y


class LMHead(nn.Module):
    """(B, T, D) -> (B, T, vocab) next-token logits; with `tie_to` it reuses the input table."""

    def __init__(self, width: int, vocab_size: int, *, tie_to: TokenEmbedding | None = None, bias: bool = False) -> None:
        super().__init__()
        if tie_to is not None:
            if tie_to.weight.shape != (vocab_size, width):
                raise ValueError(f"cannot tie LM head ({vocab_size}, {width}) to an embedding of shape "
                                 f"{tuple(tie_to.weight.shape)}")
            self.weight = tie_to.weight  # one Parameter, two uses
        else:
            self.weight = nn.Parameter(torch.randn(vocab_size, width).mul_(0.02))
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class PatchOutput(nn.Module):
    """(B, N, D) patch tokens -> (B, C, H, W) image: each token becomes its p x p x C patch (the patch
    output head of Peebles and Xie, 2023)."""

    def __init__(self, width: int, patch_size: int | tuple[int, int], out_chans: int) -> None:
        super().__init__()
        self.patch_size, self.out_chans = pair(patch_size), out_chans
        self.proj = nn.Linear(width, self.patch_size[0] * self.patch_size[1] * out_chans)

    def forward(self, tokens: Tensor, grid: tuple[int, int]) -> Tensor:
        gh, gw = grid
        B, N, _ = tokens.shape
        if N != gh * gw:
            raise ValueError(f"expected {gh}*{gw}={gh * gw} patch tokens for grid {grid}, got {N}")
        return unpatchify(self.proj(tokens), self.patch_size, grid)


def unpatchify(patches: Tensor, patch_size: int | tuple[int, int], grid: tuple[int, int]) -> Tensor:
    """(B, N, C * ph * pw) patches, row-major over the grid -> (B, C, H, W) image."""
    (ph, pw), (gh, gw) = pair(patch_size), grid
    x = patches.reshape(patches.shape[0], gh, gw, -1, ph, pw)
    return x.permute(0, 3, 1, 4, 2, 5).reshape(patches.shape[0], -1, gh * ph, gw * pw)
