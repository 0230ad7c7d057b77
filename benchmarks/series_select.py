"""Choosing the `series` recipe on training splits alone: k-fold scores of its variants.

Each variant is a set of settings on top of the `series` recipe. It is trained on k-1 folds of a
dataset's `_TRAIN` split and scored on the k-th, for every fold (stratified, seeded; k = 5, fewer
where a class has fewer series, 3 for sets of 500 series and more). No test split is read: the
datasets are those of `series_selection_data.py` (Coffee, PigCVP, PLAID: `_TRAIN` files only),
none of which is in the reported table (`bench_series.py`).

    python benchmarks/series_selection_data.py ~/series-select
    python benchmarks/series_select.py --root ~/series-select --variants before kernels
    python benchmarks/series_select.py --list

Writes benchmarks/results/<processor>/series_select[_TAG].md and the rows as .jsonl (appended, so
that variants measured in separate calls make one table).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_common import RESULTS, cpu_words, load_average, processor_folder  # noqa: E402
from series_selection_data import SELECTION  # noqa: E402

# Each variant: TrainConfig settings and model settings (under "model") on top of the recipe.
_KERNELS = {"augment": "none", "ema": None, "time_budget": None,
            "model": {"stem": "kernels", "pool": "mean", "difference": False, "position": "learned",
                      "kernel_features": 4000}}
VARIANTS: dict[str, dict] = {
    # The recipe before: linear patches of values and slopes, 3,000 updates within a 100 s budget.
    "before": {"max_steps": 3000, "time_budget": 100.0},
    "kernels": {**_KERNELS, "max_steps": 600},
    "kernels-cls": {**_KERNELS, "max_steps": 600, "model": {**_KERNELS["model"], "pool": "cls"}},
    "kernels-10k": {**_KERNELS, "max_steps": 600, "model": {**_KERNELS["model"], "kernel_features": 10000}},
    "kernels-drop": {**_KERNELS, "max_steps": 600, "model": {**_KERNELS["model"], "token_drop": 0.2}},
    "kernels-1500": {**_KERNELS, "max_steps": 1500},
    "kernels-rotary": {**_KERNELS, "max_steps": 600, "model": {**_KERNELS["model"], "position": "rotary"}},
    "kernels-ema": {**_KERNELS, "max_steps": 600, "ema": 0.995},
    "kernels-wide": {**_KERNELS, "max_steps": 600, "model": {**_KERNELS["model"], "width": 128, "mlp_hidden": 256}},
    # Checks of what the recipe inherited from the one before, on top of the recipe as chosen (kernels-10k).
    "recipe-per-series": {**_KERNELS, "max_steps": 600, "normalize": "series",
                          "model": {**_KERNELS["model"], "kernel_features": 10000}},
    "recipe-wide": {**_KERNELS, "max_steps": 600,
                    "model": {**_KERNELS["model"], "kernel_features": 10000, "width": 128, "mlp_hidden": 256}},
}


def folds(labels: np.ndarray, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds: k = 5, at most the smallest class's count (at least 2), 3 from 500 series."""
    from sklearn.model_selection import StratifiedKFold
    k = max(2, min(5 if len(labels) < 500 else 3, int(np.bincount(labels).min())))
    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels))


def score_fold(name: str, variant: dict, train, held, seed: int, threads: int) -> dict:
    from anyformer.train import Trainer, recipe_config
    from anyformer.train.series import SeriesClassification
    settings = {k: v for k, v in variant.items() if k != "model"}
    with tempfile.TemporaryDirectory(prefix="series-select-") as tmp:
        # The stock kernels: the plan's measuring (tens of seconds a run) changes speed, not what is learned.
        cfg = recipe_config("series", data=name, seed=seed, out=str(Path(tmp) / "run"), progress=False,
                            threads=threads, plan="stock", model_overrides=dict(variant.get("model", {})))
        for key, value in settings.items():  # None is a setting here (no EMA, no budget), not "unset"
            setattr(cfg, key, value)
        task = SeriesClassification(cfg, torch.device("cpu"), train=train, test=held)
        t0 = time.perf_counter()
        summary = Trainer(cfg, task=task).run()
        wall = time.perf_counter() - t0
    return {"accuracy": summary["test_accuracy"], "train_seconds": summary["train_seconds"],
            "wall_seconds": round(wall, 1), "steps": summary["steps"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=["before", "kernels"])
    p.add_argument("--datasets", nargs="+", default=SELECTION)
    p.add_argument("--root", type=Path, default=Path(os.environ.get("ANYFORMER_DATA", "~/series-select")).expanduser(),
                   help="the folder series_selection_data.py wrote")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tag", default="")
    p.add_argument("--list", action="store_true")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    if args.list:
        for name, v in VARIANTS.items():
            print(f"{name}: {json.dumps(v)}")
        return
    from anyformer.data.series.dataset import load_series_data
    folder = RESULTS / processor_folder()
    suffix = f"_{args.tag}" if args.tag else ""
    raw = folder / f"series_select{suffix}.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.datasets:
        train, test = load_series_data(str(args.root / name))
        if test is not None:
            raise SystemExit(f"{name}: a test split is present; selection reads training splits only "
                             f"(extract with series_selection_data.py)")
        for fold, (fit, held) in enumerate(folds(train.labels.numpy(), args.seed)):
            a, b = train.take(torch.as_tensor(fit)), train.take(torch.as_tensor(held))
            for v in args.variants:
                r = {"dataset": name, "fold": fold, "variant": v, "seed": args.seed, "threads": args.threads,
                     **score_fold(name, VARIANTS[v], a, b, args.seed, args.threads)}
                rows.append(r)
                print(json.dumps(r), flush=True)
                if not args.no_write:  # row by row: an interrupted selection keeps what it measured
                    with raw.open("a") as f:
                        f.write(json.dumps({**r, "date": f"{dt.date.today()}", "cpu": cpu_words()}) + "\n")
    if not args.no_write:
        write_table(raw, folder / f"series_select{suffix}.md")


def write_table(raw: Path, out: Path) -> None:
    """Mean k-fold accuracy per variant and dataset, over every row measured so far."""
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    # The mean over the datasets every variant was scored on, so that the means compare like with like.
    common = [d for d in datasets if all(any(r["variant"] == v and r["dataset"] == d for r in rows) for v in variants)]
    lines = [f"# Choosing the series recipe on training splits ({', '.join(datasets)}: `_TRAIN` files only)", "",
             f"{cpu_words()}; written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load {load_average()}. "
             "`python benchmarks/series_select.py`: stratified k-fold of each training split, the mean held-out "
             "accuracy over the folds (train seconds: the mean per fold, on cores shared with other work: not a "
             "speed figure). Variants as in the script's VARIANTS.", "",
             "| variant | " + " | ".join(datasets) + f" | mean of {', '.join(common)} | train s (mean) |",
             "|---|" + "---:|" * (len(datasets) + 2)]
    for v in variants:
        cells = []
        for d in datasets:
            acc = [r["accuracy"] for r in rows if r["variant"] == v and r["dataset"] == d]
            cells.append(f"{statistics.fmean(acc):.4f} ({len(acc)} folds)" if acc else "-")
        mean = statistics.fmean(statistics.fmean(r["accuracy"] for r in rows if r["variant"] == v and r["dataset"] == d)
                                for d in common) if common else float("nan")
        secs = [r["train_seconds"] for r in rows if r["variant"] == v]
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {mean:.4f} | {statistics.fmean(secs):.0f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
