"""anyformer's `series` recipe beside aeon's MiniRocket (and 1-NN DTW) on UCR/UEA archive datasets.

On the archive's official train/test splits as aeon ships them: for each dataset and seed,
`anyformer train series --data NAME --seed S` run as its own process (the recipe unchanged: nothing
here is set per dataset) and, in this process, MiniRocketClassifier(random_state=S) fitted and scored
on the same split; 1-NN DTW once
per dataset (it has no seed). MiniRocket refuses unequal lengths, so it reads the archive's equal-length
copies (JapaneseVowels_eq, PickupGestureWiimoteZ_eq) where anyformer reads the original series.

    python benchmarks/bench_series.py                                # 8 datasets x 3 seeds, writes the table
    python benchmarks/bench_series.py --datasets GunPoint --seeds 0 --no-write
    python benchmarks/bench_series.py --set patching=channel --tag channel   # the other patching

Writes benchmarks/results/<processor>/series[_TAG].md and the raw rows as series[_TAG].jsonl.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_common import RESULTS, cpu_words, load_average, processor_folder  # noqa: E402

# Every classification dataset aeon's wheel ships. The recipe was chosen on none of them
# (series_select.py: k-fold on the training splits of Coffee, PigCVP and PLAID).
DATASETS = ["GunPoint", "ItalyPowerDemand", "ArrowHead", "BasicMotions", "JapaneseVowels", "OSULeaf", "ACSF1",
            "PickupGestureWiimoteZ"]
# MiniRocket and DTW need equal lengths: they read the archive's equal-length copies of these.
PEER_DATA = {"JapaneseVowels": "JapaneseVowels_eq", "PickupGestureWiimoteZ": "PickupGestureWiimoteZ_eq"}


def as_numpy(ds):
    return ds.values.numpy().astype("float64"), ds.labels.numpy()


def run_anyformer(name: str, seed: int, overrides: dict, threads: int) -> dict:
    """`anyformer train series --data NAME --seed S` in a process of its own: the command a user runs,
    and out of reach of the thread pools numba leaves behind in this one (after a MiniRocket fit, a
    training step here measured 40x slower: 970 ms against 26 ms)."""
    with tempfile.TemporaryDirectory(prefix="bench-series-") as tmp:
        out = Path(tmp) / "run"
        sets = [f"--set={k}={json.dumps(v)}" for k, v in overrides.items()]
        cmd = [sys.executable, "-m", "anyformer", "train", "series", "--data", name, "--seed", str(seed),
               "--out", str(out), "--threads", str(threads), "--no-progress", *sets]
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        summary = json.loads((out / "summary.json").read_text())
    return {"accuracy": summary["test_accuracy"], "train_seconds": summary["train_seconds"],
            "wall_seconds": round(wall, 1), "steps": summary["steps"], "epochs": summary["epochs"],
            "params": summary["params"]}


def run_peer(kind: str, name: str, seed: int, threads: int) -> dict:
    from anyformer.data.series.dataset import load_series_splits
    train, test = load_series_splits(PEER_DATA.get(name, name))
    (xtr, ytr), (xte, yte) = as_numpy(train), as_numpy(test)
    if kind == "minirocket":
        from aeon.classification.convolution_based import MiniRocketClassifier
        clf = MiniRocketClassifier(random_state=seed, n_jobs=threads)
    else:
        from aeon.classification.distance_based import KNeighborsTimeSeriesClassifier
        clf = KNeighborsTimeSeriesClassifier(n_neighbors=1, distance="dtw", n_jobs=threads)
    # numba compiles aeon's kernels on their first call (tens of seconds): a fit and predict on a few
    # series first, timed apart, so that the timed fit is the method's own cost.
    t = time.perf_counter()
    few = sorted({int(ytr.argmax()), int(ytr.argmin()), *range(4)})  # at least two classes
    clf.fit(xtr[few], ytr[few])
    clf.predict(xte[:2])
    warmup = time.perf_counter() - t
    clf = type(clf)(**clf.get_params())
    t0 = time.perf_counter()
    clf.fit(xtr, ytr)
    t1 = time.perf_counter()
    pred = clf.predict(xte)
    t2 = time.perf_counter()
    return {"accuracy": float((pred == yte).mean()), "fit_seconds": round(t1 - t0, 2), "warmup_seconds": round(warmup, 1),
            "predict_seconds": round(t2 - t1, 2), "data": PEER_DATA.get(name, name)}


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.4f}"
    return f"{mean:.4f} ± {statistics.stdev(values):.4f} ({min(values):.4f}-{max(values):.4f})"


def table(rows: list[dict], seeds: list[int]) -> list[str]:
    out = ["| dataset | anyformer accuracy (mean ± sd, min-max) | anyformer train s / wall s | MiniRocket accuracy | "
           "MiniRocket fit s / predict s (numba compile s, apart) | 1-NN DTW accuracy | difference (points) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    diffs = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        af = [r for r in rows if r["dataset"] == name and r["who"] == "anyformer"]
        mr = [r for r in rows if r["dataset"] == name and r["who"] == "minirocket"]
        dtw = [r for r in rows if r["dataset"] == name and r["who"] == "dtw"]
        a = [r["accuracy"] for r in af]
        m = [r["accuracy"] for r in mr]
        diff = 100 * (statistics.fmean(a) - statistics.fmean(m)) if a and m else float("nan")
        diffs.append(diff)
        out.append(f"| {name} | {spread(a) if a else '-'} | "
                   f"{statistics.fmean(r['train_seconds'] for r in af):.0f} / {statistics.fmean(r['wall_seconds'] for r in af):.0f} "
                   f"(max {max(r['wall_seconds'] for r in af):.0f}) | "
                   f"{spread(m) if m else '-'} | "
                   f"{statistics.fmean(r['fit_seconds'] for r in mr):.1f} / {statistics.fmean(r['predict_seconds'] for r in mr):.1f} "
                   f"({statistics.fmean(r['warmup_seconds'] for r in mr):.0f}) | "
                   f"{dtw[0]['accuracy']:.4f} | {diff:+.1f} |" if mr and dtw else f"| {name} | {spread(a)} | - | - | - | - | - |")
    if diffs:
        out.append(f"\nMean difference over the datasets: {statistics.fmean(diffs):+.2f} points "
                   f"(anyformer minus MiniRocket; seeds {seeds}); anyformer equal or better on "
                   f"{sum(d >= 0 for d in diffs)} of {len(diffs)}.")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=DATASETS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a model override for every dataset alike (e.g. patching=channel)")
    p.add_argument("--tag", default="", help="suffix of the results files")
    p.add_argument("--no-peers", action="store_true", help="anyformer only")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    overrides = {k: json.loads(v) if v[:1].isdigit() else v for k, v in (s.split("=", 1) for s in args.overrides)}
    started = dt.datetime.now(dt.timezone.utc)
    rows = []
    for name in args.datasets:
        for seed in args.seeds:
            r = {"dataset": name, "seed": seed, "who": "anyformer", **run_anyformer(name, seed, overrides, args.threads)}
            rows.append(r)
            print(json.dumps(r), flush=True)
            if not args.no_peers:
                r = {"dataset": name, "seed": seed, "who": "minirocket", **run_peer("minirocket", name, seed, args.threads)}
                rows.append(r)
                print(json.dumps(r), flush=True)
        if not args.no_peers:
            r = {"dataset": name, "seed": None, "who": "dtw", **run_peer("dtw", name, 0, args.threads)}
            rows.append(r)
            print(json.dumps(r), flush=True)
    lines = table(rows, args.seeds)
    print("\n".join(lines))
    if args.no_write:
        return
    import aeon
    import torch
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    model = cpu_words()
    suffix = f"_{args.tag}" if args.tag else ""
    folder = RESULTS / processor_folder()
    folder.mkdir(parents=True, exist_ok=True)
    head = [f"# Time-series classification: anyformer `series` beside MiniRocket{' (' + args.tag + ')' if args.tag else ''}",
            "",
            f"{model} (lscpu), {args.threads} threads; started {started:%Y-%m-%d %H:%M} UTC, load at the end "
            f"{load_average()}; commit {commit}; torch {torch.__version__}, aeon {aeon.__version__}.",
            f"`python benchmarks/bench_series.py {' '.join(sys.argv[1:])}`: the `series` recipe unchanged on every "
            f"dataset{', with ' + str(overrides) if overrides else ''}, each run `anyformer train series --data NAME "
            "--seed S` in its own process; MiniRocketClassifier(random_state=seed) and 1-NN DTW on the same splits in "
            "this one (JapaneseVowels and PickupGestureWiimoteZ: the peers read the _eq copies). Accuracy on the "
            "official test split; anyformer's train seconds exclude data loading and planning, its wall seconds are "
            "the whole command from its process's start.",
            ""]
    (folder / f"series{suffix}.md").write_text("\n".join(head + lines) + "\n")
    (folder / f"series{suffix}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {folder / f'series{suffix}.md'}")


if __name__ == "__main__":
    main()
