"""A table run keeps the weights of its best evaluation on rows held back from its training rows
(--select-fraction), not its last ones: the summary reports that evaluation, model.safetensors holds
its weights, and a run stopped and resumed keeps the same ones."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from anyformer.cli import main
from anyformer.train.checkpoint import load_checkpoint
from tests.train.test_kill_resume import checkpoint_steps, interrupt
from tests.train.test_tables_train import FAST, numbers_csv

pytestmark = pytest.mark.slow


def lines(run: Path) -> list[dict]:
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


def strip(run: Path) -> list[dict]:
    """The metrics lines without what the machine's speed decides."""
    return [{k: v for k, v in l.items() if k != "time" and not k.endswith("_per_s")} for l in lines(run)]


def test_the_summary_and_the_weights_are_the_best_evaluation_on_the_held_back_rows(tmp_path, capsys):
    data = numbers_csv(tmp_path / "houses.csv")
    assert main(["train", "--data", str(data), "--label-column", "price", "--out", str(tmp_path / "run"),
                 "--max-steps", "200", "--select-fraction", "0.15", *FAST]) == 0
    out = capsys.readouterr().out
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["train"]["select_fraction"] == 0.15 and meta["data"]["select_examples"] == 24  # 15% of 160
    history = lines(tmp_path / "run")
    assert len(history) == 20 and all("select_loss" in l for l in history)
    best = max(range(len(history)), key=lambda i: (-history[i]["select_loss"], i))  # the later of equals
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["kept_step"] == history[best]["step"] and summary["steps"] == 200
    assert summary["val_r2"] == history[best]["eval_r2"]
    assert f"kept the weights of step {history[best]['step']} of 200" in out or best == len(history) - 1
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run")]) == 0  # the saved weights are the kept ones
    assert json.loads(capsys.readouterr().out)["eval_r2"] == pytest.approx(summary["val_r2"], abs=1e-6)


def test_by_default_the_last_weights_are_kept(tmp_path, capsys):
    data = numbers_csv(tmp_path / "houses.csv")
    assert main(["train", "--data", str(data), "--label-column", "price", "--out", str(tmp_path / "run"),
                 "--max-steps", "60", *FAST]) == 0  # the default: none held back (tables_select.py, round 4)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    history = lines(tmp_path / "run")
    assert "kept_step" not in summary and "select_loss" not in history[-1]
    assert summary["val_r2"] == history[-1]["eval_r2"]
    assert "10 evaluations (none of them chooses anything)" in capsys.readouterr().out


def test_stopped_and_resumed_it_keeps_the_same_weights(tmp_path):
    data = numbers_csv(tmp_path / "houses.csv")
    args = ["train", "--data", str(data), "--label-column", "price", "--max-steps", "120", "--eval-every", "10",
            "--select-fraction", "0.15", "--checkpoint-every", "1", "--threads", "1", *FAST]
    ref = tmp_path / "ref"
    r = subprocess.run([sys.executable, "-m", "anyformer", *args, "--out", str(ref)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    said = r.stdout
    out = tmp_path / "out"
    r = interrupt(out, 70, signal.SIGTERM, resume=False, args=args)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    stopped = checkpoint_steps(out)[-1]
    assert 70 <= stopped < 120
    state = load_checkpoint(out / "checkpoints" / f"step-{stopped:09d}.pt")
    assert state["best"]["step"] <= stopped and state["best"]["weights"].keys() == state["model"].keys()
    r = subprocess.run([sys.executable, "-m", "anyformer", *args, "--out", str(out), "--resume"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    a, b = load_file(ref / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    keep = lambda run: json.loads((run / "summary.json").read_text())["kept_step"]
    assert keep(ref) == keep(out) and strip(ref) == strip(out)
    assert keep(ref) == 120 or f"kept the weights of step {keep(ref)} of 120: the best on the" in said
