"""Reading the steps back (a sync) on a tiny real trainer: when it comes (the first step at once,
then when due, at once after a signal), what it adds up (the pending steps in order, every rank's
sums, rank 0's timing), a non-finite loss named by its step, and when a run stops (its own signal,
or under torchrun the agreed one). Other ranks are stood in for (conftest's StandInRank)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

import anyformer.train.trainer as trainer_module
from anyformer.train.trainer import SyncClock

from .conftest import StandInRank, make_trainer, tiny_config
from .trainer_doubles import Clock, record_syncs


def test_the_first_step_is_read_at_once_then_when_a_sync_is_due(tmp_path, mnist_slice, monkeypatch) -> None:
    """The loss of the first step is read at once (the bar shows it, and the sync times the steps
    from there); later steps wait for the sync due, at the latest the evaluation's."""
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 1e9)  # every sync asks for the longest wait
    t = make_trainer(tiny_config(tmp_path, max_steps=4, limit_train=128, limit_eval=16), mnist_slice)
    read = record_syncs(t)
    planning, stepping, real_step = [0.0], [], t.train_step
    t.step_plan.planning_seconds = lambda: planning[0]

    def step():  # step 2 as if the speed plan measured a new shape for 0.3 s: not the run's time
        start = time.perf_counter()
        loss = real_step()
        stepping.append(time.perf_counter() - start)
        if t.step == 2:
            time.sleep(0.3)
            planning[0] += 0.3
        return loss
    t.train_step = step
    wall = time.perf_counter()
    summary = t.run()
    wall = time.perf_counter() - wall
    assert read == [1, 4]
    # The run's time is its steps' seconds without the plan's: the seconds its throughput divides by.
    line = json.loads((t.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert sum(stepping) - 0.01 <= line["time"] <= wall - 0.3
    assert abs(line["time"] - 4 * 32 / line["images_per_s"]) <= 0.006
    # MFU: that throughput times the model's FLOPs per image, over the peak.
    from anyformer.train import own_model
    flops = line["images_per_s"] * own_model.flops_per_item(t.task, t.model)
    assert summary["mfu"] == pytest.approx(flops / summary["peak_flops"], abs=1e-4) and summary["mfu"] > 0


def test_one_process_reads_the_steps_at_once_when_a_signal_came(tmp_path, mnist_slice, monkeypatch) -> None:
    from anyformer.train.signals import Interrupted
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 1e9)
    t = make_trainer(tiny_config(tmp_path, max_steps=6, limit_train=192, limit_eval=16), mnist_slice)
    read, real_step = record_syncs(t), t.train_step
    # Ctrl-C after step 3 (conftest's interrupt_at sends SIGTERM): the stop names the signal that came.
    t.train_step = lambda: (real_step(), t.step == 3 and os.kill(os.getpid(), signal.SIGINT))[0]
    with pytest.raises(Interrupted) as info:
        t.run()
    assert read == [1, 3] and t.sums["steps"] == 3
    from anyformer.train.checkpoint import checkpoint_path
    saved = checkpoint_path(t.run_dir, 3)
    assert str(info.value) == (f"stopped by signal SIGINT after step 3; checkpoint {saved} written, "
                               f"continue with --resume")


def test_a_stop_is_the_signal_alone_but_under_torchrun_the_agreed_one(trainer) -> None:
    trainer.signals.received, trainer.clock = signal.SIGTERM, SyncClock(stop=False)
    assert trainer._should_stop()  # one process: its own signal
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    assert not trainer._should_stop()  # seen here, not yet agreed at a sync
    trainer.signals.received, trainer.clock = None, SyncClock(stop=True)
    assert trainer._should_stop()  # another rank's signal, agreed


def test_a_sync_reads_the_pending_steps_in_order_and_times_the_next(trainer, monkeypatch) -> None:
    from anyformer.train.progress import SYNC_SECONDS
    monkeypatch.setattr(trainer_module, "time", Clock(105.0))
    trainer.step, trainer.clock = 12, SyncClock(2, 104.5)  # 10 steps in 0.5 s since the last sync
    trainer.sums = {"correct": 1.0}
    trainer.pending = [(10, 32, ["correct", "count"], torch.tensor([16.0, 20.0, 32.0], dtype=torch.float64)),
                       (11, 32, ["correct", "count"], torch.tensor([8.0, 25.0, 32.0], dtype=torch.float64))]
    trainer.sync()
    assert trainer.sums == {"correct": 46.0, "count": 64.0, "loss": 0.75}
    assert trainer.last_loss == 0.25 and trainer.pending == []
    assert trainer.clock == SyncClock(12, 105.0, 12 + int(SYNC_SECONDS * 10 / 0.5), False)
    trainer.step, trainer.signals.received = 13, 15  # a signal, and a step of a microsecond: as many as allowed
    monkeypatch.setattr(trainer_module, "time", Clock(105.000001))
    trainer.sync()
    assert trainer.clock.stop and trainer.clock.next == 13 + trainer_module.MAX_SYNC_STEPS
    monkeypatch.setattr(trainer_module, "time", Clock(1105.001))  # a step of 1000 s: the next sync comes next
    trainer.step = 14
    trainer.sync()
    assert trainer.clock.next == 15


def test_under_torchrun_a_sync_adds_every_ranks_sums_and_takes_rank_zeros_timing(trainer, monkeypatch) -> None:
    monkeypatch.setattr(trainer_module, "time", Clock(105.0))
    trainer.step, trainer.clock = 12, SyncClock(2, 100.0)
    trainer.pending = [(11, 64, ["count"], torch.tensor([16.0, 32.0], dtype=torch.float64))]
    # rank 0 sent its loss sum and count, no signal, and its wait of 7 steps
    trainer.dist = StandInRank(rank=1, world=2, others=torch.tensor([24.0, 32.0, 0.0, 7.0], dtype=torch.float64))
    trainer.sync()
    (sent,) = trainer.dist.summed
    assert sent.tolist() == [16.0, 32.0, 0.0, 0.0]  # this rank's sums, no signal, no wait of its own
    assert trainer.sums == {"count": 64.0, "loss": 40.0 / 64} and trainer.clock.next == 19


def test_a_non_finite_loss_is_named_by_its_step(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    trainer.pending = [(4, 32, [], torch.tensor([3.2], dtype=torch.float64)),
                       (5, 32, [], torch.tensor([float("inf")], dtype=torch.float64))]
    with pytest.raises(TrainingError) as caught:
        trainer.sync()
    assert str(caught.value) == (f"the loss became inf at step 6; stopping. The last good checkpoint is kept in "
                                 f"{trainer.run_dir}/checkpoints (try a lower --lr or --grad-clip)")
