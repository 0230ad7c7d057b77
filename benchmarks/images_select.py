"""Choosing anyformer's derived image settings on the CHOOSE image folders alone: k-fold scores of candidate flag sets.

RULE FOR CHOOSING (fixed before any run; the script applies it and prints the verdict):

    The current default is the first candidate given (normally `base`, no extra flags). Another
    candidate replaces it only if, over the CHOOSE folders,
      (1) its mean rank is better (lower) than the default's, and
      (2) its mean score is not lower than the default's.
    A candidate whose mean rank equals the default's replaces it only if (2) holds and its mean wall
    time per run is shorter. Where several candidates qualify, the best mean rank wins, and equal
    mean ranks go to the shorter mean wall time.

    A folder's score is the candidate's mean over the k folds of the fold's accuracy, in points (x100).
    A run that fails, or that is stopped at the per-run timeout (--timeout, default 300 s: the issue's
    five minutes on 2 cores), scores 0 on its fold: a setting that cannot finish a fold of a few
    thousand small images in that time is not a default. Ranks are taken per folder among the
    candidates only (1 is best, ties share the average rank). Means over folders are plain means:
    each CHOOSE folder counts once, whatever its size or kind. The rule is applied only when every
    candidate has a row (a score, or a failure) for all k folds of every CHOOSE folder; the
    LogReg and SVM columns are references, not candidates.
    Nothing from the MEASURE folders (image_sets.py's MEASURE group, bench_small_images.py) is ever
    looked at here, and scikit-learn's load_digits is a MEASURE folder: it is refused.

For each CHOOSE folder of image_sets.py (built first: `python benchmarks/image_sets.py DIR`), each class's
images are shuffled with a fixed seed and dealt into k folds (default 3; stratified by construction).
Fold i is written as `<work>/<folder>/k<k>/fold<i>/train/<class>/` (the other folds) and `.../test/<class>/`
(fold i, which plays the held-out part), as links to the folder's files. Each candidate, a name and a
string of extra flags, runs

    python -m anyformer train --data <work>/<folder>/k<k>/fold<i> --out ... --no-progress --no-plots <flags>

with this checkout first on PYTHONPATH; summary.json's test_accuracy is the fold's score, beside the run's
wall time, its training seconds and the time the run said it expected before its first step. Wall times
count (the timeout, ties): the script waits for a quiet machine before its first run (--no-wait not to),
and each row records the load average when it ended.
Logistic regression and an RBF SVM (scikit-learn's defaults, on standardised pixels scaled to [0, 1],
pooled to at most 32x32 as anyformer's --baseline does) are fitted on the same fold's training images,
decoded at the size and channels anyformer derives for the fold, and scored on its test images.

    python benchmarks/images_select.py --candidate base="" --candidate long="--epochs {round(200000 / n)}"
    python benchmarks/images_select.py --candidate base="" --candidate nosmooth="--label-smoothing 0" --resume
    python benchmarks/images_select.py --folders mnist-s --dry-run --no-write           # folds and references only
    python benchmarks/images_select.py --folders mnist-s --candidate tiny="--max-steps 20" --no-write

A `{EXPR}` in a candidate's flags is a rule of the fold, worked out before each run: EXPR is Python
arithmetic (with `x if c else y`) over `n` (the fold's training images), `classes`, `h`, `w` and `side`
(the image size anyformer derives for the fold, side = min(h, w)), `colour` (1 or 0), `batch`,
`per_epoch`, `epochs0`, `lr0`, `patch`, `width` and `depth` (the batch, steps per epoch, epochs, learning
rate, patch and model size anyformer derives for the fold), with min, max, round, int, ceil, sqrt and log2. The row records the flags as written (so
the same rule is the same run) and the flags it ran with (`ran`). An EXPR that gives a string puts flags in
by a condition: `{'--augment none' if colour else ''}`.

Every run's row is appended to benchmarks/results/<processor>/images_select.jsonl as soon as it ends
(one line per folder x candidate x fold), so an interrupted selection goes on with --resume (a run already
there is not run again: a row that ran the same flags on the same folder, k and fold, whichever candidate
wrote it, counts for every candidate whose rules give those flags there; the seed is fixed, so it is the same
run: a rule that changes only some folders costs only their runs; --retry-failed runs failed rows again); the
summary, over the rows in that file for this call's folders and candidates, is written to images_select.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import statistics
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
    cpu_words,
    load_average,
    processor_folder,
    table,
    wait_for_quiet,
)
from choosing import ranks as choosing_ranks, resolve_rules, verdict
from image_sets import CHOOSE, MEASURE, folder_of

REFERENCES = ("LogReg", "SVM")
NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
SEED = 0


# ---------------------------------------------------------------------------------------------
# Candidates and their rules


def parse_candidates(specs: list[str]) -> dict[str, str]:
    """NAME=FLAGS pairs, in the order given (the first is the current default)."""
    out: dict[str, str] = {}
    example = {"n": 1000, "classes": 10, "h": 32, "w": 32, "side": 32, "colour": 1, "batch": 128, "per_epoch": 8,
               "epochs0": 100, "lr0": 2e-3, "patch": 4, "width": 64, "depth": 4}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not NAME.match(name) or name in REFERENCES:
            sys.exit(f"--candidate {spec!r}: expected NAME=FLAGS, NAME of letters, digits, _.+- and not "
                     f"{' or '.join(REFERENCES)}")
        if name in out:
            sys.exit(f"--candidate {name} given twice")
        try:  # unbalanced quotes or a rule that does not work out: refused now, not after hours of runs
            shlex.split(resolve_rules(flags, example))
        except Exception as e:  # noqa: BLE001 - whatever the rule raised, said in one line
            sys.exit(f"--candidate {name}: {type(e).__name__}: {e}")
        out[name] = flags
    return out or {"base": ""}


def fold_facts(fold: Path) -> dict:
    """What a rule may read of a fold: its training images and classes, and what anyformer derives for it."""
    from anyformer.data.images.scan import scan_images
    from anyformer.train.derive import auto_settings
    from anyformer.train.recipes import RECIPES
    scan = scan_images(fold)
    _, values, _ = auto_settings(str(fold), {}, RECIPES["series"])
    h, w = values["image_size"]
    n = sum(scan.splits["train"].values())
    batch, model = values["batch_size"], values["model_overrides"]
    return {"n": n, "classes": len(scan.classes), "h": h, "w": w, "side": min(h, w), "colour": int(scan.colour),
            "batch": batch, "per_epoch": math.ceil(n / batch), "epochs0": values["epochs"], "lr0": values["lr"],
            "patch": model["patch_size"], "width": model["width"], "depth": model["depth"]}


# ---------------------------------------------------------------------------------------------
# Folds


def _images_by_class(folder: Path) -> dict[str, list[str]]:
    """class -> the folder's image files in it (relative paths), as anyformer lists them."""
    from anyformer.data.images.folders import list_folder, parse_layout
    layout = parse_layout(list_folder(folder).images, str(folder))
    out: dict[str, list[str]] = {}
    for _, cls, rel in layout.entries:
        out.setdefault(cls, []).append(rel)
    return {c: sorted(v) for c, v in sorted(out.items())}


def write_folds(name: str, sets: Path, work: Path, k: int) -> list[Path]:
    """The CHOOSE folder `name` dealt into k stratified, seeded folds; fold i as train/ and test/ class folders of
    links. A fold already written with the same files is kept (anyformer's decoded cache stays valid)."""
    source = folder_of(sets, name)
    if not source.is_dir():
        sys.exit(f"{source} is missing: build it first with `python benchmarks/image_sets.py {sets} --sets {name}`")
    by_class = _images_by_class(source)
    parts: list[list[tuple[str, str]]] = [[] for _ in range(k)]
    for cls, files in by_class.items():
        order = list(files)
        random.Random(f"{SEED}:{name}:{cls}").shuffle(order)
        start = int(hashlib.sha1(cls.encode()).hexdigest(), 16) % k  # small classes' remainders spread over folds
        for j, rel in enumerate(order):
            parts[(start + j) % k].append((cls, rel))
    folders = []
    for i in range(k):
        fold = work / name / f"k{k}" / f"fold{i}"
        listing = json.dumps([[s, c, r] for s in ("train", "test") for j, part in enumerate(parts)
                              if (j == i) == (s == "test") for c, r in part])
        stamp = fold.parent / f"{fold.name}.sha1"  # beside the fold: inside, anyformer would name it a stray file
        key = hashlib.sha1((str(source.resolve()) + listing).encode()).hexdigest()
        if not (stamp.is_file() and stamp.read_text() == key):
            shutil.rmtree(fold, ignore_errors=True)
            for j, part in enumerate(parts):
                split = "test" if j == i else "train"
                for cls, rel in part:
                    link = fold / split / cls / "__".join(Path(rel).parts[1:])
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to((source / rel).resolve())
            stamp.write_text(key)
        folders.append(fold)
    return folders


# ---------------------------------------------------------------------------------------------
# anyformer, as a user runs it, and the references


EXPECTED = re.compile(r"^expected time: about (.+?) for ", re.MULTILINE)


def _seconds_of(words: str) -> float | None:
    """'1 min 05 s', '42 s', '0.31 s', '1 h 02 min' -> seconds."""
    m = re.fullmatch(r"(?:(\d+) h )?(?:(\d+) min )?(?:([\d.]+) s)?", words.strip())
    if not m:
        return None
    h, mi, s = m.groups()
    return 3600 * int(h or 0) + 60 * int(mi or 0) + float(s or 0)


def run_anyformer(data: Path, out: Path, extra: list[str], timeout: float) -> dict:
    """`anyformer train` (this checkout's) on `data` in a process of its own; its score from summary.json, or the
    error it ended with. Its output goes to <out>.log beside the run's folder."""
    if out.exists():
        shutil.rmtree(out)  # a run left from an earlier call must not be resumed or read
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "anyformer", "train", "--data", str(data), "--out", str(out), "--no-progress",
           "--no-plots", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as e:
        said = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        (out.parent / f"{out.name}.log").write_text(f"$ {shlex.join(cmd)}\n{said}\n--- timed out ---\n")
        expected = EXPECTED.search(said)
        return {"error": f"timed out after {timeout:.0f} s", "seconds": round(time.perf_counter() - t0, 1),
                "expected_s": _seconds_of(expected.group(1)) if expected else None, "command": shlex.join(cmd)}
    wall = round(time.perf_counter() - t0, 1)
    (out.parent / f"{out.name}.log").write_text(f"$ {shlex.join(cmd)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    expected = EXPECTED.search(proc.stdout)
    base = {"seconds": wall, "expected_s": _seconds_of(expected.group(1)) if expected else None,
            "command": shlex.join(cmd)}
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return {"error": f"exit {proc.returncode}: {lines[-1] if lines else '(no output)'}", **base}
    try:
        summary = json.loads((out / "summary.json").read_text())
        accuracy = summary["test_accuracy"] if "test_accuracy" in summary else summary["val_accuracy"]
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"summary.json: {type(e).__name__}: {e}", **base}
    return {"accuracy": accuracy, **base, "train_seconds": summary.get("train_seconds"),
            "steps": summary.get("steps"), "epochs": summary.get("epochs"), "params": summary.get("params")}


def pixels(data: Path, split: str, size: tuple[int, int], channels: int):
    """(features, labels) of a split of an image folder, decoded as anyformer decodes it at `size` and
    `channels`, then as anyformer's --baseline sees them (pooled to at most 32x32, scaled to [0, 1])."""
    from anyformer.data import load_image_dataset
    from anyformer.train.baseline_pixels import pixel_features, pooled_size
    ds = load_image_dataset(str(data), split, image_size=size, channels=channels, warn=False)
    return pixel_features(ds.images, pooled_size(*size)), ds.labels.numpy()


def fit_reference(method: str, train, test, seed: int = SEED) -> dict:
    """Accuracy and seconds of logistic regression ("LogReg") or an RBF SVM ("SVM") on standardised pixels."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed) if method == "LogReg"
                          else SVC())
    t0 = time.perf_counter()
    try:
        model.fit(*train)
        accuracy = float((model.predict(test[0]) == test[1]).mean())
    except Exception as e:  # noqa: BLE001 - a failing reference is recorded, the others go on
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                "seconds": round(time.perf_counter() - t0, 2)}
    return {"accuracy": accuracy, "seconds": round(time.perf_counter() - t0, 2)}


# ---------------------------------------------------------------------------------------------
# The summary and the rule


def key(row: dict) -> tuple:
    return row["folder"], row["candidate"], row["flags"], row["folds"], row["fold"]


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def arguments(flags: str) -> tuple[str, ...]:
    """Flags as the run gets them: a rule that puts in no flags leaves spaces that are not a different run."""
    return tuple(shlex.split(flags))


def ran_by(row: dict) -> tuple[str, ...]:
    """The arguments a row's run was given (rows of a rule record its flags; older rows only the flags as
    written)."""
    return arguments(row.get("ran", row["flags"]))


def score_of(row: dict) -> float:
    """The fold's score in points; a failed or timed-out run scores 0 (the rule)."""
    return 0.0 if "error" in row else 100 * row["accuracy"]


def summarise(rows: list[dict], folders: list[str], candidates: dict[str, str], k: int,
              facts_now: dict[tuple[str, int], dict] | None = None) -> tuple[str, dict]:
    """(markdown, per-candidate means): mean fold scores per folder, mean score, mean rank, mean wall time; then
    the rule's verdict. The last row of a (folder, candidate, flags, k, fold) counts. `facts_now`: each
    (folder, fold)'s facts as anyformer derives them now, which the rules are resolved with, as the runs were
    (a row's own facts are those of the code it ran with: a rule over `side` reads 8 in a row written before
    8x8 pictures were derived at 16); without them, the row's."""
    latest = {key(r): r for r in rows}
    names = [*candidates, *REFERENCES]
    flags = {**candidates, **{r: None for r in REFERENCES}}
    # A fold's row of a candidate: any row that ran the flags the candidate's rules give for that fold (the same
    # run: the seed is fixed), whichever candidate wrote it; the last written counts.
    folds_of: dict[tuple[str, str], dict[int, dict]] = {}
    for (f, c, fl, folds, fold), r in latest.items():
        if f not in folders or folds != k:
            continue
        if c in REFERENCES:
            folds_of.setdefault((f, c), {})[fold] = r
            continue
        facts = (facts_now or {}).get((f, fold), r)
        for mine in candidates:
            if ran_by(r) == arguments(resolve_rules(flags[mine], facts)):
                folds_of.setdefault((f, mine), {})[fold] = r
    per = {fc: list(v.values()) for fc, v in folds_of.items()}

    def mean_score(f, c) -> float | None:
        got = per.get((f, c), [])
        return statistics.fmean(score_of(r) for r in got) if len(got) == k else None

    scores = {(f, c): mean_score(f, c) for f in folders for c in names}
    complete = [f for f in folders if all(scores[(f, c)] is not None for c in candidates)]
    ranks: dict[str, dict[str, float]] = {c: {} for c in candidates}
    for f in folders:
        scored = {c: scores[(f, c)] for c in candidates if scores[(f, c)] is not None}
        for c, rank in choosing_ranks(scored).items():
            ranks[c][f] = float(rank)
    means = {}
    for c in names:
        done = [f for f in folders if scores[(f, c)] is not None]
        walls = [r["seconds"] for f in done for r in per.get((f, c), [])]
        means[c] = {"score": statistics.fmean(scores[(f, c)] for f in done) if done else None, "folders": len(done),
                    "rank": statistics.fmean(ranks[c].values()) if ranks.get(c) else None,
                    "wall": statistics.fmean(walls) if walls else None,
                    "longest": max(walls) if walls else None,
                    "failed": sum("error" in r for f in folders for r in per.get((f, c), []))}

    def cell(f, c):
        if scores[(f, c)] is not None:
            return f"{scores[(f, c)]:.1f}" + (f" ({ranks[c][f]:g})" if c in ranks and f in ranks[c] else "")
        got = per.get((f, c), [])
        return f"{len(got)}/{k} folds" if got else "-"
    fmt = lambda v, d=1: "-" if v is None or math.isnan(v) else f"{v:.{d}f}"
    facts = {f: (facts_now or {}).get((f, 0))
             or next((r for r in rows if r["folder"] == f and r["folds"] == k and r["fold"] == 0 and r.get("n")), {})
             for f in folders}
    about = lambda f: (f"{facts[f]['n']:,} / {facts[f]['classes']} / {facts[f]['h']}x{facts[f]['w']}"
                       if facts[f] else "?")
    overall = []
    for c in names:
        m = means[c]
        shown = "(reference)" if flags[c] is None else f"`{flags[c]}`" if flags[c] else "(none)"
        overall.append([c, shown, f"{m['folders']}/{len(folders)}", fmt(m["score"], 2), fmt(m["rank"], 2),
                        fmt(m["wall"]), fmt(m["longest"]), str(m["failed"])])
    lines = [("Mean fold accuracy in points, in brackets the rank among the candidates scored on the folder "
              "(a failed or timed-out run scores 0). Fold facts: training images / classes / derived image size "
              "of fold 0."), "",
             table(["folder", "fold 0", *names], [[f, about(f), *[cell(f, c) for c in names]] for f in folders]),
             "", table(["candidate", "flags", "folders scored", "mean score", "mean rank", "mean wall s / run",
                        "longest run s", "failed runs"], overall),
             "", verdict(means, candidates, complete, folders, [s.name for s in CHOOSE], "folders")]
    return "\n".join(lines), means


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(tempfile.gettempdir()) / "imgsets",
                    help="where image_sets.py built the folders (its OUT)")
    ap.add_argument("--folders", help="comma-separated CHOOSE folders (default: all of them)")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--candidate", action="append", default=[], metavar="NAME=FLAGS",
                    help="a named set of extra `anyformer train` flags (repeatable; the first is the current default)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anyformer-images-select",
                    help="where the folds and anyformer's runs go")
    ap.add_argument("--resume", action="store_true", help="skip runs already in images_select.jsonl")
    ap.add_argument("--retry-failed", action="store_true", help="with --resume: run failed rows again")
    ap.add_argument("--dry-run", action="store_true", help="write the folds and fit the references only")
    ap.add_argument("--no-references", action="store_true", help="fit no LogReg or SVM")
    ap.add_argument("--timeout", type=float, default=300, help="seconds before an anyformer run is stopped (scores 0)")
    ap.add_argument("--keep-runs", action="store_true", help="keep each run's folder (checkpoints), not only its log")
    ap.add_argument("--no-wait", action="store_true", help="start without waiting for a quiet machine")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    choose = [s.name for s in CHOOSE]
    folders = args.folders.split(",") if args.folders else choose
    if unknown := [f for f in folders if f not in choose]:
        measure = [s.name for s in MEASURE]
        sys.exit(f"not CHOOSE folders: {unknown} (MEASURE folders {measure} are never used for choosing); "
                 f"CHOOSE: {choose}")
    if args.folds < 2:
        sys.exit("--folds: at least 2")
    candidates = parse_candidates(args.candidate)
    jsonl = RESULTS / processor_folder() / "images_select.jsonl"
    kept = [r for r in read_rows(jsonl) if not (args.retry_failed and "error" in r)] if args.resume else []
    done = {(r["folder"], ran_by(r), r["folds"], r["fold"]) for r in kept if r["candidate"] not in REFERENCES}
    references_done = {(r["folder"], r["candidate"], r["folds"], r["fold"]) for r in kept
                       if r["candidate"] in REFERENCES}
    new_rows: list[dict] = []

    def record(row: dict) -> None:
        new_rows.append(row)
        print(json.dumps(row), flush=True)
        if not args.no_write:
            jsonl.parent.mkdir(parents=True, exist_ok=True)
            with jsonl.open("a") as f:
                f.write(json.dumps(row) + "\n")

    now = lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    runs = [] if args.dry_run else list(candidates.items())
    if runs and not args.no_wait:
        wait_for_quiet()  # wall times decide the 300 s limit and ties: another job's load would count against a run
    facts_now: dict[tuple[str, int], dict] = {}
    for name in folders:
        for i, fold in enumerate(write_folds(name, args.sets, args.work, args.folds)):
            facts = facts_now[(name, i)] = fold_facts(fold)
            base = {"folder": name, "folds": args.folds, "fold": i, **facts}
            for candidate, flags in runs:
                ran = resolve_rules(flags, facts)
                run_key = (name, arguments(ran), args.folds, i)
                if run_key in done:
                    continue
                done.add(run_key)
                out = args.work / "runs" / name / f"k{args.folds}" / f"fold{i}" / candidate
                result = run_anyformer(fold, out, shlex.split(ran), args.timeout)
                if not args.keep_runs and out.exists():
                    shutil.rmtree(out)  # the log beside it stays; checkpoints of every fold would fill the disk
                record({**base, "candidate": candidate, "flags": flags, "ran": ran, **result, "load": load_average(),
                        "date": now()})
            todo = [m for m in REFERENCES if (name, m, args.folds, i) not in references_done]
            if todo and not args.no_references:
                size, channels = (facts["h"], facts["w"]), 3 if facts["colour"] else 1
                train, test = pixels(fold, "train", size, channels), pixels(fold, "test", size, channels)
                for method in todo:
                    record({**base, "candidate": method, "flags": None, **fit_reference(method, train, test),
                            "date": now()})
    shown = {} if args.dry_run else candidates
    rows = read_rows(jsonl) if not args.no_write else (read_rows(jsonl) if args.resume else []) + new_rows
    text, _ = summarise(rows, folders, shown, args.folds, facts_now)
    print("\n" + text)
    if args.no_write:
        return
    head = [f"# Choosing anyformer's image settings: {args.folds}-fold scores on the CHOOSE image folders", "",
            (f"{cpu_words()} (lscpu); written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
             f"{load_average()}. `python benchmarks/images_select.py {shlex.join(sys.argv[1:])}`; the rows are in "
             f"images_select.jsonl. Folders built by image_sets.py; the rule for choosing is at the top of "
             f"images_select.py."), ""]
    path = jsonl.with_suffix(".md")
    path.write_text("\n".join(head) + "\n" + text + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
