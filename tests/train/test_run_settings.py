"""A run keeps its own settings: --resume continues with what the run recorded, a contradicting flag
is refused in one line, an existing run is never replaced unless --overwrite says so, and the first
line says what is trained."""
import hashlib
import json

import pytest

from anyformer.cli import main
from anyformer.train.checkpoint import list_checkpoints
from tests.conftest import SHARED_DATA

TINY = ["--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64",
        "--set", "patch_size=7", "--set", "stem=patch", "--limit-train", "512", "--limit-eval", "100",
        "--batch-size", "64", "--no-progress", "--threads", "1", "--no-plots"]


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    monkeypatch.delenv("ANYFORMER_DEBUG", raising=False)


def hashes(run):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_resume_without_flags_continues_the_run_as_recorded(tmp_path, capsys):
    """The mnist recipe has a 9-minute time budget; `--max-steps 12` drops it. A resume given no flags
    keeps the 12 steps, where the recipe's own settings would have fitted thousands to the budget."""
    run = tmp_path / "r"
    assert main(["train", "mnist", "--max-steps", "12", "--eval-every", "6", "--out", str(run), *TINY]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("train vit-mnist-fast (") and " parameters) on mnist: 512 training examples | " in first
    assert first.endswith(f"| fp32 | 12 steps (1.50 epochs) -> {run}") or "bf16" in first, first
    list_checkpoints(run)[-1].unlink()  # as if stopped after step 6
    (run / "summary.json").unlink()
    assert main(["train", "mnist", "--out", str(run), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "at step 6/12" in out and "time budget" not in out, out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["resumed"] is True and summary["time_budget"] is None


@pytest.mark.slow
def test_a_flag_that_contradicts_the_run_is_refused_and_nothing_changes(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", "mnist", "--max-steps", "4", "--eval-every", "4", "--out", str(run), *TINY]) == 0
    before = hashes(run)
    capsys.readouterr()
    assert main(["train", "mnist", "--out", str(run), "--resume", "--max-steps", "30", "--lr", "0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"anyformer: error: --resume continues {run} with the settings it recorded")
    # --max-steps past a finished run's end continues it (test_your_data.py); the --lr is what contradicts.
    assert "--lr 0.1 (the run has 0.002)" in err[0] and "--max-steps" not in err[0]
    assert hashes(run) == before  # refused before anything was read or written
    assert main(["train", "mnist-seed", "--out", str(run), "--resume"]) == 2
    assert 'the recipe "mnist-seed" (the run has "mnist")' in capsys.readouterr().err
    # where, how and how visibly it runs may change
    assert main(["train", "mnist", "--out", str(run), "--resume", "--threads", "2", "--no-progress"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 4


@pytest.mark.slow
def test_a_run_is_never_replaced_without_overwrite(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", "mnist", "--max-steps", "3", "--eval-every", "3", "--out", str(run), *TINY]) == 0
    before = hashes(run)
    capsys.readouterr()
    assert main(["train", "mnist-seed", "--max-steps", "2", "--out", str(run), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"anyformer: error: {run} holds a run already (config.json, model.safetensors, checkpoints); "
                   f"pass --resume to continue it, --overwrite to replace it, or choose another --out"]
    assert hashes(run) == before
    assert main(["train", "mnist-seed", "--max-steps", "2", "--eval-every", "2", "--out", str(run), "--overwrite",
                 *TINY]) == 0
    assert json.loads((run / "summary.json").read_text())["recipe"] == "mnist-seed"


def test_the_command_line_s_settings_are_decided_in_one_pass_reading_the_run_once(tmp_path, monkeypatch):
    """resume.settings_to_run: fresh, auto (no run / a run), resume with free flags, a contradiction, and a
    finished run continued past its end; the run's config.json read once per decision."""
    from anyformer.train import resume
    reads = []
    real = resume.recorded_settings
    monkeypatch.setattr(resume, "recorded_settings", lambda d: reads.append(d) or real(d))
    said: list[str] = []
    run = tmp_path / "run"
    assert resume.settings_to_run(run, {}, "auto", say=said.append) == (False, None)
    assert said == [f"--resume auto: no run in {run} yet; starting one"]
    with pytest.raises(ValueError, match="--resume auto continues the run --out holds, and --overwrite replaces it"):
        resume.settings_to_run(run, {}, "auto", overwrite=True)
    run.mkdir()
    recorded = {"recipe": "mnist", "max_steps": 4, "lr": 0.002, "threads": 1, "warmup_steps": 1}
    (run / "config.json").write_text(json.dumps({"family": "own", "train": recorded}))
    reads.clear()
    assert resume.settings_to_run(run, {"threads": 2, "max_steps": 4}, "auto") == (
        True, {**recorded, "threads": 2, "resume": True})
    assert len(reads) == 1
    assert resume.settings_to_run(run, {"lr": 0.1}, False) == (False, None)  # fresh: the trainer refuses the folder
    with pytest.raises(ValueError, match=r"--lr 0.1 \(the run has 0.002\)"):
        resume.settings_to_run(run, {"lr": 0.1}, True)
    with pytest.raises(ValueError, match="--max-steps 8 .*the run has 4"):  # unfinished: a contradiction
        resume.settings_to_run(run, {"max_steps": 8}, True)
    (run / "summary.json").write_text(json.dumps({"steps": 4}))
    reads.clear()
    said.clear()
    resumed, settings = resume.settings_to_run(run, {"max_steps": 8}, True, say=said.append)
    assert resumed and settings["max_steps"] == 8 and settings["extended"][0]["from_step"] == 4 and len(reads) == 1
    assert said == [f"continuing {run}: {settings['extended'][0]['schedule']}"]
