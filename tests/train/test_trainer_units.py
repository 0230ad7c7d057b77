"""Trainer methods one rule at a time on a tiny real trainer, without a training run: a step as one
AdamW step on its global batch (chunks weighted by their share, empty ones by 0), a sync's sums and
timing, an evaluation's metrics line, a time budget's fit (rank 0's figure on every rank, a line only
for a change of more than 1%), stops, the plan written and settled, FSDP's plain copy, the pictures.
Other ranks are stood in for by Distributed subclasses that answer as a process group would."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

import anyformer.train.trainer as trainer_module
from anyformer.train.distributed import Distributed

from .conftest import StandInRank, make_trainer, tiny_config


class _Budget:
    """A budget whose fit is `fitted`, recording what it was asked."""

    seconds = 3600.0

    def __init__(self, fitted: int) -> None:
        self.fitted, self.asked = fitted, []
        self.started: list[tuple[int, float]] = []

    def fit(self, step, elapsed, eval_every, current, asked):
        self.asked.append((step, elapsed, eval_every, current, asked))
        return self.fitted

    def start(self, step, elapsed):
        self.started.append((step, elapsed))


class _Bar:
    """A progress bar (tqdm's calls) that records what the run does with it."""

    def __init__(self, total: int = 0) -> None:
        self.total, self.lines = total, []
        self.updates, self.postfixes, self.closed = [], [], False

    def update(self, n) -> None:
        self.updates.append(n)

    def set_postfix(self, fields=None, refresh=True) -> None:
        self.postfixes.append((fields, refresh))

    def write(self, line: str) -> None:
        self.lines.append(line)

    def close(self) -> None:
        self.closed = True


def _record_syncs(t) -> list[int]:
    """The steps after which `t` reads its pending sums, filled in as it runs."""
    read, sync = [], t.sync
    t.sync = lambda: (read.append(t.step), sync())[1]
    return read


@pytest.fixture
def trainer(tmp_path, mnist_slice):
    # 2,000 examples in batches of 32: 63 steps per epoch, 126 steps asked.
    return make_trainer(tiny_config(tmp_path, epochs=2), mnist_slice)


def test_the_fit_sets_the_steps_and_the_bar_and_says_so(trainer, capsys) -> None:
    trainer.budget, trainer.step, trainer.elapsed = _Budget(80), 10, 4.5
    assert trainer.total_steps == 126 and trainer.eval_every == 63
    bar = _Bar(126)
    trainer._fit_budget(bar)
    assert trainer.budget.asked == [(10, 4.5, 63, 126, 126)]
    assert trainer.total_steps == 80 and bar.total == 80
    assert bar.lines == ["time budget 3600 s: 80 steps (1.27 epochs) instead of 126"]
    trainer.budget.fitted = 76
    trainer._fit_budget(bar)  # 4 of the 80 said: within a tenth, followed silently
    assert trainer.total_steps == 76 and bar.total == 76 and len(bar.lines) == 1
    trainer.budget.fitted = 60
    trainer._fit_budget(None)  # 20 of the 80 said: said again, without a bar printed
    assert trainer.total_steps == 60
    assert capsys.readouterr().out == "time budget 3600 s: 60 steps (0.95 epochs) instead of 80\n"


def test_a_change_of_one_percent_or_less_is_made_silently(trainer) -> None:
    trainer.budget, trainer.total_steps = _Budget(990), 1000
    bar = _Bar(1000)
    trainer._fit_budget(bar)
    assert trainer.total_steps == 990 and bar.total == 990 and bar.lines == []
    trainer.budget.fitted = 1000  # back up by 10 of 990: 1.01%, said (nothing was said before)
    trainer._fit_budget(bar)
    assert bar.lines == ["time budget 3600 s: 1000 steps (15.87 epochs) instead of 990"]


def test_the_fit_stops_once_the_steps_are_done(trainer) -> None:
    trainer.budget, trainer.step, trainer.total_steps = _Budget(500), 126, 126
    trainer._fit_budget(None)
    assert trainer.budget.asked == [] and trainer.total_steps == 126
    trainer.step = 125
    trainer._fit_budget(None)
    assert trainer.total_steps == 500


def test_under_torchrun_every_rank_takes_rank_zeros_fit(trainer, capsys) -> None:
    trainer.budget = _Budget(77)  # this rank's own fit, which it must not use
    trainer.dist = StandInRank(rank=1, world=2, others=90.0)
    bar = _Bar(126)
    trainer._fit_budget(bar)
    (sent,) = trainer.dist.summed
    assert sent.dtype == torch.float64 and sent.tolist() == [0.0]  # a rank other than 0 adds nothing
    assert trainer.total_steps == 90 and bar.total == 90
    assert bar.lines == [] and capsys.readouterr().out == ""  # rank 0 alone says it
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    trainer._fit_budget(bar)
    assert trainer.dist.summed[0].tolist() == [77.0] and trainer.total_steps == 77 and len(bar.lines) == 1


def test_the_pictures_are_drawn_from_the_last_evaluation_of_the_average_where_there_is_one(tmp_path,
                                                                                          mnist_slice) -> None:
    for ema in (None, 0.5):
        t = make_trainer(tiny_config(tmp_path / str(ema), ema=ema), mnist_slice)
        t.files.prepare(False)
        drawn = []
        t.task.draw = lambda model, result, run_dir: drawn.append((model, result, run_dir))
        t.last_eval = {"eval_accuracy": 0.25}
        t._draw(t.run_dir)
        assert drawn == [(t.model if ema is None else t.ema.model, {"eval_accuracy": 0.25}, t.run_dir)]


def test_a_new_run_starts_with_no_time_no_loss_no_evaluation_and_no_stop(trainer, monkeypatch) -> None:
    from anyformer.train import progress
    trainer.budget = _Budget(126)
    monkeypatch.setattr(trainer, "_settle_step_plan", lambda: None)
    trainer.tune()
    assert trainer.budget.started == [(0, 0.0)]  # the budget counts from no seconds trained
    assert "loss" not in progress.bar_fields(trainer, 10.0, 1.0)  # no loss shown before the first sync
    assert trainer.last_eval is None  # what makes a run resumed after its end evaluate once more
    assert trainer.signals.escalate  # one process: a second Ctrl-C stops at once (torchrun's agent does it)
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    assert not trainer._should_stop()  # under torchrun: no stop agreed before the first sync


def test_a_run_resumed_after_its_last_step_evaluates_once_and_draws_from_that(tmp_path, mnist_slice) -> None:
    import dataclasses
    cfg = tiny_config(tmp_path, max_steps=1, limit_train=64, limit_eval=16)
    make_trainer(cfg, mnist_slice).run()
    t = make_trainer(dataclasses.replace(cfg, resume=True, plots=True), mnist_slice)
    drawn = []
    t.task.draw = lambda model, result, run_dir: drawn.append(result)
    t.run()
    assert t.step == 1 and len(drawn) == 1 and drawn[0] is t.last_eval and "eval_accuracy" in drawn[0]


def test_the_first_step_is_read_at_once_then_when_a_sync_is_due(tmp_path, mnist_slice, monkeypatch) -> None:
    """The loss of the first step is read at once (the bar shows it, and the sync times the steps
    from there); later steps wait for the sync due, at the latest the evaluation's."""
    monkeypatch.setattr(trainer_module, "SYNC_SECONDS", 1e9)  # every sync asks for the longest wait
    t = make_trainer(tiny_config(tmp_path, max_steps=4, limit_train=128, limit_eval=16), mnist_slice)
    read = _record_syncs(t)
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
    read, real_step = _record_syncs(t), t.train_step
    # Ctrl-C after step 3 (conftest's interrupt_at sends SIGTERM): the stop names the signal that came.
    t.train_step = lambda: (real_step(), t.step == 3 and os.kill(os.getpid(), signal.SIGINT))[0]
    with pytest.raises(Interrupted) as info:
        t.run()
    assert read == [1, 3] and t.sums["steps"] == 3
    from anyformer.train.checkpoint import checkpoint_path
    saved = checkpoint_path(t.run_dir, 3)
    assert str(info.value) == (f"stopped by signal SIGINT after step 3; checkpoint {saved} written, "
                               f"continue with --resume")


def test_tune_starts_the_budget_at_the_runs_step_and_time(trainer, monkeypatch) -> None:
    trainer.budget, trainer.step, trainer.elapsed = _Budget(126), 3, 1.25
    settled = []
    monkeypatch.setattr(trainer, "_settle_step_plan", lambda: settled.append(True))
    assert isinstance(trainer.tune(), dict)
    assert trainer.budget.started == [(3, 1.25)] and settled == [True]


def test_the_run_directory_is_where_the_pictures_go(trainer, tmp_path: Path) -> None:
    trainer.files.prepare(False)
    where = []
    trainer.task.draw = lambda model, result, run_dir: where.append(run_dir)
    trainer._draw(tmp_path / "elsewhere")
    assert where == [tmp_path / "elsewhere"]


def test_an_evaluation_writes_the_periods_means_and_starts_a_new_period(trainer) -> None:
    """train_loss is the mean of the period's step losses, the rate its items over its seconds, the
    epoch the step over the steps per epoch (4 places), lr the rate of the step just taken."""
    from anyformer.train.optim import lr_at
    trainer.files.prepare(False)
    trainer.task.evaluate = lambda model, dist: {"eval_accuracy": 0.5, "confusion": torch.eye(2)}
    trainer.step, trainer.elapsed = 10, 12.3456
    trainer.sums = {"loss": 3.0, "steps": 4, "items": 100, "seconds": 0.5, "correct": 40, "count": 128}
    line = trainer.evaluate()
    assert line == {"step": 10, "epoch": 0.1587, "train_loss": 0.75, "train_accuracy": 40 / 128,
                    "eval_accuracy": 0.5, "lr": lr_at(9, 126, trainer.cfg), "images_per_s": 200.0, "time": 12.35}
    assert lr_at(9, 126, trainer.cfg) != lr_at(11, 126, trainer.cfg)
    assert trainer.sums == {} and trainer.metrics_lines == 1
    assert set(trainer.last_eval) == {"eval_accuracy", "confusion"}
    assert trainer.files.read_metrics() == [line]
    trainer.sums = {"loss": 0.6, "steps": 1}  # one step: its own loss
    assert trainer.evaluate()["train_loss"] == 0.6
    trainer.sums = {}  # no step since the last evaluation (a resumed run's final one): zeros, not a failure
    empty = trainer.evaluate()
    assert (empty["train_loss"], empty["images_per_s"]) == (0.0, 0.0)


def test_an_evaluation_needs_the_steps_read_first(trainer) -> None:
    trainer.pending.append((0, 32, [], torch.zeros(1)))
    with pytest.raises(RuntimeError, match=r"^evaluate\(\) needs the steps' sums read first \(sync\)$"):
        trainer.evaluate()


def test_an_ema_run_is_scored_on_its_average(tmp_path, mnist_slice) -> None:
    t = make_trainer(tiny_config(tmp_path, ema=0.5), mnist_slice)
    scored = []
    t.task.evaluate = lambda model, dist: scored.append(model) or {}
    t._evaluate_task()
    assert scored == [t.ema.model] and t.ema.model is not t.model


def test_the_peak_is_measured_once_for_the_runs_precision(trainer, monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(trainer_module, "peak_flops",
                        lambda device, amp: asked.append((device, amp)) or (5e9, "measured"))
    trainer.cfg.amp = "bf16"
    assert trainer.peak() == 5e9 and trainer.peak_source() == "measured" and trainer.peak() == 5e9
    assert asked == [(trainer.device, "bf16")]


def test_the_plan_is_written_into_the_run_and_a_failed_write_is_named(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    from anyformer.train.runplan import PLAN_FILE
    trainer.files.prepare(False)
    trainer.write_plan()
    assert json.loads((trainer.run_dir / PLAN_FILE).read_text()) == json.loads(json.dumps(trainer.step_plan.state()))
    (trainer.run_dir / PLAN_FILE).unlink()
    (trainer.run_dir / PLAN_FILE).mkdir()  # a folder where the file goes: the write fails
    with pytest.raises(TrainingError, match=rf"^cannot write the plan {trainer.run_dir / PLAN_FILE}: "):
        trainer.write_plan()


def test_under_fsdp_the_plain_model_is_one_cpu_copy_of_the_gathered_weights(trainer) -> None:
    """Built once, without moving the training random state, and refilled with the weights each time."""
    trainer.dist = Distributed(fsdp=True)  # one rank: the gather is the model's own full state
    state = torch.get_rng_state()
    copy = trainer._plain_model()
    assert torch.equal(torch.get_rng_state(), state)
    assert copy is not trainer.model and type(copy) is type(trainer.model) and copy.config == trainer.model.config
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(copy.state_dict()[k], v), k
    with torch.no_grad():
        next(trainer.model.parameters()).add_(1.0)
    assert trainer._plain_model() is copy
    assert torch.equal(next(copy.parameters()), next(trainer.model.parameters()))
    drawn = []  # the pictures are drawn from that copy: rank 0's shard alone is not a model
    trainer.task.draw = lambda model, results, run_dir: drawn.append(model)
    trainer._draw_on_main(trainer.run_dir)
    assert drawn == [copy]


def test_an_evaluation_runs_on_the_gathered_weights(trainer) -> None:
    """Under FSDP each rank holds a shard; the evaluation's forwards need them whole."""
    gathered = []
    trainer.dist.gathered = lambda model: (gathered.append(model), contextlib.nullcontext())[1]
    trainer.last_eval = trainer._evaluate_task()
    assert gathered == [trainer.model] and "eval_accuracy" in trainer.last_eval


def test_the_step_plan_is_settled_only_for_steps_still_to_run(trainer, monkeypatch) -> None:
    """Measured on stand-ins shaped like the step's first chunk, by the task's loss on them."""
    from anyformer.train.planning import stand_ins
    settled = []

    def settle(model, forward_model, step_loss, example, **kw):
        chunk = stand_ins(trainer.task, trainer.step, trainer.dist, trainer.cfg)
        assert model is trainer.model and forward_model is trainer.forward_model and torch.equal(example, chunk[0])
        assert torch.equal(step_loss(trainer.model), trainer.task.loss(trainer.model, chunk)[0])
        settled.append(kw)
    monkeypatch.setattr(trainer.step_plan, "settle", settle)
    trainer.step = trainer.total_steps  # the run is done: nothing left to measure for
    trainer._settle_step_plan()
    assert settled == []
    trainer.step = trainer.total_steps - 1
    trainer._settle_step_plan()
    assert settled == [{"steps_left": 1, "seconds_left": None}]
    trainer.budget = _Budget(126)
    trainer.budget.left = lambda: 42.0
    trainer._settle_step_plan()
    assert settled[-1] == {"steps_left": 1, "seconds_left": 42.0}
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)  # under torchrun only --compile is settled
    trainer._settle_step_plan()
    assert len(settled) == 2


def test_a_stop_is_the_signal_alone_but_under_torchrun_the_agreed_one(trainer) -> None:
    trainer.signals.received, trainer._stop_agreed = signal.SIGTERM, False
    assert trainer._should_stop()  # one process: its own signal
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    assert not trainer._should_stop()  # seen here, not yet agreed at a sync
    trainer.signals.received, trainer._stop_agreed = None, True
    assert trainer._should_stop()  # another rank's signal, agreed


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


def test_a_sync_reads_the_pending_steps_in_order_and_times_the_next(trainer, monkeypatch) -> None:
    from anyformer.train.progress import SYNC_SECONDS
    monkeypatch.setattr(trainer_module, "time", _Clock(105.0))
    trainer.step, trainer._synced = 12, (2, 104.5)  # 10 steps in 0.5 s since the last sync
    trainer.sums = {"correct": 1.0}
    trainer.pending = [(10, 32, ["correct", "count"], torch.tensor([16.0, 20.0, 32.0], dtype=torch.float64)),
                       (11, 32, ["correct", "count"], torch.tensor([8.0, 25.0, 32.0], dtype=torch.float64))]
    trainer.sync()
    assert trainer.sums == {"correct": 46.0, "count": 64.0, "loss": 0.75}
    assert trainer.last_loss == 0.25 and trainer.pending == [] and trainer._synced == (12, 105.0)
    assert trainer._next_sync == 12 + int(SYNC_SECONDS * 10 / 0.5) and not trainer._stop_agreed
    trainer.step, trainer.signals.received = 13, 15  # a signal, and a step of a microsecond: as many as allowed
    monkeypatch.setattr(trainer_module, "time", _Clock(105.000001))
    trainer.sync()
    assert trainer._stop_agreed and trainer._next_sync == 13 + trainer_module.MAX_SYNC_STEPS
    monkeypatch.setattr(trainer_module, "time", _Clock(1105.001))  # a step of 1000 s: the next sync comes next
    trainer.step = 14
    trainer.sync()
    assert trainer._next_sync == 15


def test_under_torchrun_a_sync_adds_every_ranks_sums_and_takes_rank_zeros_timing(trainer, monkeypatch) -> None:
    monkeypatch.setattr(trainer_module, "time", _Clock(105.0))
    trainer.step, trainer._synced = 12, (2, 100.0)
    trainer.pending = [(11, 64, ["count"], torch.tensor([16.0, 32.0], dtype=torch.float64))]
    # rank 0 sent its loss sum and count, no signal, and its wait of 7 steps
    trainer.dist = StandInRank(rank=1, world=2, others=torch.tensor([24.0, 32.0, 0.0, 7.0], dtype=torch.float64))
    trainer.sync()
    (sent,) = trainer.dist.summed
    assert sent.tolist() == [16.0, 32.0, 0.0, 0.0]  # this rank's sums, no signal, no wait of its own
    assert trainer.sums == {"count": 64.0, "loss": 40.0 / 64} and trainer._next_sync == 19


def test_a_non_finite_loss_is_named_by_its_step(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    trainer.pending = [(4, 32, [], torch.tensor([3.2], dtype=torch.float64)),
                       (5, 32, [], torch.tensor([float("inf")], dtype=torch.float64))]
    with pytest.raises(TrainingError) as caught:
        trainer.sync()
    assert str(caught.value) == (f"the loss became inf at step 6; stopping. The last good checkpoint is kept in "
                                 f"{trainer.run_dir}/checkpoints (try a lower --lr or --grad-clip)")


@pytest.mark.parametrize("grad_accum, step", [(1, 0), (4, 62), (8, 62)])
def test_a_step_is_one_adamw_step_on_the_mean_loss_of_its_global_batch(tmp_path, mnist_slice, grad_accum, step) -> None:
    """1,990 examples in batches of 32: step 62 is the epoch's last, of 6 examples, in chunks of 2, 2,
    1 and 1 (grad_accum 4), each weighted by its share of the 6, or six chunks of 1 and two empty ones
    (grad_accum 8, which run a stand-in example weighted 0): the same update as one pass over the
    whole batch, at the schedule's rate for the step; the loss sum and the stats wait on the device,
    the period's steps and images are counted."""
    import copy

    from anyformer.train.optim import lr_at, make_optimizer
    t = make_trainer(tiny_config(tmp_path, grad_accum=grad_accum, warmup_steps=3, grad_clip=0.05, limit_train=1990,
                                 model_overrides={**tiny_config(tmp_path).model_overrides, "dropout": 0.0}),
                     mnist_slice)
    reference = copy.deepcopy(t.model)
    optimizer = make_optimizer(reference, t.cfg)
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, t.total_steps, t.cfg)
    (x, y), n = t.task.batch(step)
    loss, stats = t.task.loss(reference, (x, y))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    optimizer.step()
    t.step = step
    t.train_step()
    assert t.step == step + 1 and t.sums == {"steps": 1, "items": n} and n == (32 if step == 0 else 6)
    for (name, a), b in zip(t.model.named_parameters(), reference.parameters()):
        # Adam's first update is about lr * sign(g): a gradient near 0 may flip sign between the two
        # orders of summation (a last-bit difference), moving that weight by far less than 1e-5; a
        # chunk weighted wrongly turns whole gradients and moves weights by about the rate, 3e-3.
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)
    ((pending_step, n_global, keys, sums),) = t.pending
    assert (pending_step, n_global, keys) == (step, n, ["correct", "count"]) and sums.dtype == torch.float64
    torch.testing.assert_close(sums, torch.tensor([loss.item() * n, float(stats["correct"]), float(n)],
                                                  dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert all(p.grad is None for p in t.model.parameters())  # zeroed for the next step


@pytest.mark.parametrize("rank, world, limit_train, grad_accum, source", [(2, 3, 1985, 1, 0), (1, 2, 1991, 4, 1)])
def test_a_chunk_without_examples_runs_a_stand_in_weighted_zero(tmp_path, mnist_slice, rank, world, limit_train,
                                                               grad_accum, source) -> None:
    """Every rank runs every chunk (FSDP gathers the weights in each forward), with or without
    examples. Step 62 is the epoch's last: of 1 example (1,985 in batches of 32), which rank 0 of 3
    takes, leaving rank 2 none: its chunk runs rank 0's first example; of 7 examples (1,991), of
    which rank 1 of 2 takes 3 for 4 chunks: its empty chunk runs its first example again, alone. A
    stand-in weighs 0: no gradient, no loss, no stats."""
    t = make_trainer(tiny_config(tmp_path, limit_train=limit_train, grad_accum=grad_accum), mnist_slice)
    t.dist = StandInRank(rank=rank, world=world)
    ran, loss = [], t.task.loss
    t.task.loss = lambda m, chunk: (ran.append(chunk), loss(m, chunk))[1]
    grads, update = [], t.optimizer.step
    t.optimizer.step = lambda: (grads.extend(p.grad.clone() for p in t.model.parameters()), update())[1]
    (mine, _), n_global = t.task.batch(62, rank, world)
    (theirs, _), _ = t.task.batch(62, source, world)
    t.step = 62
    t.train_step()
    assert len(ran) == grad_accum and len(mine) == grad_accum - 1
    # the gradient all-reduce is held back on every chunk but the last
    assert t.dist.held == [(t.forward_model, i == grad_accum - 1) for i in range(grad_accum)]
    stand_in = ran[-1][0]
    assert stand_in.shape[0] == 1 and torch.equal(stand_in, theirs[:1])
    ((_, pending_global, _, sums),) = t.pending
    assert pending_global == n_global == limit_train - 1984
    if not len(mine):  # the stand-in alone ran: nothing to learn from, nothing to count
        assert all(not g.any() for g in grads) and not sums.any()
    else:  # the real chunks' alone
        assert sums[-1].item() == len(mine)  # "count": the real examples', not the stand-in's


def test_a_chunk_runs_on_the_compiled_module_the_plan_holds_for_its_inputs(tmp_path, mnist_slice) -> None:
    """The step plan compiles per input shape (`module_for`); a chunk it has a module for runs on
    that module, asked with the chunk's images, not its labels."""
    t = make_trainer(tiny_config(tmp_path, grad_accum=2), mnist_slice)
    asked, calls = [], []

    class Compiled(torch.nn.Module):  # what the plan's compile of the model would answer
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            calls.append(x.shape)
            return self.model(x)
    compiled = Compiled(t.model)
    t.step_plan.module_for = lambda x: (asked.append(x), compiled)[1]
    t.train_step()
    (x, _), _ = t.task.batch(0)
    assert len(asked) == 2 and torch.equal(torch.cat(asked), x)
    assert calls == [(16, 1, 28, 28)] * 2


def test_a_steps_loss_is_summed_over_its_chunks_in_float64(tmp_path, mnist_slice) -> None:
    """Step 62's 6 examples in chunks of 2, 2, 1 and 1, each scoring fp32 1/3 (24 bits of mantissa):
    their sum weighted by the chunks' sizes needs 26 bits, exact in float64 and rounded in float32."""
    t = make_trainer(tiny_config(tmp_path, grad_accum=4, limit_train=1990), mnist_slice)
    third, loss = torch.tensor(1 / 3), t.task.loss
    t.task.loss = lambda m, chunk: (lambda l, s: (l - l.detach() + third, s))(*loss(m, chunk))
    t.step = 62
    t.train_step()
    ((_, n_global, _, sums),) = t.pending
    assert n_global == 6 and sums[0].item() == third.item() * 6 != float(third * 6)
    t.sync()
    assert t.last_loss == third.item() * 6 / 6


def test_a_run_asks_its_max_steps_or_its_epochs_and_at_least_one_step(tmp_path, mnist_slice) -> None:
    """63 steps per epoch: 1.5 epochs ask round(94.5) = 94 steps; 0.001 epochs round to none: one."""
    for kw, steps in ((dict(epochs=1.5), 94), (dict(epochs=0.001), 1), (dict(epochs=3, max_steps=7), 7)):
        assert make_trainer(tiny_config(tmp_path / str(steps), **kw), mnist_slice)._steps_asked() == steps


def test_a_failed_drawing_is_named_with_the_run_directory(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    trainer.files.prepare(False)

    def full(model, result, run_dir):
        raise OSError(28, "No space left on device")
    trainer.task.draw = full
    with pytest.raises(TrainingError, match=rf"^cannot draw the pictures into {trainer.run_dir}: No space left"):
        trainer._draw(trainer.run_dir)


def test_a_step_adds_to_the_periods_counts_and_moves_the_average_by_its_number(tmp_path, mnist_slice) -> None:
    """The step's number sets the average's decay: step 7 is the 8th optimiser step, so the average
    moves 1 - min(0.9, (1 + 8) / (10 + 8)) = 0.5 of the way; items count each example's units (4 here)."""
    t = make_trainer(tiny_config(tmp_path, ema=0.9), mnist_slice)
    t.task.items_per_example = 4
    t.step, t.sums = 7, {"steps": 2, "items": 64}
    before = {k: v.clone() for k, v in t.ema.model.state_dict().items()}
    t.train_step()
    assert t.sums == {"steps": 3, "items": 64 + 32 * 4}
    assert t.ema.decay_at(8) == 0.5
    for k, v in t.model.state_dict().items():
        if v.is_floating_point():
            torch.testing.assert_close(t.ema.model.state_dict()[k], before[k] + 0.5 * (v - before[k]), msg=k)


class _Closing(Distributed):
    """One process that records how it was asked to leave its group."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[bool] = []

    def close(self, wait: bool = True) -> None:
        self.closed.append(wait)


@pytest.mark.parametrize("raised, wait", [(None, True), ("interrupted", True), ("other", False), ("lost", False)])
def test_a_run_leaves_its_group_waiting_for_the_others_unless_it_failed(trainer, monkeypatch, raised, wait) -> None:
    """A run that ended, or stopped by the agreed signal, leaves with the other ranks (a barrier); one
    that failed does not wait for ranks that may be gone, and a gloo transport failure is named as a
    lost rank in one line."""
    from anyformer.train import Interrupted
    from anyformer.train.rundir import TrainingError
    errors = {"interrupted": Interrupted(15, 3, None), "other": ValueError("bad"),
              "lost": RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer")}

    def run():
        if raised:
            raise errors[raised]
        return {"steps": 0}
    monkeypatch.setattr(trainer, "_run", run)
    trainer.dist = _Closing()
    trainer.step_plan.compiled = object()  # a compiled step over the wrapper
    trainer.forward_model = torch.nn.Identity()  # as DDP wraps the model
    if raised is None:
        assert trainer.run() == {"steps": 0}
    elif raised == "lost":
        with pytest.raises(TrainingError,
                           match=r"^another rank of the job stopped \(RuntimeError: \[\.\./gloo/transport"):
            trainer.run()
    else:
        with pytest.raises(type(errors[raised])):
            trainer.run()
    assert trainer.dist.closed == [wait]
    assert trainer.forward_model is trainer.model and trainer.step_plan.compiled is None


def test_a_run_writes_the_tasks_own_files_says_what_it_trains_and_starts_its_budget(tmp_path, mnist_slice,
                                                                                   capsys) -> None:
    from anyformer.train import progress
    t = make_trainer(tiny_config(tmp_path, max_steps=1, limit_eval=16, time_budget=3600), mnist_slice)
    t.task.run_files = lambda: {"tokenizer.json": b'{"kind": "test"}'}
    t.elapsed, started, start = 2.5, [], t.budget.start  # 2.5 s: as a resumed run's training seconds
    t.budget.start = lambda step, elapsed: (started.append((step, elapsed)), start(step, elapsed))
    intro = progress.intro(t)
    summary = t.run()
    assert json.loads((t.run_dir / "summary.json").read_text()) == summary and summary["resumed"] is False
    assert not any((t.run_dir / name).exists() for name in t.task.pictures)  # plots=False: nothing drawn
    assert (t.run_dir / "tokenizer.json").read_bytes() == b'{"kind": "test"}'
    assert started == [(0, 2.5)]
    out = capsys.readouterr().out
    assert out.startswith(intro + "\n") and "plan: replaying" not in out
    # One process is rank 0, which says the step plan's choices (the suite's plan forces them), then
    # without a bar prints each evaluation's line.
    lines = out.splitlines()
    assert lines[1:3] == ["linears: planned (linear=stock is forced for every layer)",
                          "compile: eager (compile=eager is forced)"]
    assert lines[3].startswith("step 1 | epoch 0.02 | train loss ") and "test acc" in lines[3]


def test_the_bar_moves_a_step_at_a_time_shows_the_read_loss_and_carries_the_evaluations(
        tmp_path, mnist_slice, monkeypatch, capsys) -> None:
    from anyformer.train import own_model, progress
    bar = _Bar()
    monkeypatch.setattr(progress, "progress_bar", lambda total, start, enabled: bar if enabled else None)
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=2, limit_train=64, limit_eval=16,
                                 progress=True), mnist_slice)
    fields = []
    real_fields = progress.bar_fields
    monkeypatch.setattr(progress, "bar_fields", lambda *a: (fields.append(a), real_fields(*a))[1])
    t.run()
    assert bar.updates == [1, 1] and bar.closed
    # Read at step 1 (the first step) and 2 (the evaluation): each time the fields of the sums read,
    # the loss among them, set without redrawing (tqdm redraws at its own pace).
    assert len(bar.postfixes) == 2 and all(refresh is False and "loss" in f for f, refresh in bar.postfixes)
    assert all(a[0] is t and a[1] > 0 and a[2] == own_model.flops_per_item(t.task, t.model) for a in fields)
    assert len(bar.lines) == 1 and bar.lines[0].startswith("step 2 | epoch ")  # above the bar, not printed
    assert "step 2 | epoch " not in capsys.readouterr().out


def test_a_budgets_new_step_count_is_written_above_the_bar_and_moves_its_end(tmp_path, mnist_slice, monkeypatch,
                                                                            capsys) -> None:
    from anyformer.train import progress
    bar = _Bar()
    monkeypatch.setattr(progress, "progress_bar", lambda total, start, enabled: bar if enabled else None)
    t = make_trainer(tiny_config(tmp_path, max_steps=4, eval_every=1, limit_train=64, limit_eval=16,
                                 time_budget=3600, progress=True), mnist_slice)
    t.budget.fit = lambda *asked: 2  # after step 1's evaluation: time for 2 steps, not 4
    t.run()
    assert t.step == t.total_steps == bar.total == 2
    assert "time budget 3600 s: 2 steps (1.00 epochs) instead of 4" in bar.lines
    assert "time budget" not in capsys.readouterr().out


def test_the_time_budget_is_told_how_long_each_evaluation_took(tmp_path, mnist_slice) -> None:
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=1, limit_train=64, limit_eval=16,
                                 time_budget=3600), mnist_slice)
    told, evaluate = [], t._evaluate_task
    t.budget.evaluated = told.append
    t._evaluate_task = lambda: (time.sleep(0.3), evaluate())[1]  # each evaluation: 0.3 s at least
    wall = time.perf_counter()
    t.run()
    wall = time.perf_counter() - wall
    # each evaluation's own time: at least its sleep, and (the two being disjoint) together within the run
    assert len(told) == 2 and all(seconds >= 0.3 for seconds in told) and sum(told) <= wall


@pytest.mark.parametrize("each", [False, True])
def test_pictures_are_drawn_at_the_end_or_at_every_evaluation_where_the_task_asks(tmp_path, mnist_slice,
                                                                                   each) -> None:
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=1, limit_train=64, limit_eval=16,
                                 plots=True), mnist_slice)
    drawn = []
    t.task.draw = lambda model, result, run_dir: drawn.append((t.step, run_dir))
    if each:
        t.task.draw_each_evaluation = True  # as the flow task asks: its samples after every evaluation
    t.run()
    assert drawn == [(step, t.run_dir) for step in ([1, 2, 2] if each else [2])]
