"""Tables: classes or a number from a row of number, category and date columns.

The rows are read as text (data/tables), each column's kind decided from its cells, the target's task
(classes or a number) from its cells or --task; the training rows fix the encoding (quantiles,
vocabularies, the target's scale), saved with the run. A table without a test file holds out a seeded
share of its rows (stratified by class), listed in the run's heldout.txt so that another method can be
scored on exactly those rows.

Regression trains on the standardised target (mean squared error) and reports R^2, RMSE and MAE in
the target's own units.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.split import holdout_fraction
from ..data.tables.columns import Column, Target, describe_columns, describe_target
from ..data.tables.encode import EncodedRows, TableEncoding, class_cells
from ..data.tables.load import (REGRESSION_FRACTION, TableFiles, find_table_files, holdout_rows, read_labelled,
                                selection_rows)
from .batches import epoch_order, rank_share
from .config import TrainConfig
from .precision import autocast
from .protocol import scores_other_data
from .scoring import ClassifierReport, score_classifier

HELD_OUT_FILE = "heldout.txt"
MIN_SELECTION_ROWS = 10   # fewer rows held back than this choose nothing: the last weights are kept


@dataclass
class TableSplits:
    """The encoded training rows and the rows scored, where the scored rows came from, and (a held-out
    share) their row numbers in the file, counted from 1 after the header."""

    train: EncodedRows
    test: EncodedRows
    encoding: TableEncoding
    eval_split: str                 # "test" or "validation"
    source: str                     # the file scored
    held_out_rows: list[int] | None = None
    fraction: float | None = None


def describe_table(data: str, label_column: str | None,
                   objective: str | None) -> tuple[TableFiles, pd.DataFrame, Target, list[Column]]:
    """(files, the training file's rows, its target, its columns): what `derive` prints and the task reads.
    The columns' kinds and the classes are read from the whole training file; what is learned from cell
    values (quantiles, vocabularies, the target's scale) from the training part alone (`load_table_splits`)."""
    files = find_table_files(data)
    frame, target_name = read_labelled(files.train, asked=label_column)
    target = describe_target(frame[target_name], target_name, objective, str(files.train))
    columns = describe_columns(frame, target_name, str(files.train))
    return files, frame, target, columns


def load_table_splits(cfg: TrainConfig, info: dict[str, Any] | None = None) -> TableSplits:
    """The training rows and the rows scored: the test file where there is one, else the seeded held-out
    share; for a finished run (`info`), its own scored rows again, or other data with its encoding."""
    if info is not None:
        encoding = TableEncoding.from_dict(info["encoding"])
        if scores_other_data(cfg.data, info):
            return _other_data(cfg, encoding)
    files, frame, target, columns = describe_table(cfg.data, cfg.label_column, cfg.objective)
    if files.test is not None:
        encoding = TableEncoding.fit(frame, columns, target) if info is None else encoding
        train = encoding.encode(frame, str(files.train)) if info is None else _none(encoding)
        test = encoding.encode(read_labelled(files.test, encoding.target.name)[0], str(files.test))
        return TableSplits(train, test, encoding, "test", str(files.test))
    labels = torch.tensor(class_codes(frame[target.name], target)) if target.task == "classify" else None
    recorded = (info or {}).get("val_fraction")
    fraction = float(recorded) if recorded else (holdout_fraction(labels, cfg.val_fraction) if labels is not None
                                                 else cfg.val_fraction or REGRESSION_FRACTION)
    keep, held = holdout_rows(len(frame), labels, fraction, cfg.seed, target.classes)
    if info is None:  # the encoding is learned from the training rows alone
        encoding = TableEncoding.fit(frame.iloc[keep.numpy()], columns, target)
    rows = encoding.encode(frame, str(files.train))
    numbers = [int(frame.index[int(i)]) + 1 for i in held]  # the file's own rows, whatever was left out before
    return TableSplits(rows.take(keep), rows.take(held), encoding, "validation", str(files.train), numbers, fraction)


def _other_data(cfg: TrainConfig, encoding: TableEncoding) -> TableSplits:
    """Rows other than the run's own, scored with its encoding: the test file of a pair, else every row."""
    files = find_table_files(cfg.data)
    path = files.test or files.train
    test = encoding.encode(read_labelled(path, encoding.target.name)[0], str(path))
    return TableSplits(_none(encoding), test, encoding, "test", str(path))


def _none(encoding: TableEncoding) -> EncodedRows:
    return EncodedRows(torch.zeros(0, len(encoding.numbers)), torch.zeros(0, len(encoding.categories), dtype=torch.int64),
                       torch.zeros(0, dtype=torch.int64 if encoding.target.task == "classify" else torch.float32))


class TableTask(ClassifierReport):
    """Each step slices a shuffled batch of encoded rows; classes by cross-entropy, numbers by mean
    squared error on the standardised target."""

    family, unit = "table", "rows"
    pictures = ("confusion.png", "predictions.png")
    items_per_example = 1

    def __init__(self, cfg: TrainConfig, device: torch.device, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.splits = s = load_table_splits(cfg, info)
        self.encoding = s.encoding
        self.regress = s.encoding.target.task == "regress"
        self.eval_split = s.eval_split
        self.train, self.test = s.train, s.test
        if cfg.limit_train:
            self.train = self.train.take(torch.arange(min(cfg.limit_train, len(self.train))))
        if cfg.limit_eval:
            self.test = self.test.take(torch.arange(min(cfg.limit_eval, len(self.test))))
        # Rows held back from the training rows to pick the evaluation whose weights the run keeps
        # (--select-fraction): the step is chosen on training data, never on the rows scored.
        self.select: EncodedRows | None = None
        if cfg.select_fraction and info is None and len(self.train):
            labels = None if self.regress else self.train.target
            fit, held = selection_rows(labels, len(self.train), cfg.select_fraction, cfg.seed + 1)
            if len(held) >= MIN_SELECTION_ROWS:
                self.train, self.select = self.train.take(fit), self.train.take(held)
        if (info is None and len(self.train) == 0) or len(self.test) == 0:
            raise ValueError(f"table {cfg.data!r} has no rows in its training part or in the rows it scores "
                             f"({len(self.train)} and {len(self.test)})")
        self.classes = list(s.encoding.target.classes)
        self.numbers, self.categories = self.train.numbers.to(device), self.train.categories.to(device)
        self.target = self.train.target.to(device)
        self.steps_per_epoch = max(1, math.ceil(len(self.train) / cfg.batch_size))

    @property
    def select_examples(self) -> int:
        return 0 if self.select is None else len(self.select)

    def model_overrides(self) -> dict[str, Any]:
        e = self.encoding
        return {"numbers": len(e.numbers), "categories": e.cardinalities, "task": e.target.task,
                "outputs": 1 if self.regress else len(self.classes)}

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        rows = slice(i * self.cfg.batch_size, (i + 1) * self.cfg.batch_size)
        idx = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)[rows]
        mine = idx[rank_share(len(idx), rank, world)]
        return (self.numbers[mine], self.categories[mine], self.target[mine]), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        x, c, y = batch
        out = model(x, c).float()
        if self.regress:
            loss = F.mse_loss(out, y)
            return loss, {"squared": (out - y).pow(2).sum().detach(), "count": y.numel()}
        loss = F.cross_entropy(out, y, label_smoothing=self.cfg.label_smoothing)
        return loss, {"correct": (out.argmax(-1) == y).sum(), "count": y.numel()}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops()

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """The scored rows' figures, and where rows are held back for choosing (`select`), their figures
        and the key the trainer keeps the best weights by: (accuracy, -loss) for classes, -loss for numbers."""
        model.eval()
        result = self._score(model, self.test, dist)
        if self.select is not None:
            mine = self._score(model, self.select, dist)
            if self.regress:
                result.update(select_loss=mine["eval_loss"], select_r2=mine["eval_r2"], select=(-mine["eval_loss"],))
            else:
                result.update(select_loss=mine["eval_loss"], select_accuracy=mine["eval_accuracy"],
                              select=(mine["eval_accuracy"], -mine["eval_loss"]))
        model.train()
        return result

    def _score(self, model: nn.Module, rows: EncodedRows, dist: Any) -> dict[str, Any]:
        x, c = rows.numbers, rows.categories
        outputs = lambda i, j: model(x[i:j].to(self.device), c[i:j].to(self.device))
        if self.regress:
            return self._score_numbers(outputs, rows, dist)
        return score_classifier(outputs, rows.target, len(self.classes), dist, self.cfg.eval_batch_size,
                                self.cfg.amp, self.device)

    @torch.no_grad()
    def _score_numbers(self, outputs, rows: EncodedRows, dist: Any) -> dict[str, Any]:
        """R^2 against the scored rows' own mean, RMSE and MAE in the target's units, and the loss on the
        standardised scale; sums added across ranks."""
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)  # n, sum y, sum y^2, sum e^2, sum |e|
        shard = dist.shard(len(rows))
        for i in range(shard.start, shard.stop, self.cfg.eval_batch_size):
            j = min(i + self.cfg.eval_batch_size, shard.stop)
            with autocast(self.cfg.amp, self.device):
                pred = outputs(i, j).float()
            y = self.encoding.target_units(rows.target[i:j].to(self.device))
            e = self.encoding.target_units(pred) - y
            sums += torch.stack([torch.tensor(float(j - i), dtype=torch.float64, device=self.device), y.sum(),
                                 y.pow(2).sum(), e.pow(2).sum(), e.abs().sum()])
        n, sy, syy, see, sae = dist.sum(sums).tolist()
        total = syy - sy * sy / n
        std = self.encoding.target_scale[1]
        return {"eval_loss": see / n / std ** 2, "eval_r2": 1 - see / total if total > 0 else float("nan"),
                "eval_rmse": math.sqrt(see / n), "eval_mae": sae / n}

    # ---------------------------------------------------------------- reporting
    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        if self.regress:
            return {"train_loss_mse": sums["squared"] / max(1, sums["count"])} if "squared" in sums else {}
        return super().train_metrics(sums)

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        return {} if self.regress else super().progress_fields(sums)

    def eval_text(self, line: dict[str, Any]) -> str:
        held_back = f"  held-back loss {line['select_loss']:.4f}" if "select_loss" in line else ""
        if not self.regress:
            return super().eval_text(line) + held_back
        p = self._prefix
        return (f"{p} loss {line['eval_loss']:.4f}  {p} R2 {line['eval_r2']:.4f}  {p} RMSE {line['eval_rmse']:.4g}"
                + held_back)

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.regress:
            return super().summary_fields(line, history)
        if "eval_r2" not in line:
            return {}
        p = self._prefix
        return {f"{p}_r2": line["eval_r2"], f"{p}_rmse": line["eval_rmse"], f"{p}_mae": line["eval_mae"],
                f"{p}_loss": line["eval_loss"], "eval_split": self.eval_split}

    def final_line(self, summary: dict[str, Any]) -> str:
        if self.regress:
            p = self._prefix
            said = (f"{self.eval_split} R2 {summary[f'{p}_r2']:.4f}, RMSE {summary[f'{p}_rmse']:.4g}, "
                    f"MAE {summary[f'{p}_mae']:.4g} ({self.encoding.target.name}'s units)")
        else:
            said = self.accuracy_words(summary)
        return f"{said} after {summary['epochs']} epochs in {summary['train_seconds']:.0f}s of training"

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        if self.regress:
            from ..viz.tables import plot_predictions
            with torch.no_grad():
                model.eval()
                pred = torch.cat([model(self.test.numbers[i:i + 1024].to(self.device),
                                        self.test.categories[i:i + 1024].to(self.device)).float().cpu()
                                  for i in range(0, len(self.test), 1024)])
                model.train()
            plot_predictions(self.encoding.target_units(self.test.target).numpy(),
                             self.encoding.target_units(pred).numpy(), self.encoding.target.name,
                             run_dir / "predictions.png")
            return
        from ..viz import plot_confusion
        plot_confusion(result["confusion"], self.classes, run_dir / "confusion.png")

    def run_info(self) -> dict[str, Any]:
        s = self.splits
        return {"kind": "table", "dataset": self.cfg.data, "classes": self.classes,
                "encoding": self.encoding.to_dict(), "task": self.encoding.target.task,
                "train_examples": len(self.train), "test_examples": len(self.test), "eval_split": s.eval_split,
                "eval_source": s.source, "val_fraction": s.fraction,
                "select_examples": self.select_examples}

    def run_files(self) -> dict[str, bytes]:
        """heldout.txt: the rows scored, so that another method can be scored on exactly them."""
        s = self.splits
        if s.held_out_rows is None:
            text = f"# scored on every row of {s.source}\n"
        else:
            text = (f"# rows of {s.source} held out and scored (data rows counted from 1 after the header, blank "
                    f"lines not counted); seed {self.cfg.seed}, share {s.fraction:.3f}\n"
                    + "".join(f"{r}\n" for r in s.held_out_rows))
        return {HELD_OUT_FILE: text.encode()}


# ---------------------------------------------------------------------------------------------- derived settings

# Optimiser steps a run takes, over as many epochs as that is: chosen by 3-fold scores on the training parts
# of 12 tables (benchmarks/tables_select.py; docs/results.md, "Tables"). Small tables overfit with more:
# 600 updates beat 2,000 (65.3 points against 59.2, first on 10 of 12), then 300 beat 600 (66.0 against
# 65.3, mean rank 1.58 against 2.38; a weight decay of 0.05 at 600 scored 65.3).
UPDATES = 300
EPOCHS = (1, 200)        # ... but never more passes than this (a table of a few dozen rows)
BATCH = (16, 256)        # about a sixteenth of the training rows, a power of two within these
# Rows held back to pick the evaluation whose weights are kept (--select-fraction): none by default.
# Round 4 (16 tables) scored 0.15 held back at 300 updates 74.04 points and at 1,000 updates 73.59,
# against 74.38 for the last weights of 300 updates on every row (mean rank 1.60): the rows lost to
# training cost more than the choice gains on small tables; 1,000 updates with 0.15 held back led on the
# three largest (computers, diamonds, boston).
SELECT_FRACTION = 0.0
EVALUATIONS = 20         # evaluations a run makes when it picks one of them
# Dropout after the MLP's hidden layer and on each residual branch: kept for classes, none for numbers.
# Round 5 (16 tables): none for regression scored 74.58 points against 74.38 (mean rank 1.96 against
# 2.56 of 4), better on 7 of its 10 regression tables; a regression's output is one number whose scale
# dropout's noise blurs, where a class only needs the largest logit. 300 to 1,200 updates growing with
# the rows (as the square root) led on the three largest but lost on noisy and mid-sized tables
# (round 6: mean rank 1.57 against 1.43; docs/results.md, "Tables").
DROPOUT = {"classify": 0.1, "regress": 0.0}


def table_batch(n_train: int) -> int:
    """The batch from the training rows alone, so the same table gives the same run on any machine."""
    batch = int(min(BATCH[1], max(BATCH[0], 2 ** round(math.log2(max(1, n_train) / 16)))))
    return max(1, min(batch, n_train))


def _epochs(per_epoch: int) -> int:
    return int(min(EPOCHS[1], max(EPOCHS[0], round(UPDATES / per_epoch))))


def table_settings(data: str, asked: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(what the table is, in one line; its run's settings; why each was derived)."""
    files, frame, target, columns = describe_table(data, asked.get("label_column"), asked.get("objective"))
    n = len(frame)
    why: dict[str, str] = {}
    fraction = None
    if files.test is None:
        if target.task == "classify":
            labels = torch.tensor(class_codes(frame[target.name], target))
            fraction = holdout_fraction(labels, asked.get("val_fraction"))
            held = sum(round(fraction * int(c)) for c in torch.bincount(labels) if c)
            how = "a seeded share of each class"
        else:
            fraction = asked.get("val_fraction") or REGRESSION_FRACTION
            held, how = round(fraction * n), "a seeded share of the rows"
        why["val_fraction"] = (f"{fraction:.2f}: no _TEST file, so {how} is held out ({held:,} of {n:,} rows, "
                               f"listed in the run's {HELD_OUT_FILE})")
        n_train = n - held
    else:
        n_train = n
    select = asked.get("select_fraction")
    select = SELECT_FRACTION if select is None else float(select)
    if select:
        n_select = round(select * n_train)
        why["select_fraction"] = (f"{select:.2f}: a seeded share of the training rows ({n_select:,}) held back to "
                                  f"pick the evaluation whose weights the run keeps")
        n_train -= n_select
    batch = int(asked.get("batch_size") or table_batch(n_train))
    why["batch_size"] = f"{batch}: about a sixteenth of the {n_train:,} training rows, a power of two in {BATCH}"
    per_epoch = math.ceil(n_train / batch)
    epochs = _epochs(per_epoch)
    why["epochs"] = f"{epochs}: about {UPDATES:,} updates, at most {EPOCHS[1]} passes"
    total = (int(asked["max_steps"]) if asked.get("max_steps") else
             max(1, round((asked.get("epochs") or epochs) * per_epoch)))
    warmup = max(1, total // 20)
    why["warmup_steps"] = f"{warmup}: a twentieth of the run's {total:,} steps"
    evaluations = EVALUATIONS if select else 10
    eval_every = max(1, total // evaluations)
    why["eval_every"] = (f"{eval_every}: {evaluations} evaluations" + (
        ", the best on the rows held back kept" if select else " (none of them chooses anything)"))
    dropout = DROPOUT[target.task]
    why["dropout"] = (f"{dropout:g}: " + ("none for a number out (chosen on 16 tables)" if not dropout else
                                         "after the MLP's hidden layer and on each residual branch"))
    used = [c for c in columns if c.kind != "skipped"]
    numbers = _count(used, 'number') + _count(used, 'date')           # a date: its day count, and
    categories = _count(used, 'category') + 2 * _count(used, 'date')  # its month and weekday
    why["model"] = (f"table-small: one token per column ({_plural(numbers, 'number')}, "
                    f"{_plural(categories, 'category', 'categories')}) and a class token; width 64, depth 3")
    skipped = [c for c in columns if c.kind == "skipped"]
    if skipped:
        why["skipped"] = "; ".join(f"{c.name!r} ({c.why})" for c in skipped[:6]) + (
            f"; and {len(skipped) - 6} more" if len(skipped) > 6 else "")
    missing = sum(c.missing for c in columns if c.kind != "skipped")
    what = (f"a table of {n:,} rows{'' if files.test is None else f' (and a test file {files.test.name})'}: "
            f"{_plural(_count(used, 'number'), 'number column')}, "
            f"{_plural(_count(used, 'category'), 'category column')}"
            + (f", {_plural(_count(used, 'date'), 'date column')}" if _count(used, 'date') else "")
            + f", {missing:,} missing cells; target {target.name}: {target.why}")
    values = dict(task="table", model="table-small", data=data, objective=target.task, label_column=target.name,
                  val_fraction=fraction, select_fraction=select, batch_size=batch, epochs=epochs,
                  lr=1e-3, weight_decay=1e-4, warmup_steps=warmup, eval_every=eval_every, label_smoothing=0.0,
                  grad_clip=1.0, amp="none", eval_batch_size=1024,
                  model_overrides=dict(width=64, depth=3, heads=4, mlp_hidden=128, dropout=dropout))
    return what, values, why


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _count(columns, kind: str) -> int:
    return sum(1 for c in columns if c.kind == kind)


def class_codes(cells, target) -> list[int]:
    """Class indices of the target's cells, in the target's class order (for counting a held-out share)."""
    index = {c: i for i, c in enumerate(target.classes)}
    return [index[c] for c in class_cells(cells, target)]
