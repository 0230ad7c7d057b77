"""A held-out share of labelled training data, for data that comes without a test split.

Stratified (each class gives the same share) and drawn by the seed alone, so that a run, its resume
and `anyformer eval` of it hold out exactly the same examples. Every example is in one side only.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import DataError

__all__ = ["MIN_HELD_OUT_PER_CLASS", "check_classes", "holdout_fraction", "stratified_holdout"]

# A class scored on one example reads 0% or 100%: two is the fewest the validation figure can rest on.
MIN_HELD_OUT_PER_CLASS = 2
# The share held out where the user names none; raised for small classes (`holdout_fraction`), never past half.
DEFAULT_FRACTION = 0.2
MAX_FRACTION = 0.5


def check_classes(labels: torch.Tensor, classes: Sequence[str], where: str) -> None:
    """Refuse data that cannot train a classifier: no examples, or a single class."""
    if labels.numel() == 0:
        raise DataError(f"{where} holds no labelled examples; expected examples of at least two classes")
    present = torch.unique(labels).tolist()
    if len(present) < 2:
        name = classes[present[0]] if classes else str(present[0])
        raise DataError(f"{where} holds one class only ({name!r}, {labels.numel()} examples): a classifier needs "
                        f"at least two classes to tell apart")


def holdout_fraction(labels: torch.Tensor, asked: float | None = None) -> float:
    """The share to hold out: `asked` where given, else 20%, raised so that the smallest class gives
    at least MIN_HELD_OUT_PER_CLASS examples (at most half of it)."""
    if asked is not None:
        if not 0 < asked < 1:
            raise DataError(f"the held-out share must lie in (0, 1), got {asked}")
        return float(asked)
    smallest = int(torch.bincount(labels).clamp(min=1)[torch.unique(labels)].min())
    return min(MAX_FRACTION, max(DEFAULT_FRACTION, MIN_HELD_OUT_PER_CLASS / smallest))


def stratified_holdout(labels: torch.Tensor, fraction: float, seed: int, classes: Sequence[str] = (),
                       hint: str = "or give the data a test/ split") -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, held-out indices), both sorted: round(fraction * n_c) examples of each class
    c held out, drawn by `seed`. Refused in one line where a class would give fewer than
    MIN_HELD_OUT_PER_CLASS examples to the held-out share, or keep none for training; `hint` ends that
    line with the remedy the data's format allows."""
    if not 0 < fraction < 1:
        raise DataError(f"the held-out share must lie in (0, 1), got {fraction}")
    g = torch.Generator().manual_seed(seed)
    train, held = [], []
    for c in torch.unique(labels).tolist():
        members = (labels == c).nonzero().flatten()
        k = round(fraction * len(members))
        name = classes[c] if c < len(classes) else str(c)
        if k < MIN_HELD_OUT_PER_CLASS or k >= len(members):
            need = MIN_HELD_OUT_PER_CLASS + 1
            raise DataError(f"class {name!r} has {len(members)} examples, so a held-out share of {fraction:.0%} "
                            f"gives it {k} for validation and {len(members) - k} for training; expected at least "
                            f"{MIN_HELD_OUT_PER_CLASS} held out and 1 to train (add examples to reach {need} or "
                            f"more, raise --val-fraction, {hint})")
        shuffled = members[torch.randperm(len(members), generator=g)]
        held.append(shuffled[:k])
        train.append(shuffled[k:])
    return torch.cat(train).sort().values, torch.cat(held).sort().values
