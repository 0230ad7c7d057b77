"""Language modelling: next-token prediction on a text source, with the shared trainer.

Each step draws `batch_size` random windows of `seq_len + 1` tokens from the memory-mapped training
split, from a generator derived from (seed, step), so a resumed run draws exactly the same batches.
The validation loss is averaged over `eval_iters` batches of evenly spaced windows across the
validation split: the same windows at every evaluation, so successive losses are comparable. Beside
it, the same windows' bits per byte (`val_bpb`: nats summed over the predicted tokens / (ln 2 x the
UTF-8 bytes those tokens stand for), as nanochat's evaluate_bpb counts them): a number that runs
with different tokenizers share, since every tokenizer reads the same validation text.

The tokenizer is --tokenizer's (`char`, `bpe` learned from the training split, `gpt2`, a file); a
resumed run reads its own from its run directory, and a finished run scored again (`info`) uses the
one it was trained with, never a relearned one. Given `info` and other data than the run's own
(`anyformer eval RUN --data PATH`), all of that text is scored, every token once.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.errors import DataWarning
from ..data.text.bpe import HFTokenizer
from ..data.text.corpus import TokenCorpus, load_corpus
from ..data.text.tokenizers import tokenizer_from_info
from ..models import PRESETS
from .batches import rank_share, step_generator
from .config import TrainConfig
from .precision import autocast
from .protocol import scores_other_data

VAL_FRACTION = 0.1  # the last 10% of the text is the validation split (nanoGPT's split)
IGNORE = -100       # a target that is not scored (F.nll_loss's ignore_index)


class LanguageModelling:
    """Next-token prediction on a text file, a folder, or a named corpus ("shakespeare")."""

    family, unit = "gpt", "tokens"
    pictures: tuple[str, ...] = ()

    def __init__(self, cfg: TrainConfig, device: torch.device, corpus: TokenCorpus | None = None, *,
                 info: dict[str, Any] | None = None) -> None:
        # `info`: a finished run's data section (with "run_dir", its directory): its tokenizer is read
        # from the run, and the split rebuilt from the same text; or other text is scored whole.
        self.cfg, self.device, self.info = cfg, torch.device(device), info
        if cfg.model not in PRESETS or PRESETS[cfg.model][0] != self.family:
            gpts = sorted(n for n, (f, _) in PRESETS.items() if f == self.family)
            raise ValueError(f"a language model run needs a GPT preset, got {cfg.model!r}; valid: {gpts}")
        self.other_text = scores_other_data(cfg.data, info)
        self.corpus = corpus or self._load_corpus()
        self.tokenizer = self.corpus.tokenizer
        self.context = int(cfg.model_overrides.get("context", PRESETS[cfg.model][1].get("context", 1024)))
        self.seq_len = int(cfg.seq_len or self.context)
        self.items_per_example = self.seq_len  # throughput counts tokens; a batch counts sequences
        if not 1 <= self.seq_len <= self.context:
            raise ValueError(f"seq_len {self.seq_len} must lie in [1, the model's context {self.context}]; "
                             f"lower seq_len or raise the context (--set context={self.seq_len})")
        need = self.seq_len + 1
        # Other text is scored whole; its "training split" (never drawn from) is the same tokens.
        train, val = ((self.corpus.tokens, self.corpus.tokens) if self.other_text
                      else (self.corpus.train, self.corpus.val))
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
        if self.other_text:
            self.val_starts, self.val_skip = _tiles(len(val), self.seq_len)
        else:
            # The fixed validation windows: eval_iters batches of batch_size, evenly spaced over the split.
            n_windows = max(1, cfg.eval_iters) * cfg.batch_size
            self.val_starts = np.linspace(0, len(val) - need, n_windows).round().astype(np.int64)
            self.val_skip = np.zeros(len(self.val_starts), dtype=np.int64)
        # The UTF-8 bytes each token id stands for (0 for <|endoftext|>): bits per byte, exactly.
        self.token_bytes = torch.from_numpy(self.tokenizer.token_byte_lengths()).to(self.device)
        if info is None:
            self._warn_if_the_vocabulary_dominates()

    def _load_corpus(self) -> TokenCorpus:
        """The text, tokenized by the run's own tokenizer where there is a run: the finished run's
        (`info`), or, on --resume, the one in the run directory; else by --tokenizer's."""
        cfg, info = self.cfg, self.info
        if info is not None:
            tok = tokenizer_from_info(info, info.get("run_dir"))
            fraction = 1.0 if self.other_text else float(info.get("val_fraction", VAL_FRACTION))
            return load_corpus(cfg.data, tok, val_fraction=fraction)
        tok = _resumed_tokenizer(cfg) if cfg.resume else None
        return load_corpus(cfg.data, tok if tok is not None else cfg.tokenizer, val_fraction=VAL_FRACTION)

    def _warn_if_the_vocabulary_dominates(self) -> None:
        """One DataWarning where the output layer costs more FLOPs a token than the model's blocks: a
        vocabulary much larger than the model (GPT-2's 50,257 on a small CPU model) makes each step
        many times slower than the blocks alone would."""
        costs = vocabulary_costs(self.cfg.model, {**self.cfg.model_overrides, **self.model_overrides()}, self.seq_len)
        if costs is None:
            return
        head, blocks, depth = costs
        if head <= blocks:
            return
        kind, vocab = self.tokenizer.kind, self.tokenizer.vocab_size
        fix = {"bpe": "--tokenizer char, or a wider model (--set width=...)"}.get(
            kind, "--tokenizer bpe learns a vocabulary sized to your text (or --tokenizer char)")
        warnings.warn(f"the {kind} vocabulary of {vocab:,} tokens makes the output layer cost {head / blocks:.1f}x "
                      f"the FLOPs of the model's {depth} block(s) per token ({head / 1e6:.2f} against "
                      f"{blocks / 1e6:.2f} MFLOPs), so most of each step goes to it; {fix}", DataWarning, stacklevel=2)

    def run_files(self) -> dict[str, bytes]:
        """Files the run directory keeps beside config.json: a learned or given tokenizer (tokenizer.json),
        which `tokenizer_from_info(info, run_dir)` reads back. None for char (its alphabet is in
        config.json) or gpt2 (one published vocabulary)."""
        if isinstance(self.tokenizer, HFTokenizer):
            return {self.tokenizer.to_info()["tokenizer_file"]: self.tokenizer.to_json().encode("utf-8")}
        return {}

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
        """Mean next-token loss over the fixed validation windows, and their bits per byte; each rank
        scores its shard."""
        was_training = model.training
        model.eval()
        sums = [torch.zeros((), dtype=torch.float64, device=self.device) for _ in range(4)]
        total, count, nats, nbytes = sums
        shard = dist.shard(len(self.val_starts))
        for i in range(shard.start, shard.stop, self.cfg.batch_size):
            rows = slice(i, min(i + self.cfg.batch_size, shard.stop))
            x, y = self._windows(self.val_tokens, self.val_starts[rows])
            y = self._skip_scored(y, self.val_skip[rows]).flatten()
            with autocast(self.cfg.amp, self.device):
                logits = model(x)
            # cross_entropy is nll_loss of log_softmax: the loss is the same to the bit, and the
            # per-token nats for bits per byte come from the same log-probabilities.
            logp = F.log_softmax(logits.float().flatten(0, 1), dim=-1)
            total += F.nll_loss(logp, y, reduction="sum", ignore_index=IGNORE).double()
            scored = y != IGNORE
            count += scored.sum()
            target = y.clamp(min=0)
            width = self.token_bytes[target] * scored  # <|endoftext|> (0 bytes) counts in neither sum
            nats -= (logp.gather(1, target[:, None])[:, 0].double() * (width > 0)).sum()
            nbytes += width.sum()
        model.train(was_training)
        total, count, nats, nbytes = (float(dist.sum(t)) for t in sums)
        return {"eval_loss": total / max(count, 1.0), "val_bpb": nats / (math.log(2) * max(nbytes, 1.0))}

    def _skip_scored(self, y: Tensor, skip: np.ndarray) -> Tensor:
        """Targets a window's first `skip` positions already scored by the window before it: ignored."""
        if not skip.any():
            return y
        mask = torch.arange(y.shape[1])[None, :] < torch.from_numpy(skip)[:, None]
        return y.masked_fill(mask.to(y.device), IGNORE)

    def eval_text(self, line: dict[str, Any]) -> str:
        bpb = f" | val bpb {line['val_bpb']:.4f}" if "val_bpb" in line else ""
        return f"val loss {line['eval_loss']:.4f}{bpb}"

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        """The last validation loss and bits per byte, and the best ones, the loss's with its step and
        time (when it was reached)."""
        if "eval_loss" not in line:
            return {}
        best = min(history, key=lambda m: m.get("eval_loss", float("inf")), default=line)
        fields = {"val_loss": line["eval_loss"], "best_val_loss": best["eval_loss"], "best_val_step": best["step"],
                  "best_val_seconds": best["time"]}
        if "val_bpb" in line:
            fields["val_bpb"] = line["val_bpb"]
            fields["best_val_bpb"] = min([m["val_bpb"] for m in history if "val_bpb" in m] or [line["val_bpb"]])
        return fields

    def final_line(self, summary: dict[str, Any]) -> str:
        bpb = f" ({summary['val_bpb']:.4f} bits per byte)" if "val_bpb" in summary else ""
        return (f"validation loss {summary['val_loss']:.4f}{bpb} after {summary['steps']} steps "
                f"in {summary['train_seconds']:.0f}s")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """No pictures beyond the curves every run has."""

    def run_info(self) -> dict[str, Any]:
        return {"kind": "text", **self.tokenizer.to_info(), **self.corpus.info(), "seq_len": self.seq_len,
                "val_fraction": VAL_FRACTION, "train_tokens_used": len(self.train_tokens),
                "val_tokens_used": len(self.val_tokens)}


def _tiles(n: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of seq_len + 1 tokens over n tokens that predict each token after the first exactly once:
    (starts, skip), a window's first `skip` targets being already scored by the one before it."""
    starts = np.arange(0, n - seq_len, seq_len, dtype=np.int64)
    skip = np.zeros(len(starts), dtype=np.int64)
    covered = int(starts[-1]) + seq_len  # the last token the windows predict
    if covered < n - 1:  # the tail: one more window, flush with the end
        last = n - seq_len - 1
        starts, skip = np.append(starts, last), np.append(skip, covered - last)
    return starts, skip


def _resumed_tokenizer(cfg: TrainConfig) -> Any:
    """On --resume, the tokenizer the run directory holds: from its config.json's data section, or,
    before the first save, its tokenizer.json alone; None where there is no run there yet."""
    from ..data.text.bpe import TOKENIZER_FILE, read_tokenizer_file
    from ..models import read_config
    run_dir = Path(cfg.out or f"runs/{cfg.recipe}")
    if (run_dir / "config.json").is_file():
        info = read_config(run_dir).get("data") or {}
        if info.get("kind") == "text":
            return tokenizer_from_info(info, run_dir)
    if cfg.tokenizer not in ("char", "gpt2") and (run_dir / TOKENIZER_FILE).is_file():
        return read_tokenizer_file(run_dir / TOKENIZER_FILE, "bpe" if cfg.tokenizer == "bpe" else "file")
    return None


def vocabulary_costs(preset: str, overrides: dict[str, Any], seq_len: int) -> tuple[float, float, int] | None:
    """(the output layer's forward FLOPs a token, the blocks', depth) of the GPT that `preset` with
    `overrides` builds, counted as GPT.forward_flops counts them: 2 per weight of the blocks plus 4 T D
    a layer for attention, against 2 V D for the output layer (whose matrix the embedding shares).
    None where the settings do not make a model (the trainer then says why)."""
    from ..models.base import matmul_weights
    from ..models.gpt import GPT, GPTConfig
    values = {**PRESETS[preset][1], **overrides}
    try:
        one = GPTConfig(**{**values, "depth": 1, "vocab_size": 1})
        c = GPTConfig(**values)
        with torch.device("meta"):  # one block, with no memory: its weights are what is counted
            per_block = matmul_weights(GPT(one).backbone)
    except (TypeError, ValueError):
        return None
    blocks = c.depth * (2.0 * per_block + 4.0 * seq_len * c.width)
    return 2.0 * c.vocab_size * c.width, blocks, c.depth
