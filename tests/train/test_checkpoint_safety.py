"""Resuming never runs code from a file and never damages a run: a truncated or corrupt checkpoint,
one of another model, and pickles with code in them are refused with a clear error and leave every
file as it was. A full disk, or an output folder that cannot be made, stops a run with one clear line
and leaves no half-written file."""
import errno
import hashlib
import io
import json
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anyformer.cli import main
from anyformer.data import load_image_dataset
from anyformer.train import CheckpointError, TrainingError
from anyformer.train.checkpoint import list_checkpoints, load_checkpoint
from tests.conftest import REPO, SHARED_DATA

from .conftest import make_trainer, tiny_config

SETTINGS = dict(max_steps=6, eval_every=3, checkpoint_every=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mnist_slice):
    """A finished tiny run with checkpoints at steps 4 and 6, and one of a wider model."""
    base = tmp_path_factory.mktemp("safety")
    make_trainer(tiny_config(base / "a", **SETTINGS), mnist_slice).run()
    wide = dict(tiny_config(base).model_overrides, width=64)
    make_trainer(tiny_config(base / "b", model_overrides=wide, **SETTINGS), mnist_slice).run()
    return base / "a" / "run", base / "b" / "run"


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


class RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def truncate(p: Path, marker: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def flip_bytes(p: Path, marker: Path) -> None:  # in the middle: tensor data, which the zip does not check
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 8] = bytes(b ^ 0xFF for b in data[mid:mid + 8])
    p.write_bytes(bytes(data))


def torch_pickle_with_code(p: Path, marker: Path) -> None:
    torch.save({"step": 6, "model": RunsCode(marker)}, p)


def plain_pickle_with_code(p: Path, marker: Path) -> None:
    p.write_bytes(pickle.dumps({"step": 6, "model": RunsCode(marker)}, protocol=2))


def new_pickle_with_code(p: Path, marker: Path) -> None:  # refused at an opcode before it names the call
    p.write_bytes(pickle.dumps({"step": 6, "model": RunsCode(marker)}, protocol=pickle.HIGHEST_PROTOCOL))


DAMAGE = {
    "truncated": (truncate, "is truncated or corrupt"),
    "flipped bytes": (flip_bytes, "is corrupt: its contents do not match the SHA-256"),
    "torch.save with code": (torch_pickle_with_code, r"refusing to load .* it asks to run posix.system"),
    "pickle with code": (plain_pickle_with_code, r"refusing to load .* it asks to run posix.system"),
    "pickle 5 with code": (new_pickle_with_code, r"refusing to load .* not a checkpoint of tensors and plain data"),
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_or_malicious_checkpoint_is_refused_and_nothing_changes(kind, trained, tmp_path, mnist_slice):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    damage, message = DAMAGE[kind]
    marker = tmp_path / "code-ran"
    damage(list_checkpoints(run)[-1], marker)
    before = hashes(run)
    with pytest.raises(CheckpointError, match=message):
        make_trainer(tiny_config(tmp_path, resume=True, **SETTINGS), mnist_slice).run()
    assert hashes(run) == before
    assert not marker.exists(), "loading the checkpoint ran its code"


@pytest.mark.slow
def test_checkpoint_of_another_model_is_refused_and_nothing_changes(trained, tmp_path, mnist_slice):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    shutil.copy(list_checkpoints(trained[1])[-1], run / "checkpoints" / "step-000000007.pt")
    before = hashes(run)
    with pytest.raises(CheckpointError, match=r"step-000000007.pt belongs to another model .*'width': 64"):
        make_trainer(tiny_config(tmp_path, resume=True, **SETTINGS), mnist_slice).run()
    assert hashes(run) == before


@pytest.mark.slow
def test_the_command_line_refuses_a_malicious_checkpoint_in_one_line(trained, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    marker = tmp_path / "code-ran"
    torch_pickle_with_code(list_checkpoints(run)[-1], marker)
    before = hashes(run)
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    overrides = [a for k, v in tiny_config(tmp_path).model_overrides.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    code = main(["train", "--model", "vit-mnist", *overrides, "--max-steps", "6", "--limit-train", "2000",
                 "--limit-eval", "500",
                 "--batch-size", "32", "--no-progress", "--threads", "1", "--out", str(run), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("anyformer: error: refusing to load"), err
    assert hashes(run) == before and not marker.exists()


@pytest.mark.slow
def test_a_checkpoint_is_checked_even_when_it_unpickles(trained, tmp_path):
    """The SHA-256 covers what the zip does not: change one weight and keep the file well-formed."""
    path = tmp_path / "step-000000001.pt"
    state = torch.load(list_checkpoints(trained[0])[-1], weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name] + 1
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="do not match the SHA-256"):
        load_checkpoint(path)


def test_a_full_disk_stops_the_run_cleanly(tmp_path, mnist_slice, monkeypatch):
    """ENOSPC in the middle of the step-4 checkpoint: one clear error, no temporary file, the good
    checkpoints (steps 2 and 3) intact and loadable."""
    trainer = make_trainer(tiny_config(tmp_path, **SETTINGS), mnist_slice)
    real_save = torch.save

    def save_until_full(obj, f, *args, **kwargs):
        if trainer.step < 4:
            return real_save(obj, f, *args, **kwargs)
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        f.write(buf.getvalue()[:1000])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(torch, "save", save_until_full)
    with pytest.raises(TrainingError, match=r"cannot write the checkpoint .*step-000000004.pt: "
                                            r"No space left on device; [\d,]+ MiB free there"):
        trainer.run()
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-000000002.pt", "step-000000003.pt"]
    assert load_checkpoint(folder / "step-000000003.pt")["step"] == 3


def test_a_full_disk_while_saving_the_model(tmp_path, mnist_slice, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(safetensors.torch, "save_model", full)
    with pytest.raises(TrainingError, match=r"cannot write the model .*model.safetensors: .*No space left on device"):
        make_trainer(tiny_config(tmp_path, **SETTINGS), mnist_slice).run()
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")], "temporary file left"


def test_an_output_folder_that_cannot_be_made(tmp_path, mnist_slice):
    (tmp_path / "file").write_text("in the way")
    for out, reason in ((tmp_path / "file" / "run", "Not a directory"), (tmp_path / "file", "File exists"),
                        (Path("/proc/self/anyformer-run"), "No such file or directory")):
        cfg = tiny_config(tmp_path, out=str(out), **SETTINGS)
        with pytest.raises(TrainingError, match=re.escape(f"cannot create the run directory {out}: {reason}")):
            make_trainer(cfg, mnist_slice).run()


@pytest.mark.slow
def test_a_real_write_failure_through_the_command_line(tmp_path, monkeypatch):
    """The kernel refuses the write (a file-size limit between the model's 170 kB and the
    checkpoint's 540 kB, as a full disk would): exit 2, one line, no temporary file."""
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get the error EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    for split in ("train", "test"):  # the decoded-data cache must exist: the limit would stop its write
        load_image_dataset("mnist", split)
    out = tmp_path / "run"
    env = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA)}
    env.pop("ANYFORMER_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "anyformer", "train", "--model", "vit-mnist", "--set", "width=48",
                        "--set", "depth=2", "--set", "heads=4", "--set", "mlp_hidden=96", "--set", "patch_size=7",
                        "--max-steps", "4", "--checkpoint-every", "1", "--limit-train", "320", "--limit-eval",
                        "100", "--no-progress", "--threads", "1", "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=600, preexec_fn=limit_file_size)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("anyformer: error: cannot write the checkpoint") and "File too large" in lines[0]
    assert (out / "model.safetensors").is_file() and not list_checkpoints(out)
    assert not [p for p in out.rglob(".*")], "temporary file left"


@pytest.mark.slow
def test_resume_without_a_checkpoint_starts_over_cleanly(tmp_path, mnist_slice, capsys):
    """A kill between the first evaluation's metrics line and its checkpoint leaves a line with
    nothing to resume from: --resume starts from step 0 and does not keep the stale line."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 3, "train_loss": 9.0}\n')
    (run / ".model.safetensors.x1y2z3").write_bytes(b"half a file")  # a write cut short
    make_trainer(tiny_config(tmp_path, resume=True, **SETTINGS), mnist_slice).run()
    assert "--resume: no checkpoint in" in capsys.readouterr().out
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [3, 6] and lines[0]["train_loss"] != 9.0
    assert not (run / ".model.safetensors.x1y2z3").exists()
