"""Language modelling: next-token prediction on a text source, with the shared trainer.

Each step draws `batch_size` random windows of `seq_len + 1` tokens from the memory-mapped training
split, from a generator derived from (seed, step), so a resumed run draws exactly the same batches.
The validation loss is averaged over `eval_iters` batches of evenly spaced windows across the
validation split: the same windows at every evaluation, so successive losses are comparable.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.text import TokenCorpus, load_corpus
from ..models import PRESETS
from .config import TrainConfig
from .tasks import autocast, step_generator

VAL_FRACTION = 0.1  # the last 10% of the tokens are the validation split (nanoGPT's split)

# nanoGPT's config/train_shakespeare_char.py, exactly: 6 x 6 heads x 384, context 256, dropout 0.2.
_SHAKESPEARE_CHAR = dict(
    task="lm", model="shakespeare-char", data="shakespeare", tokenizer="char", seq_len=256,
    max_steps=5000, batch_size=64, lr=1e-3, min_lr_ratio=0.1, warmup_steps=100, betas=(0.9, 0.99),
    weight_decay=0.1, grad_clip=1.0, eval_every=250, eval_iters=200)

LM_RECIPES: dict[str, dict[str, Any]] = {
    "shakespeare-char": dict(
        about="nanoGPT's Tiny Shakespeare character model: 6 layers x 6 heads x 384, context 256, "
              "dropout 0.2, batch 64, 5000 steps (a GPU job: val loss ~1.47)",
        **_SHAKESPEARE_CHAR),
    # Tuned on a shared 2-core AMD EPYC (benchmarks/results/shakespeare_cpu.md): bf16 autocast halves the
    # step time there; 4 blocks of width 192 at context 128 crossed val loss 1.70 after 3.3M tokens (step
    # 800 of a 1200-step trial, 1.59 at its end). No dropout, like nanoGPT's CPU recipe.
    "shakespeare-cpu": dict(
        about="Tiny Shakespeare characters on a CPU: 4 layers x 6 heads x 192, context 128, bf16; "
              "val loss <= 1.70 within 10 minutes on 2 cores",
        task="lm", model="shakespeare-char", data="shakespeare", tokenizer="char", seq_len=128,
        max_steps=1000, batch_size=32, lr=3e-3, min_lr_ratio=0.1, warmup_steps=100, betas=(0.9, 0.99),
        weight_decay=0.1, grad_clip=1.0, eval_every=100, eval_iters=20, amp="bf16",
        model_overrides=dict(width=192, depth=4, heads=6, context=128, dropout=0.0)),
}


class LanguageModelling:
    """Next-token prediction on a text file, a folder, or a named corpus ("shakespeare")."""

    family, unit = "gpt", "tokens"

    def __init__(self, cfg: TrainConfig, device: torch.device, corpus: TokenCorpus | None = None) -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.corpus = corpus or load_corpus(cfg.data, cfg.tokenizer, val_fraction=VAL_FRACTION)
        self.tokenizer = self.corpus.tokenizer
        if cfg.model not in PRESETS or PRESETS[cfg.model][0] != self.family:
            gpts = sorted(n for n, (f, _) in PRESETS.items() if f == self.family)
            raise ValueError(f"a language model run needs a GPT preset, got {cfg.model!r}; valid: {gpts}")
        self.context = int(cfg.model_overrides.get("context", PRESETS[cfg.model][1].get("context", 1024)))
        self.seq_len = int(cfg.seq_len or self.context)
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
        xy = torch.from_numpy(rows).to(self.device, non_blocking=True)
        return xy[:, :-1], xy[:, 1:]

    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        n = self.cfg.batch_size
        g = step_generator(self.cfg.seed, step)
        starts = torch.randint(0, len(self.train_tokens) - self.seq_len, (n,), generator=g).numpy()
        # Every rank draws the same global batch, then keeps its own contiguous share.
        share = math.ceil(n / world)
        return self._windows(self.train_tokens, starts[rank * share:(rank + 1) * share]), n

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, float]]:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten()), {}

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

    def run_info(self) -> dict[str, Any]:
        return {"kind": "text", **self.tokenizer.to_info(), **self.corpus.info(), "seq_len": self.seq_len,
                "val_fraction": VAL_FRACTION, "train_tokens_used": len(self.train_tokens),
                "val_tokens_used": len(self.val_tokens)}
