"""What a Trainer settles before it trains: the refusals it makes before any data is read, the
threads it takes (its own, or under torchrun a share of the cores), an elastic restart's refusal,
the task it is given, the earlier run's pictures it clears, a model too large to train, the
precision `auto` settles to and the optimiser's kernel, and what each rank of several takes (rank 0's
precision, the same weights, its own dropout, FSDP's share in the memory check). Written from the
trainer's `__init__` and `_build` mutants that survived the fast suite."""
from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
import torch

from anyformer.train.distributed import Distributed
from tests.refused import refused

from .conftest import StandInRank, make_trainer, tiny_config, torchrun_env


@pytest.fixture
def threads():
    """Restores the process's thread count after a test that lets the Trainer set it."""
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_fp16_on_the_cpu_is_refused_before_any_data_is_read(tmp_path):
    from anyformer.train import Trainer
    cfg = tiny_config(tmp_path, amp="fp16", device="cpu", data=str(tmp_path / "no such data"))
    refused(ValueError, "--amp fp16 needs a CUDA device (fp16 training needs loss scaling, which runs on CUDA), "
            "but the run is on cpu; use --amp bf16, the cpu's half type, or --amp none", lambda: Trainer(cfg))


def test_a_thread_count_below_one_is_refused_in_words(tmp_path, mnist_slice, threads):
    refused(ValueError, "threads must be >= 1, got 0",
            lambda: make_trainer(tiny_config(tmp_path, threads=0), mnist_slice))


def test_one_process_keeps_the_threads_it_has_unless_told(tmp_path, mnist_slice, threads):
    torch.set_num_threads(3)
    make_trainer(tiny_config(tmp_path, threads=None), mnist_slice)
    assert torch.get_num_threads() == 3
    make_trainer(tiny_config(tmp_path / "b", threads=2), mnist_slice)
    assert torch.get_num_threads() == 2


def test_the_trainer_trains_the_task_it_is_given(tmp_path, mnist_slice):
    from anyformer.train import Trainer
    from anyformer.train.tasks import ImageClassification
    train, test = mnist_slice
    cfg = tiny_config(tmp_path)
    task = ImageClassification(cfg, torch.device("cpu"), train, test)
    assert Trainer(cfg, task=task).task is task


def test_a_fresh_run_clears_the_pictures_any_task_left(tmp_path, mnist_slice):
    from anyformer.train.tasks import task_pictures
    trainer = make_trainer(tiny_config(tmp_path), mnist_slice)
    trainer.run_dir.mkdir(parents=True)
    for name in task_pictures():  # a flow run's samples, an MAE run's reconstruction, ...
        (trainer.run_dir / name).write_bytes(b"old")
    trainer.files.prepare(False)
    assert sorted(task_pictures()) == sorted(("confusion.png", "attention.png", "samples.png", "reconstruction.png",
                                              "predictions.png"))
    assert not any((trainer.run_dir / name).exists() for name in task_pictures())


def test_a_resume_with_other_settings_names_the_run_it_would_continue(tmp_path, mnist_slice):
    cfg = tiny_config(tmp_path, lr=1e-3)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # The settings as a run records them (here in the form a run of the user's own module writes).
    (run_dir / "config.json").write_text(json.dumps({"family": "own", "train": cfg.to_dict()}))
    with pytest.raises(ValueError) as info:
        make_trainer(dataclasses.replace(cfg, lr=2e-3, resume=True), mnist_slice)
    assert str(info.value).startswith(f"--resume continues {run_dir} with the settings it recorded in config.json")


def _leave_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("local_world", [1, 2])
def test_under_torchrun_the_local_ranks_share_the_cores(tmp_path, mnist_slice, monkeypatch, threads, local_world):
    torchrun_env(monkeypatch, local_world=local_world, restarts=0)
    torch.set_num_threads(3)
    try:  # FSDP, not DDP: see test_every_option_step's test_fsdp_shards_the_weights_under_torchrun
        trainer = make_trainer(tiny_config(tmp_path, threads=None, fsdp=True), mnist_slice)
        assert trainer.dist.enabled and trainer.dist.local_world == local_world
        assert torch.get_num_threads() == max(1, len(os.sched_getaffinity(0)) // local_world)
    finally:
        _leave_group()


def test_after_an_elastic_restart_a_fresh_run_says_to_launch_with_resume_auto(tmp_path, mnist_slice,
                                                                              monkeypatch):
    torchrun_env(monkeypatch, local_world=1, restarts=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")  # what the job's first start wrote
    try:
        refused(ValueError, f"{run_dir} holds the run this job began (config.json), and torchrun has restarted its "
                f"workers: launch with --resume auto, so that a restart continues the run",
                lambda: make_trainer(tiny_config(tmp_path, fsdp=True), mnist_slice))
    finally:
        _leave_group()


def test_a_model_too_large_to_train_is_refused_with_what_it_needs(tmp_path, mnist_slice):
    """Weights, gradients and Adam's two moments: 16 bytes a float32 parameter, all on this one
    process (FSDP alone splits them), checked on the meta device before any memory is taken."""
    from .conftest import TINY
    huge = {**TINY, "width": 65536, "heads": 8, "depth": 8}  # over 1e11 parameters: 2 TB to train
    with pytest.raises(ValueError) as info:
        make_trainer(tiny_config(tmp_path, model_overrides=huge), mnist_slice)
    found = re.fullmatch(r"this model has ([\d,]+) parameters and needs about ([\d,.]+) GiB to train \(weights, "
                         r"gradients, optimiser state\), more than the [\d,.]+ GiB of cpu memory; choose a "
                         r"smaller width, depth or image size", str(info.value))
    assert found, str(info.value)
    params, gib = int(found[1].replace(",", "")), float(found[2].replace(",", ""))
    assert params > 1e11 and gib == pytest.approx(16 * params / 2**30, rel=1e-3)


@pytest.mark.parametrize("option, message", [
    ({"ema": 0.99}, "--ema keeps a full copy of the weights on each rank; it does not combine with --fsdp"),
    ({"sam": 0.05}, "--sam copies and moves the whole weights each step; it does not combine with --fsdp")])
def test_whole_weight_options_do_not_combine_with_sharding(tmp_path, mnist_slice, monkeypatch, option, message):
    """An average of the weights and sharpness-aware steps each need the whole weights on every rank."""
    torchrun_env(monkeypatch, local_world=1, restarts=0)
    try:
        refused(ValueError, message, lambda: make_trainer(tiny_config(tmp_path, fsdp=True, **option), mnist_slice))
    finally:
        _leave_group()


def test_the_optimiser_runs_the_kernel_the_plan_answers(tmp_path, mnist_slice):
    from anyformer import plan
    with plan.forcing("stock,adamw=fused"):  # the plan's answer where fused AdamW measured faster
        trainer = make_trainer(tiny_config(tmp_path), mnist_slice)
    assert all(group["fused"] for group in trainer.optimizer.param_groups)


def test_auto_precision_is_settled_once_for_the_run_as_the_plan_answers(tmp_path, mnist_slice, monkeypatch):
    """`amp="auto"`: rank 0 (the one process here) asks the plan for this model's size and every
    later question (the evaluation, the summary, the run's first line) gets that answer."""
    from anyformer import plan
    from anyformer.train import precision, progress
    monkeypatch.setattr(precision, "_SETTLED", {})  # no earlier run's answer in this process
    with plan.forcing("stock,amp=bf16"):  # where bf16 autocast measured faster for this model
        trainer = make_trainer(tiny_config(tmp_path, amp="auto"), mnist_slice)
    assert precision.resolve_amp("auto", trainer.device) == "bf16"  # the plan, forced no more, is not asked
    assert " | bf16 autocast | " in progress.intro(trainer)


def _as_rank(monkeypatch, rank: StandInRank) -> StandInRank:
    """The next Trainer joins as `rank`; the plan's precision measurement answers fp32 and is recorded."""
    from anyformer.train import precision
    monkeypatch.setattr(Distributed, "from_env", classmethod(lambda cls, device, fsdp: rank))
    monkeypatch.setattr(precision, "_SETTLED", {})
    rank.measured = []
    monkeypatch.setattr(precision, "amp_dtype", lambda device, **size: (rank.measured.append(size), "none")[1])
    return rank


def test_rank_zero_measures_the_precision_once_and_sends_its_answer(tmp_path, mnist_slice, monkeypatch):
    from anyformer.train import precision
    rank0 = _as_rank(monkeypatch, StandInRank(0, 2))
    trainer = make_trainer(tiny_config(tmp_path, amp="auto"), mnist_slice)
    assert rank0.measured == [{"width": 48, "hidden": 96}]  # the model's own sizes
    assert rank0.sent[1] == "none" and precision.resolve_amp("auto", trainer.device) == "none"


def test_another_rank_takes_rank_zeros_precision_without_measuring(tmp_path, mnist_slice, monkeypatch):
    from anyformer.train import precision
    rank1 = _as_rank(monkeypatch, StandInRank(1, 2, from_rank0=[None, "bf16", {}]))
    trainer = make_trainer(tiny_config(tmp_path, amp="auto"), mnist_slice)
    assert rank1.measured == [] and rank1.sent[1] is None  # it waits for rank 0's answer
    assert rank1.from_rank0 == [] and precision.resolve_amp("auto", trainer.device) == "bf16"


def test_every_rank_starts_with_rank_zeros_weights_and_its_own_dropout(tmp_path, mnist_slice, monkeypatch):
    """The weights are drawn from the run's seed on every rank; the random stream that follows
    (dropout, the stand-ins' draws) from seed + rank, so ranks do not drop the same units."""
    one = make_trainer(tiny_config(tmp_path / "one", seed=5), mnist_slice)
    assert torch.initial_seed() == 5
    _as_rank(monkeypatch, StandInRank(1, 2, from_rank0=[None, None, {}]))
    other = make_trainer(tiny_config(tmp_path / "other", seed=5), mnist_slice)
    assert torch.initial_seed() == 6
    for a, b in zip(one.model.state_dict().values(), other.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("fsdp, shards", [(True, 3), (False, 1)])
def test_the_memory_check_counts_the_shards_fsdp_splits_the_weights_into(tmp_path, mnist_slice, monkeypatch,
                                                                        fsdp, shards):
    """16 bytes a parameter to train, on each of FSDP's ranks a third of them (world 3); under DDP
    every rank holds them all."""
    import anyformer.train.trainer as trainer_module
    asked, build_model = [], trainer_module.build_model

    def counted(cfg, task, device=None, shards=1):
        asked.append(shards)
        return build_model(cfg, task, device, shards)
    monkeypatch.setattr(trainer_module, "build_model", counted)
    _as_rank(monkeypatch, StandInRank(0, 3, fsdp=fsdp))
    make_trainer(tiny_config(tmp_path, fsdp=fsdp), mnist_slice)
    assert asked == [shards]


def test_a_module_of_your_own_is_not_sharded(tmp_path, mnist_slice, monkeypatch):
    from anyformer.train import Trainer
    from anyformer.train.tasks import ImageClassification
    _as_rank(monkeypatch, StandInRank(0, 2, fsdp=True))
    cfg = tiny_config(tmp_path, fsdp=True)
    task = ImageClassification(cfg, torch.device("cpu"), *mnist_slice)
    own = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    refused(ValueError, "--fsdp shards anyformer's presets; a module of your own trains under torchrun with DDP "
            "(leave --fsdp out)", lambda: Trainer(cfg, task=task, model=own))


def test_keeping_the_best_weights_is_refused_under_fsdp(tmp_path, mnist_slice, monkeypatch):
    _as_rank(monkeypatch, StandInRank(0, 2, fsdp=True))
    refused(ValueError, "--select-fraction keeps a copy of the best weights on each rank; it does not combine "
            "with --fsdp", lambda: make_trainer(tiny_config(tmp_path, fsdp=True, select_fraction=0.1), mnist_slice))


def test_a_trainer_given_no_task_makes_the_one_its_config_names(tmp_path, monkeypatch) -> None:
    """`Trainer(cfg)` alone (the Python API's way): the task built from the config, on the run's device."""
    from anyformer.train import Trainer, trainer as trainer_module
    from anyformer.train.tasks import ImageClassification
    made, real = [], trainer_module.make_task
    monkeypatch.setattr(trainer_module, "make_task", lambda cfg, device: made.append((cfg, device)) or real(cfg, device))
    t = Trainer(tiny_config(tmp_path))
    assert made == [(t.cfg, torch.device("cpu"))] and isinstance(t.task, ImageClassification)
    assert t.task.batch(0)[1] == 32
