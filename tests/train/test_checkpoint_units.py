"""checkpoint.py one rule at a time, without a training run: what load_checkpoint refuses and the
exact words it says, and what restore puts back (the last checkpoint of several, the weights, sums,
lines, random state, EMA, fitted steps), what it keeps of this run (the optimiser's kernels), and how
it names a rank's error or picks a rank's random state."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from anyformer.train import checkpoint
from anyformer.train.checkpoint import (CKPT_DIR, CheckpointError, digest, list_checkpoints, load_checkpoint,
                                        stage_checkpoint)
from anyformer.train.distributed import Distributed

from .conftest import make_trainer, tiny_config


# ---------------------------------------------------------------------------------- load_checkpoint
def _written(run_dir: Path, state: dict, step: int = 3) -> Path:
    """`state` written as step `step`'s checkpoint, as save writes one (replacing any there)."""
    return checkpoint.commit_checkpoint(run_dir, step, stage_checkpoint(run_dir, step, state)[0])


def test_a_checkpoint_comes_back_as_written_without_its_digest(tmp_path: Path) -> None:
    state = {"model": {"w": torch.randn(3, 2)}, "step": 3, "sums": {"loss": 1.5},
             "rng": [{"cpu": torch.get_rng_state()}]}
    back = load_checkpoint(_written(tmp_path, state))
    assert sorted(back) == sorted(state) and back["step"] == 3 and back["sums"] == {"loss": 1.5}
    assert torch.equal(back["model"]["w"], state["model"]["w"])


class _Code:
    def __reduce__(self):  # a pickle that asks to call a function when it is read
        return (os.getpid, ())


def test_a_pickle_that_asks_to_run_code_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"model": _Code(), "step": 1}, path)
    with pytest.raises(CheckpointError, match=rf"^refusing to load {path}: it asks to run \S+\.getpid, and a "
                                              r"checkpoint holds only tensors and plain data; do not use this file$"):
        load_checkpoint(path)


def test_a_pickle_of_unknown_operations_is_refused_with_the_unpicklers_reason(tmp_path: Path) -> None:
    path = tmp_path / "odd.pt"
    path.write_bytes(b"\x80\x02\x82\x01.")  # EXT1: an opcode the weights-only unpickler does not take
    with pytest.raises(CheckpointError, match=rf"^refusing to load {path}: it is not a checkpoint of tensors and "
                                              r"plain data \(Unsupported operand 130\)$"):
        load_checkpoint(path)


def test_damage_is_named_with_the_first_line_of_what_torch_said(tmp_path: Path) -> None:
    good = _written(tmp_path, {"model": {}, "step": 1})
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:100])
    try:
        torch.load(cut, weights_only=True)
    except RuntimeError as e:
        said = str(e).splitlines()[0][:120]
    assert len(said) == 120  # torch's message is longer: the cut is what is shown
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(cut)
    assert str(caught.value) == f"checkpoint {cut} is truncated or corrupt (RuntimeError: {said})"
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(empty)
    assert str(caught.value) == f"checkpoint {empty} is truncated or corrupt (EOFError: )"


@pytest.mark.parametrize("state", [[1, 2], {"step": 1}, {"model": {}}])
def test_anything_but_a_dict_with_model_step_and_digest_is_not_a_checkpoint(tmp_path: Path, state) -> None:
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=rf"^{path} is not an anyformer training checkpoint$"):
        load_checkpoint(path)
    digested = tmp_path / "digested.pt"  # with a digest, a dict still needs both model and step
    if isinstance(state, dict):
        torch.save({**state, "sha256": digest(state)}, digested)
        with pytest.raises(CheckpointError, match="is not an anyformer training checkpoint"):
            load_checkpoint(digested)
    torch.save({"model": {}, "step": 1}, path)  # model and step, but no digest
    with pytest.raises(CheckpointError, match="is not an anyformer training checkpoint"):
        load_checkpoint(path)


def test_contents_that_do_not_match_their_digest_are_refused(tmp_path: Path) -> None:
    path = _written(tmp_path, {"model": {"w": torch.zeros(4)}, "step": 1})
    state = torch.load(path, weights_only=True)
    state["model"]["w"][2] = 1.0
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {path} is corrupt: its contents do not match the "
                                              r"SHA-256 written with it \(delete it to resume from an earlier one\)$"):
        load_checkpoint(path)


# ---------------------------------------------------------------------------------- restore
def _trainer(tmp_path: Path, mnist_slice, **kw):
    t = make_trainer(tiny_config(tmp_path, max_steps=6, **kw), mnist_slice)
    t.files.prepare(t.cfg.resume)
    return t


def _steps(t, n: int) -> None:
    for _ in range(n):
        t.train_step()
    t.sync()


@pytest.fixture
def saved(tmp_path: Path, mnist_slice):
    """A run saved after steps 2 and 3 (two checkpoints), with a metrics line between them."""
    t = _trainer(tmp_path, mnist_slice)
    _steps(t, 2)
    checkpoint.save(t)
    t.last_line = {"step": 3, "train_loss": 0.5}
    t.files.append_metrics(t.last_line)
    t.metrics_lines = 1
    _steps(t, 1)
    checkpoint.save(t)
    t.files.append_metrics({"step": 4})  # written after the last checkpoint: dropped on resume
    return t


def test_restore_takes_the_last_checkpoint_and_puts_the_run_back(saved, tmp_path, mnist_slice, capsys) -> None:
    assert [p.name for p in list_checkpoints(saved.run_dir)] == ["step-000000002.pt", "step-000000003.pt"]
    rng = load_checkpoint(list_checkpoints(saved.run_dir)[-1])["rng"][0]["cpu"]
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    torch.manual_seed(1234)  # whatever the random state was, the checkpoint's comes back
    assert checkpoint.restore(fresh) is True
    assert (fresh.step, fresh.saved_step, fresh.metrics_lines) == (3, 3, 1)
    assert fresh.sums == saved.sums and fresh.last_line == {"step": 3, "train_loss": 0.5}
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in saved.model.state_dict().items():
        assert torch.equal(fresh.model.state_dict()[k], v), k
    moments = [o.state_dict()["state"][0]["exp_avg"] for o in (fresh.optimizer, saved.optimizer)]
    assert torch.equal(*moments)
    assert [line["step"] for line in fresh.files.read_metrics()] == [3]
    assert capsys.readouterr().out.endswith(f"resumed from {list_checkpoints(saved.run_dir)[-1]} at step 3/6\n")


def test_a_trainer_asked_to_resume_auto_resumes_a_run_and_starts_where_there_is_none(saved, tmp_path,
                                                                                     mnist_slice) -> None:
    """`Trainer(cfg)` with `resume="auto"` (the Python API; the command line decides before): True where
    the run directory holds a run, False where it holds none."""
    from anyformer.train import outputs
    outputs.save_model(saved)  # its config.json: what a run directory holds after its first evaluation
    assert _trainer(tmp_path, mnist_slice, resume="auto").cfg.resume is True
    assert make_trainer(tiny_config(tmp_path / "other", resume="auto"), mnist_slice).cfg.resume is False


def test_restore_without_a_checkpoint_says_so_and_starts_at_zero(tmp_path, mnist_slice, capsys) -> None:
    t = _trainer(tmp_path, mnist_slice)
    assert checkpoint.restore(t) is False and t.step == 0
    assert capsys.readouterr().out.endswith(
        f"--resume: no checkpoint in {t.run_dir}/{CKPT_DIR}, starting from step 0\n")


def test_restore_keeps_this_runs_optimiser_kernels(saved, tmp_path, mnist_slice) -> None:
    path = list_checkpoints(saved.run_dir)[-1]
    state = load_checkpoint(path)
    for group in state["optimizer"]["param_groups"]:
        group["fused"], group["foreach"] = "saved-fused", "saved-foreach"
    _written(saved.run_dir, state, 3)
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    for group in fresh.optimizer.param_groups:  # this run's choice, apart from any default
        group["fused"], group["foreach"] = False, True
    mine = [(False, True)] * len(fresh.optimizer.param_groups)
    assert checkpoint.restore(fresh)
    assert [(g.get("fused"), g.get("foreach")) for g in fresh.optimizer.param_groups] == mine


def test_a_checkpoint_written_on_a_gpu_resumes_on_the_cpu(saved, tmp_path, mnist_slice) -> None:
    path = list_checkpoints(saved.run_dir)[-1]
    state = load_checkpoint(path)
    state["rng"][0]["cuda"] = torch.zeros(16, dtype=torch.uint8)  # what a CUDA run records beside the CPU's
    _written(saved.run_dir, state, 3)
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    assert checkpoint.restore(fresh) and fresh.step == 3


def test_a_checkpoint_of_another_model_names_both_configs(saved, tmp_path, mnist_slice) -> None:
    other = _trainer(tmp_path / "other", mnist_slice, resume=True, out=str(saved.run_dir),
                     model_overrides={**saved.cfg.model_overrides, "width": 32})
    with pytest.raises(CheckpointError, match=r"belongs to another model \(\{.*'width': 48.*\}\), not to vit-mnist "
                                              r"\(\{.*'width': 32"):
        checkpoint.restore(other)


def test_a_resumed_run_keeps_the_evaluation_it_had_kept(tmp_path, mnist_slice) -> None:
    """--select-fraction's kept weights travel in the checkpoint: a resumed run that forgot them would let a
    later, worse evaluation replace the best one."""
    t = _trainer(tmp_path, mnist_slice)
    _steps(t, 2)
    line = {"step": 2, "select_accuracy": 0.75}
    t.kept.offer({"select": (0.75,)}, t.model, 2, line)
    kept = {k: v.clone() for k, v in t.kept.best["weights"].items()}
    _steps(t, 1)  # the weights move on; the kept ones stay those of step 2
    checkpoint.save(t)
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    assert checkpoint.restore(fresh)
    assert (fresh.kept.step, fresh.kept.best["key"], fresh.kept.best["line"]) == (2, [0.75], line)
    for k, v in kept.items():
        assert torch.equal(fresh.kept.best["weights"][k], v), k
    fresh.kept.offer({"select": (0.5,)}, fresh.model, 3, {"step": 3})  # worse: the kept evaluation stays
    assert fresh.kept.step == 2


def test_an_ema_run_restores_its_average_and_refuses_a_checkpoint_without_one(tmp_path, mnist_slice) -> None:
    t = _trainer(tmp_path, mnist_slice, ema=0.5)
    _steps(t, 2)
    checkpoint.save(t)
    fresh = _trainer(tmp_path, mnist_slice, ema=0.5, resume=True)
    assert checkpoint.restore(fresh)
    for k, v in t.ema.model.state_dict().items():
        assert torch.equal(fresh.ema.model.state_dict()[k], v), k
    path = list_checkpoints(t.run_dir)[-1]
    state = load_checkpoint(path)
    del state["ema"]
    _written(t.run_dir, state, 2)
    with pytest.raises(CheckpointError) as caught:
        checkpoint.restore(_trainer(tmp_path, mnist_slice, ema=0.5, resume=True))
    assert str(caught.value) == (f"checkpoint {path} does not fit this run: 'it holds no EMA weights, and this run "
                                 f"keeps an EMA (--ema)' (delete it to resume from an earlier one)")


def test_a_time_budgets_fitted_steps_come_back(tmp_path, mnist_slice) -> None:
    t = _trainer(tmp_path, mnist_slice, time_budget=3600)
    _steps(t, 2)
    t.total_steps = 5  # as a budget fitted it
    checkpoint.save(t)
    fresh = _trainer(tmp_path, mnist_slice, time_budget=3600, resume=True)
    assert fresh.total_steps == 6 and checkpoint.restore(fresh) and fresh.total_steps == 5


class _Ranks(Distributed):
    """Rank `rank` of `world` without a process group: rank 0's broadcast and every rank's gather given."""

    def __init__(self, rank: int, world: int, rank0: object = None, gathered: list | None = None) -> None:
        super().__init__(rank=rank, world=world)
        self._rank0, self._gathered = rank0, gathered

    def broadcast(self, obj):
        return self._rank0 if self._rank0 is not None else obj

    def all_gather(self, obj):
        return self._gathered if self._gathered is not None else [obj] * self.world


def test_each_rank_takes_its_own_random_state_and_rank_zeros_choice(saved, tmp_path, mnist_slice) -> None:
    path = list_checkpoints(saved.run_dir)[-1]
    state = load_checkpoint(path)
    mine = torch.Generator().manual_seed(77).get_state()
    state["rng"] = [state["rng"][0], {"cpu": mine}]
    _written(saved.run_dir, state, 3)
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    fresh.dist = _Ranks(1, 2, rank0=[path])
    assert checkpoint.restore(fresh)
    assert torch.equal(torch.get_rng_state(), mine)
    for rank, world in ((0, 1), (1, 3)):  # two ranks' states saved, another number of ranks now: the first
        fresh.dist = _Ranks(rank, world, rank0=[path])
        assert checkpoint.restore(fresh) and torch.equal(torch.get_rng_state(), state["rng"][0]["cpu"])


def test_a_rank_that_cannot_read_the_checkpoint_is_named(saved, tmp_path, mnist_slice) -> None:
    fresh = _trainer(tmp_path, mnist_slice, resume=True)
    fresh.dist = _Ranks(0, 3, gathered=[None, None, "checkpoint X is truncated"])
    with pytest.raises(CheckpointError, match=r"^rank 2: checkpoint X is truncated$"):
        checkpoint.restore(fresh)
    fresh.dist = _Ranks(0, 3, gathered=[None, "first", "second"])
    with pytest.raises(CheckpointError, match=r"^rank 1: first$"):
        checkpoint.restore(fresh)
    path = list_checkpoints(saved.run_dir)[-1]
    path.write_bytes(b"")
    fresh.dist = _Ranks(0, 1)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {path} is truncated or corrupt \(EOFError: \)$"):
        checkpoint.restore(fresh)


# ---------------------------------------------------------------------------------- save
def test_the_digest_tells_keys_items_and_empty_tensors_apart() -> None:
    assert digest({"a": 1}) != digest({"b": 1}) and digest([1, 2]) != digest([1, 3])
    assert digest({"w": torch.zeros(0)}) != digest({"w": torch.zeros(0, dtype=torch.int64)})
    assert digest({"w": torch.zeros(2)}) == digest({"w": torch.zeros(2)})


def test_save_writes_the_step_with_its_plan_and_returns_its_path_once(saved) -> None:
    last = list_checkpoints(saved.run_dir)[-1]
    assert load_checkpoint(last)["plan"] == saved.step_plan.state()
    saved.cfg.keep_checkpoints = 3
    _steps(saved, 1)
    path = checkpoint.save(saved)
    assert path == checkpoint.checkpoint_path(saved.run_dir, 4) and path.is_file()
    inode = path.stat().st_ino
    assert checkpoint.save(saved) == path  # the same step again: its path, not written twice
    assert path.stat().st_ino == inode
    assert [p.name for p in list_checkpoints(saved.run_dir)] == ["step-000000002.pt", "step-000000003.pt",
                                                                  "step-000000004.pt"]
    saved.dist = _Ranks(1, 2)
    assert checkpoint.save(saved) is None  # another rank than 0 is given no path
    _steps(saved, 1)
    assert checkpoint.save(saved) is None  # of a step it saves now either
    assert saved.saved_step == 5


def test_a_failed_write_of_a_checkpoint_is_named(saved, monkeypatch) -> None:
    from anyformer.train.rundir import TrainingError

    def full(*a, **kw):
        raise OSError(28, "No space left on device")
    _steps(saved, 1)
    where = checkpoint.checkpoint_path(saved.run_dir, 4)
    monkeypatch.setattr(checkpoint, "commit_checkpoint", full)
    with pytest.raises(TrainingError, match=rf"^cannot write the checkpoint {where}: No space left on device"):
        checkpoint.save(saved)
    monkeypatch.setattr(checkpoint, "stage_checkpoint", full)
    with pytest.raises(TrainingError, match=rf"^cannot write the checkpoint {where}: No space left on device"):
        checkpoint.save(saved)


def test_a_rank_that_cannot_see_rank_zeros_checkpoint_stops_the_run_and_the_file_goes(saved) -> None:
    from anyformer.train.rundir import TrainingError
    _steps(saved, 1)
    saved.dist = _Ranks(0, 3, gathered=[True, False, False])
    with pytest.raises(TrainingError, match=r"^rank 1, 2 cannot see the checkpoint rank 0 wrote \(.+, \d+ bytes\): "
                                            r"under torchrun --out must be a folder every machine sees"):
        checkpoint.save(saved)
    # the staged step 4 is removed, never named: only the two checkpoints before it are left
    assert sorted(p.name for p in (saved.run_dir / CKPT_DIR).iterdir()) == ["step-000000002.pt", "step-000000003.pt"]


def test_a_rank_sees_the_staged_file_only_at_its_full_size(tmp_path: Path) -> None:
    staged = tmp_path / "staged.tmp"
    staged.write_bytes(b"12345")
    assert checkpoint._sees(str(staged), 5)
    assert not checkpoint._sees(str(staged), 6) and not checkpoint._sees(str(tmp_path / "elsewhere"), 5)


def test_a_budgets_run_resumed_from_a_checkpoint_without_fitted_steps_keeps_its_own(tmp_path, mnist_slice) -> None:
    t = _trainer(tmp_path, mnist_slice, time_budget=3600)
    _steps(t, 2)
    path = checkpoint.save(t)
    state = load_checkpoint(path)
    del state["total_steps"]  # written before a budget's steps were saved
    _written(t.run_dir, state, 2)
    fresh = _trainer(tmp_path, mnist_slice, time_budget=3600, resume=True)
    assert checkpoint.restore(fresh) and fresh.total_steps == 6


def test_commit_keeps_the_last_checkpoints_asked_for_and_two_by_default(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        checkpoint.commit_checkpoint(tmp_path, step, stage_checkpoint(tmp_path, step, {"model": {}, "step": step})[0])
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000002.pt", "step-000000003.pt"]
    checkpoint.commit_checkpoint(tmp_path, 4, stage_checkpoint(tmp_path, 4, {"model": {}, "step": 4})[0], keep=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000004.pt"]


def test_a_checkpoints_dict_holds_every_required_field_and_only_the_optional_ones_kept() -> None:
    """A run without a speed plan still writes `plan` (None; `from_state` needs it); the optional fields
    (`total_steps`, `scaler`, `ema`, `best`) are written only where the run keeps them."""
    required = dict(step=3, model={"w": torch.ones(1)}, optimizer={}, model_config={}, sums={}, rng=[],
                    metrics_lines=3, elapsed=1.5, last_line={}, plan=None)
    plain = checkpoint.Checkpoint(**required)
    assert plain.state() == required
    assert checkpoint.Checkpoint.from_state(plain.state()) == plain
    kept = checkpoint.Checkpoint(**required, total_steps=9, ema={"w": torch.zeros(1)})
    assert sorted(kept.state()) == sorted([*required, "total_steps", "ema"])
