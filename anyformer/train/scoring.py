"""What the classification tasks (images, series) share: scoring a test split into a confusion
matrix and a loss, and the metrics, progress fields and lines they report from it."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .precision import autocast


@torch.no_grad()
def score_classifier(logits_of: Callable[[int, int], Tensor], labels: Tensor, classes: int, dist: Any,
                     batch_size: int, amp: str, device: torch.device) -> dict[str, Any]:
    """Score this rank's shard of a test split of len(labels) examples, `logits_of(i, j)` giving the
    logits of examples i..j-1; the sums are added across ranks. The caller sets eval mode."""
    confusion = torch.zeros(classes, classes, dtype=torch.long, device=device)
    total_loss = torch.zeros((), dtype=torch.float64, device=device)
    shard = dist.shard(len(labels))
    for i in range(shard.start, shard.stop, batch_size):
        j = min(i + batch_size, shard.stop)
        y = labels[i:j].to(device)
        with autocast(amp, device):
            logits = logits_of(i, j).float()
        total_loss += F.cross_entropy(logits, y, reduction="sum").double()
        confusion += torch.bincount(y * classes + logits.argmax(-1), minlength=classes * classes).view(classes, classes)
    confusion, total_loss = dist.sum(confusion).cpu(), float(dist.sum(total_loss))
    n = int(confusion.sum())
    return {"eval_loss": total_loss / n, "eval_accuracy": float(confusion.diag().sum()) / n,
            "confusion": confusion.numpy()}


class ClassifierReport:
    """The Task protocol's reporting methods, as every classifier fills them. `eval_split` names what
    evaluation scores: the data's own test split, or a share of the training data held out for
    validation where the data has none (then the figures are `val_accuracy` and `val_loss`)."""

    eval_split: str = "test"  # or "validation"

    @property
    def _prefix(self) -> str:
        return "test" if self.eval_split == "test" else "val"

    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {"train_accuracy": sums["correct"] / max(1, sums["count"])} if "correct" in sums else {}

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        return {"acc": f"{sums['correct'] / max(1, sums['count']):.3f}"} if "correct" in sums else {}

    def eval_text(self, line: dict[str, Any]) -> str:
        return f"{self._prefix} loss {line['eval_loss']:.4f}  {self._prefix} acc {line['eval_accuracy']:.4f}"

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        if "eval_accuracy" not in line:
            return {}
        return {f"{self._prefix}_accuracy": line["eval_accuracy"], f"{self._prefix}_loss": line["eval_loss"],
                "eval_split": self.eval_split}

    def accuracy_words(self, summary: dict[str, Any]) -> str:
        """'test accuracy 0.9912' or 'validation accuracy 0.9300', for the final line."""
        return f"{self.eval_split} accuracy {summary[f'{self._prefix}_accuracy']:.4f}"
