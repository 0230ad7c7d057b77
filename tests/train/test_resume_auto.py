"""`train --resume auto`: one command that starts a run where --out holds none and continues it
where it holds one (what torchrun's restarts and a preempted job's relaunch run), refuses a
directory that holds something else, and never reads a checkpoint a kill left half-written."""
import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from anyformer.cli import main, parser
from anyformer.cli.train import settings
from anyformer.train.checkpoint import list_checkpoints
from anyformer.train.resume import check_fresh_out
from tests.conftest import SHARED_DATA

ARGS = ["train", "mnist", "--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64",
        "--set", "patch_size=7", "--set", "stem=patch", "--set", "dropout=0.1", "--limit-train", "512",
        "--limit-eval", "100", "--batch-size", "32", "--amp", "none", "--max-steps", "12", "--eval-every", "6",
        "--checkpoint-every", "3", "--no-progress", "--threads", "1", "--no-plots"]
AUTO = [*ARGS, "--resume", "auto"]


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    monkeypatch.delenv("ANYFORMER_DEBUG", raising=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run trained without interruption (the plain command, no --resume)."""
    out = tmp_path_factory.mktemp("auto") / "ref"
    import os
    saved = dict(os.environ)
    os.environ["ANYFORMER_DATA"] = str(SHARED_DATA)
    try:
        assert main([*ARGS, "--out", str(out)]) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


def hashes(d):
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def same_weights(a, b) -> bool:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def stopped_after(reference, tmp_path, step: int):
    """A copy of the reference run as a kill after `step`'s checkpoint leaves it: no later
    checkpoint, no summary (model.safetensors and metrics.jsonl are put right by the resume)."""
    run = tmp_path / "cut"
    shutil.copytree(reference, run)
    for ckpt in list_checkpoints(run):
        if int(ckpt.name[5:14]) > step:
            ckpt.unlink()
    (run / "summary.json").unlink()
    return run


@pytest.mark.slow
def test_a_fresh_directory_starts_a_run_and_the_same_command_continues_it(reference, tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    (run / "notes.txt").write_text("the user's own file: not a run, and kept")
    assert main([*AUTO, "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--resume auto: no run in {run} yet; starting one\n"), out
    assert json.loads((run / "summary.json").read_text())["resumed"] is False
    assert same_weights(reference, run), "--resume auto on an empty folder trains what the plain command trains"
    assert (run / "notes.txt").is_file()
    # The same command again: the finished run is resumed from its last checkpoint, not refused.
    assert main([*AUTO, "--out", str(run)]) == 0
    assert f"resumed from {run / 'checkpoints' / 'step-000000012.pt'} at step 12/12" in capsys.readouterr().out
    assert same_weights(reference, run)


@pytest.mark.slow
def test_an_existing_run_is_resumed_to_the_bit(reference, tmp_path, capsys):
    run = stopped_after(reference, tmp_path, 9)
    assert main([*AUTO, "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"resumed from {run / 'checkpoints' / 'step-000000009.pt'} at step 9/12" in out and "--resume auto" not in out
    assert same_weights(reference, run)
    assert (run / "metrics.jsonl").read_text().count("\n") == 2
    assert json.loads((run / "summary.json").read_text())["resumed"] is True


@pytest.mark.slow
def test_a_half_written_checkpoint_is_never_read(reference, tmp_path, capsys):
    """A kill during step 12's write leaves its first half under a temporary name (the name
    step-N.pt is given only once the file is whole): the run resumes from step 9, and the half
    file is gone."""
    run = stopped_after(reference, tmp_path, 9)
    whole = (reference / "checkpoints" / "step-000000012.pt").read_bytes()
    half = run / "checkpoints" / ".step-000000012.pt.k1l2m3n4"
    half.write_bytes(whole[:len(whole) // 2])
    assert main([*AUTO, "--out", str(run)]) == 0
    assert f"resumed from {run / 'checkpoints' / 'step-000000009.pt'} at step 9/12" in capsys.readouterr().out
    assert not half.exists()
    assert same_weights(reference, run)
    assert [p.name for p in list_checkpoints(run)] == ["step-000000009.pt", "step-000000012.pt"]


def _saved_model(d):
    from anyformer.models import ViT
    ViT.preset("vit-mnist", num_classes=10).save(str(d))


def _checkpoints_alone(d):
    (d / "checkpoints").mkdir(parents=True)
    (d / "checkpoints" / "step-000000003.pt").write_bytes(b"whatever it is")


def _another_programs_config(d):
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["BertModel"]}')


@pytest.mark.parametrize("make, why", [
    (_saved_model, "its config.json records no training settings"),
    (_checkpoints_alone, "no config.json records its settings"),
    (_another_programs_config, "does not describe an anyformer model")])
def test_a_directory_that_holds_something_else_is_refused(tmp_path, capsys, make, why):
    d = tmp_path / "d"
    make(d)
    before = hashes(d)
    assert main([*AUTO, "--out", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"anyformer: error: --resume auto: {d} holds ") and why in err[0], err
    assert err[0].endswith("choose another --out, or --overwrite to replace what it holds")
    assert hashes(d) == before


def test_auto_and_overwrite_contradict_each_other(tmp_path, capsys):
    assert main([*AUTO, "--overwrite", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["anyformer: error: --resume auto continues the run --out holds, and --overwrite replaces it: "
                   "give one of them"]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, recipe, resume", [
    (["train", "--resume"], None, True), (["train", "mnist", "--resume"], "mnist", True),
    (["train", "--resume", "mnist"], "mnist", True),  # as before --resume took a value
    (["train", "--resume", "auto"], None, "auto"), (["train", "--resume=auto", "mnist"], "mnist", "auto"),
    (["train", "--resume", "auto", "mnist"], "mnist", "auto"), (["train"], None, None)])
def test_resume_alone_keeps_its_meaning(argv, recipe, resume):
    args = parser().parse_args(argv)
    values = settings(args)
    assert (args.recipe, values["resume"]) == (recipe, resume)


def test_a_restarted_worker_without_auto_is_told_how_to_launch(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"torchrun has restarted its workers: launch with --resume auto"):
        check_fresh_out(tmp_path, resume=False, overwrite=False, restarted=True)
    with pytest.raises(ValueError, match=r"pass --resume to continue it"):
        check_fresh_out(tmp_path, resume=False, overwrite=False)
