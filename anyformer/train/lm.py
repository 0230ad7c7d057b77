"""Language modelling: next-token prediction on a text source, with the shared trainer.

Each step draws `batch_size` random windows of `seq_len + 1` tokens from the memory-mapped training
split, from a generator derived from (seed, step), so a resumed run draws exactly the same batches.
The validation loss is averaged over `eval_iters` batches of evenly spaced windows across the
validation split: the same windows at every evaluation, so successive losses are comparable.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.text import TokenCorpus, load_corpus
from ..models import PRESETS
from .batches import rank_share, step_generator
from .config import TrainConfig
from .precision import autocast

VAL_FRACTION = 0.1  # the last 10% of the tokens are the validation split (nanoGPT's split)


class LanguageModelling:
    """Next-token prediction on a text file, a folder, or a named corpus ("shakespeare")."""

    family, unit = "gpt", "tokens"
    pictures: tuple[str, ...] = ()

    def __init__(self, cfg: TrainConfig, device: torch.device, corpus: TokenCorpus | None = None, *,
                 info: dict[str, Any] | None = None) -> None:
        # `info` (a finished run's data section) adds nothing: the tokenizer and the split are rebuilt
        # from the same text, and the same settings, exactly.
        self.cfg, self.device = cfg, torch.device(device)
        self.corpus = corpus or load_corpus(cfg.data, cfg.tokenizer, val_fraction=VAL_FRACTION)
        self.tokenizer = self.corpus.tokenizer
        if cfg.model not in PRESETS or PRESETS[cfg.model][0] != self.family:
            gpts = sorted(n for n, (f, _) in PRESETS.items() if f == self.family)
            raise ValueError(f"a language model run needs a GPT preset, got {cfg.model!r}; valid: {gpts}")
        self.context = int(cfg.model_overrides.get("context", PRESETS[cfg.model][1].get("context", 1024)))
        self.seq_len = int(cfg.seq_len or self.context)
        self.items_per_example = self.seq_len  # throughput counts tokens; a batch counts sequences
        if not 1 <= self.seq_len <= self.context:
            raise ValueError(f"seq_len {self.seq_len} must lie in [1, the model's context {self.context}]; "
                             f"lower seq_len or raise the context (--set context={self.seq_len})")
        need = self.seq_len + 1
        train, val = self.corpus.train, self.corpus.val
        # limit_* count tokens; never fewer than one window (`anyformer eval` passes limit_train=1).
        if cfg.limit_train:
            train = train[:max(cfg.limit_train, need)]
        if cfg.limit_eval:
            val = val[:max(cfg.limit_eval, need)]
        for name, split in (("training", train), ("validation", val)):
            if len(split) < need:
                raise ValueError(f"the {name} split of {cfg.data!r} has {len(split)} tokens, fewer than one "
                                 f"window of seq_len + 1 = {need}; use more text or a shorter seq_len")
        self.train_tokens, self.val_tokens = train, val
        self.steps_per_epoch = max(1, math.ceil(len(train) / (cfg.batch_size * self.seq_len)))
        # The fixed validation windows: eval_iters batches of batch_size, evenly spaced over the split.
        n_windows = max(1, cfg.eval_iters) * cfg.batch_size
        self.val_starts = np.linspace(0, len(val) - need, n_windows).round().astype(np.int64)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size, "context": self.context}

    def _windows(self, tokens: np.ndarray, starts: np.ndarray) -> tuple[Tensor, Tensor]:
        rows = np.asarray(tokens[starts[:, None] + np.arange(self.seq_len + 1)], dtype=np.int64)
        xy = torch.from_numpy(rows)
        if self.device.type == "cuda":  # from page-locked memory the copy runs beside the GPU's work
            xy = xy.pin_memory()
        xy = xy.to(self.device, non_blocking=True)
        return xy[:, :-1], xy[:, 1:]

    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        n = self.cfg.batch_size
        g = step_generator(self.cfg.seed, step)
        starts = torch.randint(0, len(self.train_tokens) - self.seq_len, (n,), generator=g).numpy()
        return self._windows(self.train_tokens, starts[rank_share(n, rank, world)]), n

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten()), {}

    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {}

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        return {}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops(self.seq_len) / self.seq_len  # per token

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Mean next-token loss over the fixed validation windows; each rank scores its shard."""
        was_training = model.training
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = torch.zeros((), dtype=torch.float64, device=self.device)
        shard = dist.shard(len(self.val_starts))
        for i in range(shard.start, shard.stop, self.cfg.batch_size):
            x, y = self._windows(self.val_tokens, self.val_starts[i:min(i + self.cfg.batch_size, shard.stop)])
            with autocast(self.cfg.amp, self.device):
                logits = model(x)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").double()
            count += y.numel()
        model.train(was_training)
        total, count = float(dist.sum(total)), float(dist.sum(count))
        return {"eval_loss": total / max(count, 1.0)}

    def eval_text(self, line: dict[str, Any]) -> str:
        return f"val loss {line['eval_loss']:.4f}"

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        """The last validation loss, and the best one with its step and time (when it was reached)."""
        if "eval_loss" not in line:
            return {}
        best = min(history, key=lambda m: m.get("eval_loss", float("inf")), default=line)
        return {"val_loss": line["eval_loss"], "best_val_loss": best["eval_loss"], "best_val_step": best["step"],
                "best_val_seconds": best["time"]}

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"validation loss {summary['val_loss']:.4f} after {summary['steps']} steps "
                f"in {summary['train_seconds']:.0f}s")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """No pictures beyond the curves every run has."""

    def run_info(self) -> dict[str, Any]:
        return {"kind": "text", **self.tokenizer.to_info(), **self.corpus.info(), "seq_len": self.seq_len,
                "val_fraction": VAL_FRACTION, "train_tokens_used": len(self.train_tokens),
                "val_tokens_used": len(self.val_tokens)}
