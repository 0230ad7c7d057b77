"""torchrun on the CPU (gloo): two processes train to the same weights as one process with the same
global batch, with and without gradient accumulation, under DDP and FSDP, and through a kill -9."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from anyformer.cli import parser as _parser
from anyformer.cli.train import settings
from anyformer.train import recipe_config
from tests.conftest import REPO, SHARED_DATA

from .conftest import make_trainer

# Biases off: the key bias of attention has a true gradient of exactly zero (softmax ignores a shift
# shared by all keys), so Adam turns its rounding noise into lr-sized steps that differ with any
# change of summation order. Every other weight follows a real gradient and must agree.
TINY = ["--set", "width=48", "--set", "depth=2", "--set", "heads=4", "--set", "mlp_hidden=96",
        "--set", "patch_size=7", "--set", "head_hidden=null", "--set", "final_norm=true", "--set", "bias=false"]
# Every setting that matters is given, so that a change to the default recipe does not change this test.
ARGS = ["train", *TINY, "--model", "vit-mnist", "--amp", "none", "--augment", "digits", "--label-smoothing", "0.1",
        "--grad-clip", "1.0", "--weight-decay", "0.05", "--schedule", "cosine", "--max-steps", "20", "--eval-every", "10",
        "--limit-train", "640", "--limit-eval", "200",
        "--batch-size", "32", "--lr", "3e-3", "--warmup-steps", "5", "--no-progress", "--threads", "1"]
# Measured: at most 3.3e-7 after 20 steps (DDP, DDP + accumulation, FSDP + accumulation).
TOL = 1e-5
RUN_FILES = {"config.json", "plan.json", "model.safetensors", "metrics.jsonl", "summary.json", "curves.png",
             "confusion.png", "attention.png", "checkpoints"}


def env() -> dict:
    e = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA)}
    e.pop("ANYFORMER_DEBUG", None)
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
            "-m", "anyformer", *args]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env(), timeout=600)


def max_diff(a: Path, b: Path) -> float:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_metrics(a: Path, b: Path) -> None:
    ma, mb = metrics(a), metrics(b)
    assert [m["step"] for m in ma] == [m["step"] for m in mb] == [10, 20]
    for x, y in zip(ma, mb):
        for k in ("train_loss", "eval_loss"):  # the evaluation is gathered from both ranks' halves
            assert x[k] == pytest.approx(y[k], rel=1e-5), k
        for k in ("train_accuracy", "eval_accuracy"):
            assert abs(x[k] - y[k]) <= 1 / 200, k  # at most one example on the edge may flip


def descendants(pid: int) -> list[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, mnist_slice):
    """The same settings in one process, run here (what `anyformer train` does) to save a start-up."""
    out = tmp_path_factory.mktemp("dist") / "one"
    args = _parser().parse_args([*ARGS, "--out", str(out)])
    cfg = recipe_config(None, **settings(args))
    make_trainer(cfg, mnist_slice).run()
    return out


@pytest.mark.slow
def test_two_processes_match_one(one_process, tmp_path):
    out = tmp_path / "ddp"
    r = run(torchrun(*ARGS, "--out", str(out)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert max_diff(one_process, out) <= TOL
    assert_same_metrics(one_process, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 20
    # Rank 0 alone writes the run directory and prints the evaluations.
    assert {p.name for p in out.iterdir()} == RUN_FILES
    assert r.stdout.count("step 20 | epoch") == 1, r.stdout


def _checkpoint_from(out: Path, step: int) -> bool:
    """Whether the run has a checkpoint at `step` or later. Not the exact file: the run keeps the
    last two, and a poll starved on a busy host may wake after step's has been dropped."""
    folder = out / "checkpoints"
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    return any(int(n[5:-3]) >= step for n in names if n.startswith("step-") and n.endswith(".pt"))


@pytest.mark.slow
def test_accumulation_killed_under_ddp_resumed_under_fsdp(one_process, tmp_path):
    """DDP with --grad-accum 2 is killed -9 (launcher and both ranks) after a checkpoint; FSDP with
    --grad-accum 2 resumes it on both ranks from that checkpoint; the end equals one process."""
    out = tmp_path / "acc"
    args = [*ARGS, "--grad-accum", "2", "--checkpoint-every", "2", "--out", str(out)]
    proc = subprocess.Popen(torchrun(*args), cwd=REPO, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        step = random.Random(7).randrange(4, 14, 2)  # a checkpoint every 2 steps
        deadline = time.monotonic() + 300
        while not _checkpoint_from(out, step) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert _checkpoint_from(out, step), f"the DDP run wrote no checkpoint at step {step} or later"
    finally:
        for pid in [proc.pid, *descendants(proc.pid)]:  # torchrun's workers live in their own sessions
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    time.sleep(0.2)
    assert not (out / "summary.json").exists(), "the run finished before it was killed"
    killed_at = sorted(p.name for p in (out / "checkpoints").iterdir() if p.suffix == ".pt")[-1]

    r = run(torchrun(*args, "--fsdp", "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resumed from {out / 'checkpoints' / killed_at}" in r.stdout
    assert max_diff(one_process, out) <= TOL
    assert_same_metrics(one_process, out)
    assert json.loads((out / "summary.json").read_text())["resumed"] is True
