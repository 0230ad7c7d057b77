"""What masked-autoencoder pre-training is for: accuracy with few labels.

End to end, each step an `anyformer` command as a user would type it:
1. pre-train `mae-mnist` on the 60,000 MNIST training images without their labels (or reuse a
   finished MAE run given with --mae);
2. for each label fraction (default 1% and 10%: 600 and 6,000 labels, class-balanced, the same
   subset for both), train `mnist-finetune` (the ViT whose trunk is the MAE's encoder) once from
   scratch and once from the MAE's encoder (--init-from), same model, steps and seed;
3. `anyformer probe`: a linear classifier on the frozen encoder's features against one on raw
   pixels, fitted on the same labels.
It prints a markdown table with the processor and date, and writes it to
benchmarks/results/<processor>/mae_labels.md.

    ANYFORMER_DATA=../shared/data python benchmarks/mae_labels.py   # everything (~25 min on a quiet 2-core CPU)
    python benchmarks/mae_labels.py --mae runs/mae-mnist --fractions 0.01 --threads 1
    python benchmarks/mae_labels.py --reuse                      # keep finished runs found under --work
    python benchmarks/mae_labels.py --mae runs/mae-mnist --reuse --long-scratch 1200   # the recorded table
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_common import _cpu_model, processor_folder  # noqa: E402


def anyformer(*args: str, threads: int) -> str:
    """Run one `anyformer` command; its output, or a clear failure naming the command."""
    cmd = [sys.executable, "-m", "anyformer", *args]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    print("$ anyformer " + " ".join(args), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"`anyformer {' '.join(args)}` failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def finished(run: Path, train: dict[str, object]) -> bool:
    """A run with a summary whose saved settings agree with `train` on every key given."""
    try:
        saved = json.loads((run / "config.json").read_text())["train"]
    except (OSError, ValueError, KeyError):
        return False
    return (run / "summary.json").is_file() and all(saved.get(k) == v for k, v in train.items())


def train(run: Path, recipe: str, extra: list[str], expect: dict[str, object], args) -> dict:
    if not (args.reuse and finished(run, expect)):
        anyformer("train", recipe, "--out", str(run), "--threads", str(args.threads), "--no-progress",
                  "--seed", str(args.seed), *extra, threads=args.threads)
    return json.loads((run / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mae", type=Path, help="a finished MAE run to reuse (default: pre-train mae-mnist)")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "mae_labels", help="where the runs go")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.1])
    p.add_argument("--max-steps", type=int, help="fine-tuning steps (default: the mnist-finetune recipe's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--long-scratch", type=int, metavar="STEPS",
                   help="a longer budget on the first fraction: STEPS steps from scratch (mnist-finetune's ViT "
                        "and the default mnist recipe's hybrid ViT) and from the MAE encoder")
    p.add_argument("--reuse", action="store_true", help="keep runs under --work that finished with these settings")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    steps = ["--max-steps", str(args.max_steps)] if args.max_steps else []

    if args.mae is None:
        args.mae = args.work / "mae-mnist"
        mae = train(args.mae, "mae-mnist", [], {"recipe": "mae-mnist", "seed": args.seed}, args)
    else:
        mae = json.loads((args.mae / "summary.json").read_text())
    rows, probes = [], []
    for f in args.fractions:
        expect = {"label_fraction": f, "seed": args.seed, **({"max_steps": args.max_steps} if args.max_steps else {})}
        tag = f"{f:g}"
        scratch = train(args.work / f"scratch-{tag}", "mnist-finetune", ["--label-fraction", tag, *steps],
                        {**expect, "init_from": None}, args)
        tuned = train(args.work / f"finetune-{tag}", "mnist-finetune",
                      ["--label-fraction", tag, "--init-from", str(args.mae), *steps],
                      {**expect, "init_from": str(args.mae)}, args)
        labels = json.loads((args.work / f"scratch-{tag}" / "config.json").read_text())["data"]["train_examples"]
        rows.append((labels, f, scratch, tuned))
        out = anyformer("probe", str(args.mae), "--label-fraction", tag, "--seed", str(args.seed),
                        "--threads", str(args.threads), threads=args.threads)
        probes.append((labels, json.loads(out.strip().splitlines()[-1])))

    long_rows = []
    if args.long_scratch:
        f, tag, n = args.fractions[0], f"{args.fractions[0]:g}", args.long_scratch
        for recipe, name, init in (("mnist-finetune", f"scratch-{tag}-{n}", None),
                                   ("mnist", f"mnist-recipe-{tag}-{n}", None),
                                   ("mnist-finetune", f"finetune-{tag}-{n}", str(args.mae))):
            extra = ["--label-fraction", tag, "--max-steps", str(n), "--eval-every", str(max(1, n // 4))]
            s = train(args.work / name, recipe, extra + (["--init-from", init] if init else []),
                      {"recipe": recipe, "label_fraction": f, "seed": args.seed, "max_steps": n, "init_from": init},
                      args)
            long_rows.append((recipe, init, s))

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# MAE pre-training and few labels (MNIST)", "",
        f"{_cpu_model()}, {os.cpu_count()} cores, {args.threads} thread(s) per run; measured {now}.", "",
        f"MAE pre-training: `mae-mnist`, {mae['epochs']} epochs, {mae['train_seconds']:.0f}s of training, "
        f"test masked-patch MSE {mae['test_masked_mse']:.4f} (normalised pixels; {mae['params']:,} parameters "
        f"with the decoder).", "",
        f"Fine-tuning: `mnist-finetune` (vit-mae-mnist), {rows[0][2]['steps']} steps, the same class-balanced "
        f"labels (seed {args.seed}) and seed for both columns; test accuracy on the 10,000 test digits.", "",
        "| labels | from scratch | from MAE encoder | difference (points) | seconds (scratch / MAE) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for labels, f, s, t in rows:
        lines.append(f"| {labels:,} ({100 * f:g}%) | {s['test_accuracy']:.4f} | {t['test_accuracy']:.4f} | "
                     f"{100 * (t['test_accuracy'] - s['test_accuracy']):+.1f} | "
                     f"{s['train_seconds']:.0f} / {t['train_seconds']:.0f} |")
    if long_rows:
        lines += ["", f"A longer budget on the same {rows[0][0]:,} labels: {args.long_scratch} steps "
                  f"({args.long_scratch / rows[0][2]['steps']:g}x as many), from scratch with this ViT and with the "
                  f"default `mnist` recipe's hybrid ViT (conv stem, tuned for MNIST), and from the MAE encoder:", "",
                  "| recipe | model | start | test accuracy | seconds |", "|---|---|---|---:|---:|"]
        for recipe, init, s in long_rows:
            lines.append(f"| `{recipe}` | {s['model']} ({s['params']:,} parameters) | "
                         f"{'MAE encoder' if init else 'scratch'} | {s['test_accuracy']:.4f} | "
                         f"{s['train_seconds']:.0f} |")
    lines += ["", "Linear probe (`anyformer probe`): logistic regression (L-BFGS, standardised inputs) on the "
              "frozen MAE encoder's mean patch token against raw pixels, fitted on the same labels.", "",
              "| labels | MAE features | raw pixels | difference (points) |", "|---:|---:|---:|---:|"]
    for labels, r in probes:
        lines.append(f"| {labels:,} | {r['features_accuracy']:.4f} ({r['features_dim']} dims) | "
                     f"{r['pixels_accuracy']:.4f} ({r['pixels_dim']} dims) | "
                     f"{100 * (r['features_accuracy'] - r['pixels_accuracy']):+.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        from anyformer.files import atomic_write_text
        out = ROOT / "benchmarks" / "results" / processor_folder() / "mae_labels.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
