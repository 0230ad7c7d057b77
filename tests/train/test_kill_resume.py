"""`anyformer train` killed with SIGKILL at random steps and stopped by SIGTERM, each time resumed,
ends bit for bit where an uninterrupted run ends; SIGTERM checkpoints and exits with one line and
code 128 + 15."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.cli_runner import run
from tests.conftest import REPO, SHARED_DATA, skip_unless_runnable

# Dropout and augmentation on, so that the data order and every random stream must be restored too;
# the model and precision are named, so that a change to the default recipe does not change this test.
ARGS = ["train", "--set", "width=48", "--set", "depth=2", "--set", "heads=4", "--set", "mlp_hidden=96",
        "--set", "patch_size=7", "--set", "head_hidden=null", "--set", "dropout=0.1", "--augment", "digits",
        "--model", "vit-mnist", "--amp", "none", "--label-smoothing", "0.1", "--grad-clip", "1.0",
        "--max-steps", "40", "--eval-every", "8", "--checkpoint-every", "1", "--limit-train", "640",
        "--limit-eval", "200", "--batch-size", "32", "--lr", "3e-3", "--warmup-steps", "5", "--no-progress",
        "--threads", "1", "--no-plots"]
TIMING = ("time", "images_per_s")


def env(**extra: str) -> dict:
    e = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA), "PYTHONUNBUFFERED": "1", **extra}  # lines survive a kill
    e.pop("ANYFORMER_DEBUG", None)
    return e


def checkpoint_steps(out: Path) -> list[int]:
    folder = out / "checkpoints"
    names = os.listdir(folder) if folder.is_dir() else []
    return sorted(int(n[5:14]) for n in names if n.startswith("step-") and n.endswith(".pt"))


def interrupt(out: Path, at_step: int, sig: int, resume: bool, args: list[str] = ARGS,
              **extra: str) -> subprocess.CompletedProcess:
    """Start a run, send `sig` once a checkpoint at or after `at_step` exists, and wait for it."""
    cmd = [sys.executable, "-m", "anyformer", *args, "--out", str(out), *(["--resume"] if resume else [])]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        steps = checkpoint_steps(out)
        if steps and steps[-1] >= at_step:
            break
        time.sleep(0.002)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def finished(out: Path, resume: bool, args: list[str] = ARGS, **extra: str) -> subprocess.CompletedProcess:
    """A run to its end: in this process (tests/cli_runner.py), since only the interrupted runs need
    a process of their own to kill."""
    return run(*args, "--out", str(out), *(["--resume"] if resume else []), env_extra=extra)


def strip(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_killed_at_random_steps_then_resumed_equals_an_uninterrupted_run(tmp_path):
    ref = tmp_path / "ref"
    r = finished(ref, resume=False)
    assert r.returncode == 0, r.stderr

    out = tmp_path / "cut"
    # Two kills here (a third, under torchrun, is in test_distributed.py), landing at or just after these.
    targets = sorted(random.Random(2024).sample(range(3, 36), 2))
    resumed_at = []
    for i, target in enumerate(targets):
        r = interrupt(out, target, signal.SIGKILL, resume=i > 0)
        assert r.returncode == -signal.SIGKILL, (target, r.stderr)
        assert not (out / "summary.json").exists(), f"the run ended before the kill at step {target}"
        if i > 0:
            resumed_at.append(int(r.stdout.split(" at step ")[1].split("/")[0]))
        if i == 0:  # as if the kill had cut a metrics line in half: resume must drop it with the rest
            with open(out / "metrics.jsonl", "a") as f:
                f.write('{"step": 99, "train_lo')

    # SIGTERM: the step in flight ends, a checkpoint is written, one line, exit code 128 + 15.
    r = interrupt(out, checkpoint_steps(out)[-1] + 2, signal.SIGTERM, resume=True)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anyformer: stopped by signal SIGTERM after step "), r.stderr
    stopped = int(lines[0].split("after step ")[1].split(";")[0])
    assert checkpoint_steps(out)[-1] == stopped and f"step-{stopped:09d}.pt" in lines[0]
    resumed_at.append(int(r.stdout.split(" at step ")[1].split("/")[0]))

    r = finished(out, resume=True)
    assert r.returncode == 0, r.stderr
    resumed_at.append(int(r.stdout.split(" at step ")[1].split("/")[0]))
    assert resumed_at == sorted(resumed_at) and 0 < resumed_at[0] and resumed_at[-1] < 40, resumed_at

    a, b = load_file(ref / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"resumed at {resumed_at}"
    assert strip(ref) == strip(out), f"resumed at {resumed_at}"
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (ref, out))
    assert (sa["test_accuracy"], sa["test_loss"]) == (sb["test_accuracy"], sb["test_loss"])
    assert sb["resumed"] is True
    assert checkpoint_steps(out) == [39, 40]  # the last two kept
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")], "temp files left"


@pytest.mark.slow
def test_killed_under_a_non_stock_plan_then_resumed_equals_an_uninterrupted_run(tmp_path):
    """The kernels users get where the plan measured them faster (oneDNN linears, the native attention
    and GELU), forced for both runs: SIGKILL at a step, then --resume, ends where the uninterrupted run
    ends, bit for bit. Heads of 16, the native attention's size."""
    kernels = ("linear=onednn", "attention=native", "gelu=native")
    skip_unless_runnable(*kernels)
    forced = dict(ANYFORMER_PLAN=",".join(("stock", *kernels)), ANYFORMER_CACHE=str(tmp_path / "cache"))
    args = [a if a != "heads=4" else "heads=3" for a in ARGS]
    ref, out = tmp_path / "ref", tmp_path / "cut"
    r = finished(ref, False, args, **forced)
    assert r.returncode == 0, r.stderr
    r = interrupt(out, 17, signal.SIGKILL, False, args, **forced)
    assert r.returncode == -signal.SIGKILL and not (out / "summary.json").exists(), r.stderr
    r = finished(out, True, args, **forced)
    assert r.returncode == 0, r.stderr
    answers = json.loads((out / "plan.json").read_text())["answers"]
    ran = {(key.split()[0], choice) for key, choice in answers.items()}
    assert {("linear", "onednn"), ("attention", "native"), ("gelu", "native")} <= ran, answers  # they did run
    a, b = load_file(ref / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert strip(ref) == strip(out)
