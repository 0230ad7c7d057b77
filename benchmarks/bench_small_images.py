"""anyformer on small image folders (`anyformer train --data DIR`, nothing else) beside logistic regression and
an SVM on the pixels and a timm ResNet-18 trained from scratch for the same time, on the MEASURE folders of
image_sets.py (none of them was looked at to choose anything: the image settings are chosen on the CHOOSE
folders, images_select.py; scikit-learn's load_digits is one of them).

For each MEASURE folder (built first: `python benchmarks/image_sets.py DIR`):

- anyformer: `python -m anyformer train --data <folder> --out <work>/runs/<name> --no-progress --no-plots
  [--anyformer-args ...]` in its own process, with this checkout first on PYTHONPATH, as a user runs it: the
  folder has no split, so the run holds out its own seeded, stratified share and scores it (val_accuracy).
  Recorded: the whole command's wall time (the issue asks for at most 5 minutes on 2 cores: a longer run is
  marked), its training seconds, and the time it said it expected before its first step.
- The peers are fitted on exactly the run's training images and scored on exactly the images it was scored
  on, decoded as the run decoded them (its task rebuilt from the run directory, as `anyformer eval` does):
  - LogReg: scikit-learn's LogisticRegression(max_iter=1000) on standardised pixels in [0, 1], pooled to at
    most 32x32 (what `anyformer train --baseline` fits);
  - SVM: scikit-learn's SVC() (RBF kernel, C=1, gamma="scale") on the same features;
  - ResNet-18: timm's `resnet18` (random weights, in_chans and num_classes of the folder), trained from scratch
    for as many seconds as anyformer's training took (its summary's train_seconds; --resnet-seconds to set
    them), with anyformer's batch size, AdamW (lr 1e-3, weight decay 0.05), label smoothing 0.1, a 5% warm-up
    and a cosine decay over the seconds, the run's own augmentation (its config's `augment` at its
    `augment_strength`) and normalisation; images under 32 px a side are scaled up to 32 (the network strides
    32); the same seed (--seed, default 0) and threads; scored once, at the end.

`--seed K` measures another split: anyformer runs with `--seed K` (the seed draws its held-out share and its
initialisation alike) and the peers are fitted on that split; the ResNet-18 is seeded with K. A held-out share
of 300-400 images moves 0.25-0.35 points an image, so one split cannot tell a gap of a point from chance.

    python benchmarks/bench_small_images.py                              # every MEASURE folder, writes results
    python benchmarks/bench_small_images.py --folders digits --anyformer-args="--max-steps 20" --no-write
    python benchmarks/bench_small_images.py --seed 1 --tag seed1                 # another split of each folder

Writes benchmarks/results/<processor>/small_images[_TAG].md and the rows as small_images[_TAG].jsonl.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from bench_common import (
    RESULTS,
    load_average,
    machine,
    processor_folder,
    table,
    wait_for_quiet,
    write_results,
)
from image_sets import CHOOSE, MEASURE, folder_of
from images_select import fit_reference

FIVE_MINUTES = 300
METHODS = ("anyformer", "LogReg", "SVM", "ResNet-18")
EXPECTED = re.compile(r"^expected time: about (.+?) for ", re.MULTILINE)


def run_anyformer(data: Path, out: Path, extra: list[str], timeout: float) -> dict:
    """`anyformer train --data DIR` (this checkout's) in a process of its own: its summary and the lines it said."""
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "anyformer", "train", "--data", str(data), "--out", str(out), "--no-progress",
           "--no-plots", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "seconds": round(time.perf_counter() - t0, 1),
                "command": shlex.join(cmd)}
    wall = round(time.perf_counter() - t0, 1)
    (out.parent / f"{out.name}.log").write_text(f"$ {shlex.join(cmd)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    expected = EXPECTED.search(proc.stdout)
    base = {"seconds": wall, "expected": expected.group(1) if expected else None, "command": shlex.join(cmd)}
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return {"error": f"exit {proc.returncode}: {lines[-1] if lines else '(no output)'}", **base}
    summary = json.loads((out / "summary.json").read_text())
    key = "val_accuracy" if "val_accuracy" in summary else "test_accuracy"
    return {"accuracy": summary[key], **base, "train_seconds": summary["train_seconds"], "steps": summary["steps"],
            "epochs": summary["epochs"], "params": summary["params"]}


def run_split(run: Path):
    """The run's task rebuilt from its directory (the same split, decoding and normalisation) and its config."""
    from bench_your_data import task_of
    task, meta = task_of(run)
    return task, meta


def pixel_sets(task):
    from anyformer.train.baseline_pixels import pixel_features, pooled_size
    size = pooled_size(*task.train.images.shape[-2:])
    return ((pixel_features(task.train.images, size), task.train.labels.numpy()),
            (pixel_features(task.test.images, size), task.test.labels.numpy()))


def train_resnet(task, meta: dict, seconds: float, threads: int, seed: int = 0) -> dict:
    """timm's ResNet-18 from random weights, trained for `seconds` on the run's training images with its batch,
    augmentation and normalisation; accuracy on the run's scored images."""
    import torch
    import torch.nn.functional as F

    from anyformer.data import random_crop_flip
    from anyformer.interop._torchvision_compat import ensure_torchvision_importable
    from anyformer.train.classify import crop_pad, digits_affine
    ensure_torchvision_importable()
    import timm

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    train_cfg = meta["train"]
    n, c, h, w = task.train.images.shape
    up = max(1.0, 32 / min(h, w))
    size = (math.ceil(h * up), math.ceil(w * up))
    model = timm.create_model("resnet18", pretrained=False, num_classes=len(task.train.classes), in_chans=c)
    batch = int(train_cfg.get("batch_size") or 128)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    augment = train_cfg.get("augment")
    strength = float(train_cfg.get("augment_strength", 1.0))
    black = float(task.normalise(torch.zeros(c, 1, 1, dtype=torch.uint8))[0, 0, 0])

    def prepare(x: torch.Tensor) -> torch.Tensor:
        return x if size == (h, w) else F.interpolate(x, size=size, mode="bilinear", align_corners=False)

    g = torch.Generator().manual_seed(seed)
    model.train()
    # One forward and backward before the clock starts, not applied (anyformer's training seconds also leave
    # out its setup): the first call creates the kernels' primitives and took over 2 s on a busy 2-core machine.
    F.cross_entropy(model(prepare(task.normalise(task.train.images[:min(batch, n)]))),
                    task.train.labels[:min(batch, n)]).backward()
    opt.zero_grad(set_to_none=True)
    steps, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        frac = elapsed / seconds
        lr = 1e-3 * (frac / 0.05 if frac < 0.05 else 0.5 * (1 + math.cos(math.pi * (frac - 0.05) / 0.95)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(0, n, (min(batch, n),), generator=g)
        x = task.normalise(task.train.images[idx])
        if augment == "digits":
            x = digits_affine(x, strength, g, black)
        elif augment == "crop_flip":
            x = random_crop_flip(x, pad=crop_pad(strength, (h, w)), generator=g)
        loss = F.cross_entropy(model(prepare(x)), task.train.labels[idx], label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    trained = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(task.test), 256):
            logits = model(prepare(task.normalise(task.test.images[i:i + 256])))
            correct += int((logits.argmax(-1) == task.test.labels[i:i + 256]).sum())
    return {"accuracy": correct / len(task.test), "seconds": round(time.perf_counter() - t0, 1),
            "train_seconds": round(trained, 1), "steps": steps, "epochs": round(steps * min(batch, n) / n, 2),
            "input": f"{size[0]}x{size[1]}"}


# ---------------------------------------------------------------------------------------------- the report


def _cell(row: dict | None) -> str:
    if row is None:
        return "-"
    return "failed" if "error" in row else f"{row['accuracy']:.4f}"


def report(rows: list[dict]) -> list[tuple[str, str]]:
    facts = {r["folder"]: r for r in rows if r["method"] == "folder"}
    by = {(r["folder"], r["method"]): r for r in rows if r["method"] != "folder"}
    names = list(facts)
    sections = [("Folders", table(
        ["folder", "kind", "images (train + scored)", "classes", "image size", "note"],
        [[n, f["kind"], f"{f['train']:,} + {f['scored']:,}", str(f["classes"]), f["size"], f["note"]]
         for n, f in facts.items()]))]
    rows_acc = []
    for n in names:
        ours = by.get((n, "anyformer"))
        peers = [by.get((n, m)) for m in METHODS[1:]]
        best = max((p["accuracy"] for p in peers if p and "error" not in p), default=None)
        gap = "-" if ours is None or "error" in ours or best is None else f"{100 * (ours['accuracy'] - best):+.1f}"
        rows_acc.append([n, *[_cell(by.get((n, m))) for m in METHODS], gap])
    sections.append(("Accuracy on the held-out images", table([*["folder"], *METHODS, "anyformer - best peer (points)"],
                                                              rows_acc)))

    def secs(n, m):
        r = by.get((n, m))
        if r is None:
            return "-"
        text = f"{r['seconds']:.0f}"
        if r.get("train_seconds") is not None:
            text += f" ({r['train_seconds']:.0f} training)"
        if m == "anyformer" and r["seconds"] > FIVE_MINUTES:
            text += " **over 5 min**"
        return text
    sections.append(("Seconds", "anyformer: the whole command (in brackets its training loop); LogReg and SVM: fit "
                     "and predict; ResNet-18: its training (as long as anyformer's) and scoring.\n\n" +
                     table(["folder", *METHODS, "anyformer's estimate before its first step"],
                           [[n, *[secs(n, m) for m in METHODS], (by.get((n, "anyformer")) or {}).get("expected") or "-"]
                            for n in names])))
    errors = [f"- {n}, {m}: {by[(n, m)]['error']}" for n in names for m in METHODS if "error" in by.get((n, m), {})]
    if errors:
        sections.append(("Failed runs", "\n".join(errors)))
    return sections


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(tempfile.gettempdir()) / "imgsets",
                    help="where image_sets.py built the folders (its OUT)")
    ap.add_argument("--folders", help="comma-separated MEASURE folders (default: all of them)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anyformer-bench-small-images")
    ap.add_argument("--anyformer-args", default="", help="extra flags for every `anyformer train`, one string "
                    "(a single flag as --anyformer-args=--flag)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the ResNet-18")
    ap.add_argument("--resnet-seconds", type=float, help="the ResNet-18's training seconds (default: anyformer's)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before an anyformer run is stopped")
    ap.add_argument("--seed", type=int, default=0, help="the split's and every model's seed (anyformer's --seed)")
    ap.add_argument("--tag", default="", help="suffix of the results files")
    ap.add_argument("--no-wait", action="store_true", help="start without waiting for a quiet machine")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    measure = {s.name: s for s in MEASURE}
    names = args.folders.split(",") if args.folders else list(measure)
    if unknown := [n for n in names if n not in measure]:
        sys.exit(f"not MEASURE folders: {unknown} (CHOOSE folders {[s.name for s in CHOOSE]} are for "
                 f"images_select.py only); MEASURE: {list(measure)}")
    extra = shlex.split(args.anyformer_args) + (["--seed", str(args.seed)] if args.seed else [])
    started, load_before = dt.datetime.now(dt.timezone.utc), load_average() if args.no_wait else wait_for_quiet()
    rows: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for name in names:
        folder = folder_of(args.sets, name)
        if not folder.is_dir():
            sys.exit(f"{folder} is missing: build it first with `python benchmarks/image_sets.py {args.sets} "
                     f"--sets {name}`")
        run = args.work / "runs" / name
        ours = {"folder": name, "method": "anyformer", **run_anyformer(folder, run, extra, args.timeout)}
        if "error" in ours:
            record(ours)
            continue
        task, meta = run_split(run)
        _, c, h, w = task.train.images.shape
        record({"folder": name, "method": "folder", "kind": measure[name].kind, "note": measure[name].note,
                "train": len(task.train), "scored": len(task.test), "classes": len(task.train.classes),
                "size": f"{h}x{w}" + (" grey" if c == 1 else "")})
        record(ours)
        train, test = pixel_sets(task)
        for method in ("LogReg", "SVM"):
            record({"folder": name, "method": method, **fit_reference(method, train, test)})
        seconds = args.resnet_seconds or ours["train_seconds"]
        record({"folder": name, "method": "ResNet-18", **train_resnet(task, meta, seconds, args.threads, args.seed)})
    sections = report(rows)
    for heading, text in sections:
        print(f"\n## {heading}\n\n{text}")
    if args.no_write:
        return
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") + (" (anyformer/ changed)" if git("status", "--porcelain", "anyformer") else "")
    facts = {**machine(), "commit": commit, "started": f"{started:%Y-%m-%d %H:%M} UTC",
             "load before / after": f"{load_before} / {load_average()}", "seed": args.seed,
             "command": "python benchmarks/bench_small_images.py " + shlex.join(sys.argv[1:])}
    suffix = f"_{args.tag}" if args.tag else ""
    intro = ("anyformer `train --data DIR` on the MEASURE folders of image_sets.py beside logistic regression and an "
             "SVM on the pixels and timm's ResNet-18 trained from scratch for anyformer's training time, all on the "
             "images the run held out (bench_small_images.py's docstring says how each is run). anyformer flags: "
             f"`{args.anyformer_args or '(none)'}`.")
    write_results(RESULTS / f"small_images{suffix}.md", "Small image folders: anyformer beside the pixel baselines "
                  "and a ResNet-18", intro, facts, sections)
    path = RESULTS / processor_folder() / f"small_images{suffix}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
