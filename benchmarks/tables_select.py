"""Choosing anyformer's table defaults on the CHOOSE tables alone: k-fold scores of candidate flag sets.

RULE FOR CHOOSING (fixed before any run; the script applies it and prints the verdict):

    The current default is the first candidate given (normally `base`, no extra flags). Another
    candidate replaces it only if, over the CHOOSE tables,
      (1) its mean rank is better (lower) than the default's, and
      (2) its mean score is not lower than the default's.
    A candidate whose mean rank equals the default's replaces it only if (2) holds and its mean wall
    time per run is shorter. Where several candidates qualify, the best mean rank wins, and equal
    mean ranks go to the shorter mean wall time.

    A table's score is the candidate's mean over the k folds of the fold's accuracy (classification)
    or R^2 (regression), in points (x100). Ranks are taken per table among the candidates only (1 is
    best, ties share the average rank). Means over tables average the classification tables and the
    regression tables apart and then the two averages, so the two kinds count equally whatever their
    numbers. The rule is applied only when every candidate has all k folds of every CHOOSE table
    (a failed run has no score); LightGBM's column is a reference, not a candidate.
    Nothing from the MEASURE tables (bench_tables.py) or from any table's 20% test part is ever
    looked at: the test part is split off and dropped before the folds are made, and written nowhere.

For each CHOOSE table of tables_data.py (never modeldata or dslabs): the same seeded 80/20 split as
bench_tables.py makes (stratified for classes); the 20% is dropped unread. The 80% is cut into k
seeded folds (default 3, stratified for classes); fold i is written as `<work>/<table>/fold<i>/` with
`<table>_TRAIN.csv` (the other folds) and `<table>_TEST.csv` (fold i, which plays the held-out part
of a training split). Each candidate, a name and a string of extra flags, runs

    anyformer train --data <work>/<table>/fold<i> --out ... --no-progress --label-column T --task K <flags>

on every fold; summary.json's test_accuracy (or test_r2) is the fold's score, beside the run's wall
time. LightGBM with its defaults (as bench_tables.py runs it) is scored on the same folds.

    python benchmarks/tables_select.py --candidate base="" --candidate periodic="--set numeric=periodic"
    python benchmarks/tables_select.py --candidate base="" --candidate long="--epochs 200" --resume
    python benchmarks/tables_select.py --tables titanic,wine --dry-run --no-write    # folds and LightGBM only
    python benchmarks/tables_select.py --candidate base="" --candidate split="--epochs 50 || --epochs 200"
                                      # classes with the flags left of ||, numbers with those right of it
    python benchmarks/tables_select.py --candidate base="" --candidate grow="--epochs {round(600 / per_epoch)}"
                                      # a rule of the fold's size: {EXPR} is worked out per fold (below)

A `{EXPR}` in a candidate's flags is a rule of the fold's training part, worked out before each run:
EXPR is arithmetic over `n` (the fold's training rows), `batch` (the batch anyformer derives for n
rows, train/tables.py's table_batch) and `per_epoch` (ceil(n / batch)), with min, max, round, int,
sqrt and log2. The row records the flags as written (so the same rule is the same run) and the
flags it ran with (`ran`).

Every run's row is appended to benchmarks/results/<processor>/tables_select.jsonl as soon as it ends
(one line per table x candidate x fold), so an interrupted selection goes on with --resume (a row already there, of one of
the call's candidates, is not run again for any of them with the same flags for that table, k and
fold: the seed is fixed, so it is the same run); the summary, over the
rows in that file for this call's tables and candidates, is written to tables_select.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from bench_common import RESULTS, cpu_words, load_average, processor_folder, table  # noqa: E402
from bench_tables import run_anyformer, run_peer  # noqa: E402
from choosing import ranks as choosing_ranks, resolve_rules, verdict  # noqa: E402
from tables_data import CHOOSE, holdout_split, kfold, load_table, read_pair, write_pair  # noqa: E402

REFERENCE = "LightGBM"
NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


def flags_for(flags: str | None, task: str) -> str | None:
    """A candidate's flags for a table of `task`: FLAGS, or CLASSIFY_FLAGS || REGRESS_FLAGS for a default
    that differs between classes and numbers."""
    if flags is None or "||" not in flags:
        return flags
    classify, regress = (part.strip() for part in flags.split("||", 1))
    return classify if task == "classify" else regress


def parse_candidates(specs: list[str]) -> dict[str, str]:
    """NAME=FLAGS pairs, in the order given (the first is the current default); FLAGS may be
    CLASSIFY_FLAGS || REGRESS_FLAGS."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not NAME.match(name) or name == REFERENCE:
            sys.exit(f"--candidate {spec!r}: expected NAME=FLAGS, NAME of letters, digits, _.+- and not {REFERENCE}")
        if name in out:
            sys.exit(f"--candidate {name} given twice")
        for task in ("classify", "regress"):
            try:  # unbalanced quotes or a rule that does not work out: refused now, not after hours of runs
                shlex.split(resolve(flags_for(flags, task), 1000))
            except Exception as e:  # noqa: BLE001 - whatever the rule raised, said in one line
                sys.exit(f"--candidate {name}: {type(e).__name__}: {e}")
        out[name] = flags
    return out or {"base": ""}


def resolve(flags: str, n: int) -> str:
    """Flags with each {EXPR} replaced by its value for a fold of n training rows (see the docstring)."""
    from anyformer.train.tables import table_batch

    batch = table_batch(n)
    return resolve_rules(flags, {"n": n, "batch": batch, "per_epoch": math.ceil(n / batch)})


def write_folds(name: str, work: Path, k: int) -> tuple[str, str, list[Path]]:
    """(target, task, fold folders): the table's 80% training part cut into k folds, each written as a
    _TRAIN/_TEST pair. The 20% test part is dropped here, unread and unwritten."""
    frame, target, task = load_table(name)
    part, _ = holdout_split(frame, target, task)  # the same split as bench_tables.py; its test part is never used
    folders = []
    for i, (rest, fold) in enumerate(kfold(part, target, task, k)):
        folder = work / name / f"fold{i}"
        write_pair(folder, name, part.iloc[rest].reset_index(drop=True), part.iloc[fold].reset_index(drop=True))
        folders.append(folder)
    return target, task, folders


def key(row: dict) -> tuple:
    return row["table"], row["candidate"], row["flags"], row["folds"], row["fold"]


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score_of(row: dict) -> float | None:
    """The fold's score in points, or None for a failed run."""
    if "error" in row:
        return None
    return 100 * row["accuracy" if row["task"] == "classify" else "r2"]


# ---------------------------------------------------------------------------------------------
# The summary and the rule


def _kind_mean(values: dict[str, float], tasks: dict[str, str]) -> float | None:
    """The mean of the per-kind means: classification and regression tables count equally."""
    kinds = [[v for t, v in values.items() if tasks[t] == kind] for kind in ("classify", "regress")]
    kinds = [statistics.fmean(v) for v in kinds if v]
    return statistics.fmean(kinds) if kinds else None


def summarise(rows: list[dict], tables: list[str], candidates: dict[str, str], k: int,
              reuse: frozenset[str] = frozenset()) -> tuple[str, dict]:
    """(markdown, per-candidate means): mean fold scores per table, mean score, mean rank, mean wall
    time; then the rule's verdict. The last row of a (table, candidate, flags, k, fold) counts."""
    latest = {key(r): r for r in rows}
    names = [*candidates, REFERENCE]
    tasks = {r["table"]: r["task"] for r in rows}
    flags = {**candidates, REFERENCE: None}
    # A fold's row of a candidate: its own, or another of this call's candidates' (or of a --reuse
    # candidate's) with the same flags for the table's task (the same run: the seed is fixed); the last
    # written counts.
    folds_of: dict[tuple[str, str], dict[int, dict]] = {}
    for (t, c, f, folds, fold), r in latest.items():
        if t not in tables or folds != k or (c not in flags and c not in reuse):
            continue
        if c == REFERENCE:
            folds_of.setdefault((t, c), {})[fold] = r
            continue
        for mine in candidates:
            if f == flags_for(flags[mine], r["task"]):
                folds_of.setdefault((t, mine), {})[fold] = r
    per = {tc: list(v.values()) for tc, v in folds_of.items()}

    def mean_score(t, c) -> float | None:
        got = [score_of(r) for r in per.get((t, c), [])]
        return statistics.fmean(got) if len(got) == k and None not in got else None

    scores = {(t, c): mean_score(t, c) for t in tables for c in names}
    complete = [t for t in tables if all(scores[(t, c)] is not None for c in candidates)]
    # Ranks among the candidates scored on a table: all of them on a complete table (the rule's case);
    # on others the figures are for looking only.
    ranks: dict[str, dict[str, float]] = {c: {} for c in candidates}
    for t in tables:
        scored = {c: scores[(t, c)] for c in candidates if scores[(t, c)] is not None}
        for c, rank in choosing_ranks(scored).items():
            ranks[c][t] = float(rank)
    means = {}
    for c in names:
        done = {t: scores[(t, c)] for t in tables if scores[(t, c)] is not None}
        walls = [r["seconds"] for t in done for r in per.get((t, c), [])]
        kind = lambda task: [v for t, v in done.items() if tasks[t] == task] or [float("nan")]  # noqa: E731
        means[c] = {"score": _kind_mean(done, tasks), "tables": len(done),
                    "classify": statistics.fmean(kind("classify")), "regress": statistics.fmean(kind("regress")),
                    "rank": _kind_mean(ranks[c], tasks) if c in ranks else None,
                    "wall": statistics.fmean(walls) if walls else None,
                    "failed": sum("error" in r for t in tables for r in per.get((t, c), []))}

    def cell(t, c):
        if scores[(t, c)] is not None:
            return f"{scores[(t, c)]:.1f}" + (f" ({ranks[c][t]:g})" if c in ranks and t in ranks[c] else "")
        got = per.get((t, c), [])
        return f"{sum(score_of(r) is not None for r in got)}/{k} folds" if got else "-"
    fmt = lambda v, d=1: "-" if v is None or v != v else f"{v:.{d}f}"  # noqa: E731 - None and NaN alike
    overall = []
    for c in names:
        m = means[c]
        shown = "(reference)" if flags[c] is None else f"`{flags[c]}`" if flags[c] else "(none)"
        overall.append([c, shown, f"{m['tables']}/{len(tables)}", fmt(m["score"], 2), fmt(m["classify"], 2),
                        fmt(m["regress"], 2), fmt(m["rank"], 2), fmt(m["wall"]), str(m["failed"])])
    lines = ["Mean fold score in points (accuracy or R^2 x 100), in brackets the rank among the candidates scored "
             "on the table. Means are over the tables each candidate was scored on (all k folds, none failed).", "",
             table(["table", "task", *names], [[t, tasks.get(t, "?"), *[cell(t, c) for c in names]] for t in tables]),
             "", table(["candidate", "flags", "tables scored", "mean score", "classification", "regression",
                        "mean rank", "mean wall s / run", "failed runs"], overall),
             "", verdict(means, candidates, complete, tables, [t.name for t in CHOOSE], "tables")]
    return "\n".join(lines), means


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", help="comma-separated CHOOSE tables (default: all of them)")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--candidate", action="append", default=[], metavar="NAME=FLAGS",
                    help="a named set of extra `anyformer train` flags (repeatable; the first is the current default)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anyformer-tables-select",
                    help="where the folds and anyformer's runs go")
    ap.add_argument("--resume", action="store_true", help="skip runs already in tables_select.jsonl")
    ap.add_argument("--reuse", metavar="NAMES",
                    help="with --resume, the rows of these earlier candidates (comma-separated; made by the same "
                         "code) count for any candidate of this call with the same flags")
    ap.add_argument("--dry-run", action="store_true", help="write the folds and run LightGBM only")
    ap.add_argument("--threads", type=int, default=2, help="LightGBM's threads")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before an anyformer run is stopped")
    ap.add_argument("--keep-runs", action="store_true", help="keep each run's folder (checkpoints), not only its log")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    choose = [t.name for t in CHOOSE]
    tables = args.tables.split(",") if args.tables else choose
    if unknown := [t for t in tables if t not in choose]:
        sys.exit(f"not CHOOSE tables: {unknown} (MEASURE tables are never used for choosing); CHOOSE: {choose}")
    if args.folds < 2:
        sys.exit("--folds: at least 2")
    candidates = parse_candidates(args.candidate)
    jsonl = RESULTS / processor_folder() / "tables_select.jsonl"
    # Runs already written by one of this call's candidates are the same runs for any candidate of the
    # call with the same flags for that table (the seed is fixed): they are not run again.
    reuse = frozenset(filter(None, (args.reuse or "").split(",")))
    done = {(r["table"], r["flags"], r["folds"], r["fold"]) for r in read_rows(jsonl)
            if r["candidate"] in candidates or r["candidate"] in reuse} if args.resume else set()
    reference_done = {(r["table"], None, r["folds"], r["fold"]) for r in read_rows(jsonl)
                      if r["candidate"] == REFERENCE} if args.resume else set()
    new_rows: list[dict] = []

    def record(row: dict) -> None:
        new_rows.append(row)
        print(json.dumps(row), flush=True)
        if not args.no_write:
            jsonl.parent.mkdir(parents=True, exist_ok=True)
            with jsonl.open("a") as f:
                f.write(json.dumps(row) + "\n")

    runs = [] if args.dry_run else list(candidates.items())
    for name in tables:
        target, task, folders = write_folds(name, args.work, args.folds)
        for i, folder in enumerate(folders):
            base = {"table": name, "task": task, "folds": args.folds, "fold": i}
            for candidate, both in runs:
                flags = flags_for(both, task)
                if (name, flags, args.folds, i) in done:
                    continue
                done.add((name, flags, args.folds, i))
                out = args.work / "runs" / name / f"fold{i}" / candidate
                ran = resolve(flags, len(read_pair(folder, name)[0]))
                result = run_anyformer(folder, out, target, task, shlex.split(ran), args.timeout)
                if not args.keep_runs and out.exists():
                    shutil.rmtree(out)  # the log beside it stays; checkpoints of every fold would fill the disk
                record({**base, "candidate": candidate, "flags": flags, "ran": ran, **result,
                        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
            if (name, None, args.folds, i) not in reference_done:
                train, test = read_pair(folder, name)
                record({**base, "candidate": REFERENCE, "flags": None,
                        **run_peer(REFERENCE, train, test, target, task, args.threads),
                        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    shown = {} if args.dry_run else candidates
    # The file holds every row once written; without writing, the new rows and (with --resume) the file's.
    rows = read_rows(jsonl) if not args.no_write else (read_rows(jsonl) if args.resume else []) + new_rows
    text, _ = summarise(rows, tables, shown, args.folds, reuse)
    print("\n" + text)
    if args.no_write:
        return
    head = [f"# Choosing anyformer's table defaults: {args.folds}-fold scores on the CHOOSE tables", "",
            f"{cpu_words()} (lscpu); written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load "
            f"{load_average()}. `python benchmarks/tables_select.py {shlex.join(sys.argv[1:])}`; the rows are in "
            f"tables_select.jsonl. Folds of each table's 80% training part (its 20% test part is never used); "
            f"the rule for choosing is at the top of tables_select.py.", ""]
    path = jsonl.with_suffix(".md")
    path.write_text("\n".join(head) + text + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
