"""Time to accuracy on MNIST: run `anyformer train RECIPE` start to finish under /usr/bin/time -v
and record wall time, test accuracy and images/s in benchmarks/results/<processor>/mnist.md.

    python benchmarks/bench_mnist.py                  # the default `mnist` recipe
    python benchmarks/bench_mnist.py mnist-seed       # Turner (2023)'s recipe (about an hour on 2 cores)
    python benchmarks/bench_mnist.py mnist -- --threads 1   # extra arguments go to `anyformer train`

Wall time is measured from process start to exit, so it includes importing torch, loading the data,
every evaluation, the plots and writing the run directory.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
from bench_common import processor_folder  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / processor_folder() / "mnist.md"  # one folder per CPU model


def machine() -> str:
    cpu = platform.processor() or "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str]) -> int:
    recipe = argv[0] if argv and not argv[0].startswith("-") else "mnist"
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    out = Path(tempfile.mkdtemp(prefix=f"bench-{recipe}-"))
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "anyformer", "train", recipe, "--out", str(out / "run"),
           "--no-progress", *extra]
    load_before = load_average()
    print("running:", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return proc.returncode
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", proc.stderr).group(1)
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    parts = [float(p) for p in wall.split(":")]
    wall_s = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    summary = json.loads((out / "run" / "summary.json").read_text())
    row = (f"| {datetime.date.today()} | `{recipe}` {' '.join(extra)} | {summary['test_accuracy']:.4f} | "
           f"{wall_s:.0f} s | {summary['train_seconds']:.0f} s | {summary['epochs']} | {summary['images_per_s']:.0f} | "
           f"{summary['amp']} | {peak_kb / 1024:.0f} MiB | {load_before} / {load_average()} |")
    print(f"\ntest accuracy {summary['test_accuracy']:.4f}, wall {wall_s:.0f} s start to finish, "
          f"{summary['images_per_s']:.0f} images/s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# MNIST time to accuracy\n\n"
            "`python benchmarks/bench_mnist.py RECIPE`: wall time is process start to exit under `/usr/bin/time -v`.\n"
            "Load average is the 1/5/15-minute figure before / after the run (2 cores: above 2 means the run\n"
            "shared the CPU with other work).\n\n"
            f"Machine: {machine()}; torch {torch.__version__}; Python {platform.python_version()}\n\n"
            "| date | recipe | test accuracy | wall | training | epochs | images/s | amp | peak RSS | load before / after |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    with open(RESULTS, "a") as f:
        f.write(row + "\n")
    print(f"machine: {machine()}; torch {torch.__version__}; recorded in {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
