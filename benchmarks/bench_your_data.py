"""Runs trained on a user's own data (`anyformer train --data PATH`) against simple baselines on
exactly the examples each run was scored on: scikit-learn's logistic regression on the pixels or
values for a classifier (its training split and its held-out share, rebuilt by the run's own task,
so the same examples), and for a language model the corpus's byte unigram model (fitted on the
training bytes, scored on the validation bytes) against the run's validation bits per byte.

    python benchmarks/bench_your_data.py runs/emoji runs/sprueche runs/osuleaf [--no-write]

It trains nothing of anyformer's: it reads each run's summary.json, so run the trainings first
(their commands are in the results file this writes, benchmarks/results/<cpu>/your_data.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_common import RESULTS, machine, table, write_results  # noqa: E402


def task_of(run: Path):
    """The run's task, rebuilt as `anyformer eval` rebuilds it: the same split, the same preprocessing."""
    import torch

    from anyformer.models import read_config
    from anyformer.train import TrainConfig
    from anyformer.train.own_model import OWN
    from anyformer.train.tasks import make_task
    meta = json.loads((run / "config.json").read_text())
    if meta.get("family") != OWN:
        read_config(run)  # refuses a damaged one in a line
    cfg = TrainConfig.from_dict(meta["train"])
    return make_task(cfg, torch.device("cpu"), info={**meta["data"], "run_dir": str(run.resolve())}), meta


def flat(x) -> "numpy.ndarray":
    import numpy as np
    a = x.float().reshape(len(x), -1).numpy()
    return np.nan_to_num(a)


def logistic_regression(train_x, train_y, test_x, test_y) -> tuple[float, float]:
    """Accuracy of a standardised multinomial logistic regression, and the seconds it took."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    t = time.perf_counter()
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(train_x, train_y)
    return float((model.predict(test_x) == test_y).mean()), time.perf_counter() - t


def classifier_row(run: Path, task, meta: dict) -> list[str]:
    summary = json.loads((run / "summary.json").read_text())
    key = "val_accuracy" if "val_accuracy" in summary else "test_accuracy"
    if meta["data"]["kind"] == "images":
        train_x, test_x = flat(task.train.images), flat(task.test.images)
        train_y, test_y = task.train.labels.numpy(), task.test.labels.numpy()
        what = f"{len(train_y):,} + {len(test_y):,} images, {len(task.train.classes)} classes, pixels at " \
               f"{'x'.join(map(str, meta['data']['image_size']))}"
    else:
        train_x, test_x = flat(task.train.values), flat(task.test.values)
        train_y, test_y = task.train.labels.numpy(), task.test.labels.numpy()
        what = f"{len(train_y):,} + {len(test_y):,} series, {len(task.classes)} classes, values (NaN as 0)"
    base, seconds = logistic_regression(train_x, train_y, test_x, test_y)
    ours = summary[key]
    return [run.name, meta["data"]["kind"], what, f"{key.split('_')[0]} accuracy {ours:.4f}",
            f"logistic regression {base:.4f} ({seconds:.0f} s)", f"{ours - base:+.4f}",
            f"{summary['train_seconds']:.0f} s"]


def unigram_bits(train: bytes, val: bytes) -> tuple[float, float]:
    """(entropy of the training bytes, cross-entropy of the validation bytes under the training
    bytes' unigram with add-one smoothing over 256 values), bits per byte."""
    counts = Counter(train)
    n = len(train)
    entropy = -sum(c / n * math.log2(c / n) for c in counts.values())
    total = n + 256
    cross = -sum(math.log2((counts.get(b, 0) + 1) / total) for b in val) / max(1, len(val))
    return entropy, cross


def text_row(run: Path, task, meta: dict) -> list[str]:
    """The text split as the run made it: the last tenth of the corpus's text is validation."""
    from anyformer.data.text.read import read_text
    summary = json.loads((run / "summary.json").read_text())
    text = read_text(meta["train"]["data"]).encode("utf-8")
    cut = int(len(text) * (1 - meta["data"].get("val_fraction", 0.1)))
    entropy, cross = unigram_bits(text[:cut], text[cut:])
    bpb = summary.get("val_bpb")
    what = f"{len(text) / 2**20:.1f} MiB, tokenizer {meta['data'].get('tokenizer')}, vocab {meta['data'].get('vocab_size')}"
    return [run.name, "text", what, f"val bits/byte {bpb:.4f}" if bpb is not None else "val_bpb missing",
            f"byte unigram {cross:.4f} (entropy {entropy:.4f})",
            f"{bpb / cross:.2f}x of it" if bpb is not None else "-", f"{summary['train_seconds']:.0f} s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for run in args.runs:
        task, meta = task_of(run)
        rows.append(text_row(run, task, meta) if meta["data"]["kind"] == "text" else classifier_row(run, task, meta))
        print(" | ".join(rows[-1]), flush=True)
    text = table(["run", "kind", "data", "anyformer", "baseline", "difference", "training"], rows)
    print(text)
    if not args.no_write:
        commands = "\n".join(f"    {json.loads((r / 'config.json').read_text())['train'].get('data')} -> {r}"
                             for r in args.runs)
        write_results(RESULTS / "your_data.md", "Your own data: runs against simple baselines",
                      "Data made by `python benchmarks/make_your_data.py DIR`; each run trained by `anyformer train "
                      "--data PATH --out DIR` and nothing else, from a fresh clone; each baseline scored on the same "
                      "examples (bench_your_data.py). Data and runs:\n\n" + commands,
                      machine(), [("Results", text)])


if __name__ == "__main__":
    main()
