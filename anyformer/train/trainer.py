"""The training loop shared by every task: optimise, evaluate, log, checkpoint, resume.

The trainer names no task: what differs between tasks (batches, loss, stats, metrics, evaluation,
summary, pictures) is asked of `self.task` through the protocol in `protocol.py`.

The loss and the task's stats stay on the device. The host reads them only at a sync: about every
SYNC_SECONDS (the progress bar's refresh), before every evaluation and checkpoint, and when a
signal asks to stop. A non-finite loss is found at the next sync, named by its step, and stops the
run before anything is written after it. Under torchrun every rank runs this same loop on its share
of each global batch; a sync is one all-reduce of the pending steps' sums with every rank's stop
flag, so all ranks see the same numbers and stop after the same step.
"""
from __future__ import annotations

import gc
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data.transfer import float64_on
from ..models import Model
from . import checkpoint, elastic, estimate, outputs, own_model, progress
from .build import build_model, pick_device, set_threads
from .checkpoint import CKPT_DIR
from .config import TrainConfig
from .distributed import Distributed
from .ema import EMA
from .kept import KeptWeights
from .optim import clip_grad_norm, lr_at, make_optimizer
from .perf import Peak
from .planning import StepPlan, adamw_kernel, prepare_for_training, stand_ins
from .precision import autocast, deterministic_kernels, fast_fp32_matmuls, make_scaler, settle_amp
from .protocol import Task
from .resume import check_fresh_out, check_resume, recorded_settings, resumes
from .runplan import PLAN_FILE, write_plan
from .rundir import RunDir, TrainingError
from .sam import passes_per_step, sharpness_aware
from .signals import Interrupted, StopSignals
from .timebudget import TimeBudget, fit_run
from .tasks import make_task, task_pictures

__all__ = ["Trainer", "TrainingError", "Interrupted", "build_model", "pick_device"]

SYNC_SECONDS = progress.SYNC_SECONDS
MAX_SYNC_STEPS = 1000   # however fast the steps, the steps awaiting a read stay few


@dataclass(frozen=True)
class SyncClock:
    """The last sync (its step and time), the step at which the next is due, and whether the ranks agreed
    there to stop."""
    step: int = 0
    time: float = 0.0
    next: int = 0
    stop: bool = False


class Trainer:
    def __init__(self, cfg: TrainConfig, task: Task | None = None, model: nn.Module | None = None) -> None:
        """`model`: a module of your own to train instead of the preset `cfg.model` names (`fit`)."""
        self.cfg = cfg
        self._own_model = model
        self.dist = Distributed.from_env(pick_device(cfg.device), cfg.fsdp)
        self.device = self.dist.device
        elastic.announce(self.dist)
        self.run_dir = Path(cfg.out or f"runs/{cfg.recipe}")
        if cfg.resume == "auto":  # the command line decides this itself, to resume with the recorded settings
            cfg.resume = resumes(self.run_dir)
        elastic.check_same_run(self.dist, cfg.to_dict())
        check_fresh_out(self.run_dir, cfg.resume, cfg.overwrite, self.dist.restarts > 0)  # nothing is lost by mistake
        recorded = recorded_settings(self.run_dir) if cfg.resume else None
        if recorded is not None:
            check_resume(self.run_dir, recorded, cfg.to_dict())
        self.scaler = make_scaler(cfg.amp, self.device)  # refuses fp16 off CUDA before any data is read
        fast_fp32_matmuls(self.device)
        if cfg.deterministic:
            deterministic_kernels()
        set_threads(cfg.threads, self.dist, self.device)
        # The plan in force: replayed from the run (--resume) or another (--plan PATH), else made now;
        # every decision from here on is taken inside `self.step_plan.scope()`, which records and pins it.
        self.step_plan = StepPlan(cfg, self.run_dir, self.device, announce=self.dist.is_main)
        with self.step_plan.scope():
            self._build(task)
        self.files = RunDir(self.run_dir, self.dist, task_pictures(), log=self.cfg.log)
        spe = self.task.steps_per_epoch
        self.total_steps = self.steps_asked()  # a --time-budget may fit it lower as the run goes
        self.budget = TimeBudget(cfg.time_budget) if cfg.time_budget else None
        self.eval_every = cfg.eval_every or spe
        self.step = 0
        self.sums: dict[str, float] = {}  # since the last evaluation, as read at the last sync
        self.metrics_lines = 0
        self.elapsed = 0.0
        self.last_line: dict[str, Any] = {}
        self.last_eval: dict[str, Any] | None = None
        self.last_loss: float | None = None
        self.signals = StopSignals(escalate=not self.dist.enabled)  # torchrun's agent escalates
        self.pending: list[tuple[int, int, list[str], Tensor]] = []  # (step, global batch, stat names, sums)
        self.clock = SyncClock()
        self.saved_step: int | None = None
        self.cpu_copy: Model | None = None  # under FSDP, the model's one CPU copy (outputs.py)
        self.peak = Peak(self.device, cfg)  # the FLOP/s the MFU divides by, measured when first asked
        self.kept = KeptWeights()  # the best evaluation's weights, where the task holds rows back to choose

    def _build(self, task: Task | None) -> None:
        """The task, the model, its precision and its optimiser (the decisions they need are the plan's)."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.task = task or make_task(cfg, self.device)
        if self._own_model is None:
            self.model = build_model(cfg, self.task, self.device, self.dist.world if self.dist.fsdp else 1)
        else:
            self.model = own_model.adopt(self._own_model, self.task, self.device, self.dist.fsdp)
        self.model.to(self.device)
        if cfg.select_fraction and self.dist.fsdp:
            raise ValueError("--select-fraction keeps a copy of the best weights on each rank; it does not combine "
                             "with --fsdp")
        if cfg.ema and self.dist.fsdp:
            raise ValueError("--ema keeps a full copy of the weights on each rank; it does not combine with --fsdp")
        if cfg.sam and self.dist.fsdp:
            raise ValueError("--sam copies and moves the whole weights each step; it does not combine with --fsdp")
        if cfg.sam and self.scaler is not None:
            raise ValueError("--sam climbs along the unscaled gradient; it does not combine with --amp fp16 "
                             "(use bf16 or none)")
        torch.manual_seed(cfg.seed + self.dist.rank)  # but each rank its own dropout masks
        size = own_model.model_size(self.model)  # `auto` precision measured at this size, with the run's threads
        # Under torchrun rank 0 measures and every rank takes its answer: ranks that timed each other's
        # load could settle on different precisions.
        amp = settle_amp(cfg.amp, self.device, **size) if self.dist.is_main else None
        if self.dist.enabled:
            settle_amp(cfg.amp, self.device, **size, decided=self.dist.broadcast(amp))
        prepare_for_training(self.model, self.task, self.dist, self.cfg)
        self.ema = EMA(self.model, cfg.ema) if cfg.ema else None  # what is evaluated and saved, when asked for
        self.forward_model: nn.Module = self.dist.wrap(self.model)
        # After wrapping: FSDP replaces the parameters with sharded ones, which the optimiser must hold.
        self.optimizer = make_optimizer(self.model, cfg, adamw_kernel(self.model, cfg, self.device))
        self.trained = list(self.model.parameters())  # what each step clips: the same tensors the optimiser holds

    # ---------------------------------------------------------------- the plan
    def tune(self) -> dict[str, Any]:
        """The plan this run would train with, made now without training a step: its precision,
        optimiser and per-shape kernels, and the training step's linears and compile (measured on a
        forward and backward of stand-ins shaped like its first batch). Nothing is written; `train
        --plan FILE` replays it."""
        if self.budget is not None:  # a compile is judged against the budget the run would have
            self.budget.start(self.step, self.elapsed)
        with self.step_plan.scope():
            self._settle_step_plan()
        return self.step_plan.state()

    def write_plan(self) -> None:
        self.files.on_main("write the plan", self.run_dir / PLAN_FILE,
                           lambda: write_plan(self.run_dir, self.step_plan.state()))

    def _settle_step_plan(self) -> None:
        """The step-wide choices (linears, compile) before the step they serve (StepPlan.settle)."""
        if self.step >= self.total_steps or (self.dist.enabled and not self.cfg.compile):
            return  # under torchrun ranks would time each other's load: only --compile compiles
        chunk = stand_ins(self.task, self.step, self.dist, self.cfg)
        if not len(chunk[0]):
            return

        def step_loss(m: nn.Module) -> Tensor:
            with autocast(self.cfg.amp, self.device):
                return self.task.loss(m, chunk)[0]

        seconds = None if self.budget is None else self.budget.left()
        self.step_plan.settle(self.model, self.forward_model, step_loss, chunk[0],
                              steps_left=self.total_steps - self.step, seconds_left=seconds)

    # ---------------------------------------------------------------- the loop
    def train_step(self) -> None:
        """One optimiser step on the step's global batch; its loss and stats wait on the device."""
        cfg, step, world = self.cfg, self.step, self.dist.world
        lr = lr_at(step, self.total_steps, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        batch, n_global = self.task.batch(step, self.dist.rank, world)
        # Every rank runs the same number of chunks (FSDP gathers weights in each forward). A chunk
        # left empty (more chunks or ranks than examples) runs a stand-in example with weight 0.
        spare = tuple(t[:1] for t in (batch if len(batch[0]) else self.task.batch(step, 0, world)[0]))
        loss_sum, stats = self._forward_backward(batch, spare, n_global)
        keys = sorted(stats)
        self.pending.append((step, n_global, keys, torch.stack([loss_sum, *(stats[k] for k in keys)])))
        if cfg.sam:  # the step's gradient taken again at the ascent point (the loss reported is at the weights)
            sharpness_aware(self.model, cfg.sam, lambda: self._forward_backward(batch, spare, n_global))
        if self.scaler is not None and cfg.grad_clip:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        if cfg.grad_clip:
            clip_grad_norm(self.trained, cfg.grad_clip)
        if self.scaler is None:
            self.optimizer.step()
        else:  # skips the update if a gradient overflowed, then adjusts the scale
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model, step + 1)
        self.sums["steps"] = self.sums.get("steps", 0) + 1
        # Throughput counts images or tokens; n_global counts examples (sequences, for a language model).
        self.sums["items"] = self.sums.get("items", 0) + n_global * self.task.items_per_example
        self.step += 1

    def _forward_backward(self, batch: tuple[Tensor, ...], spare: tuple[Tensor, ...],
                          n_global: int) -> tuple[Tensor, dict[str, Tensor]]:
        """The step's forward and backward passes, chunk by chunk, adding into .grad: the loss summed over
        this rank's examples and the task's stats (on the device)."""
        cfg, world = self.cfg, self.dist.world
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        stats: dict[str, Tensor] = {}
        for i, chunk in enumerate(zip(*(torch.tensor_split(t, cfg.grad_accum) for t in batch))):
            real = len(chunk[0])
            compiled = self.step_plan.module_for(chunk[0])
            model = self.forward_model if compiled is None else compiled
            with self.dist.grad_sync(self.forward_model, i == cfg.grad_accum - 1), autocast(cfg.amp, self.device):
                loss, chunk_stats = self.task.loss(model, chunk if real else spare)
                # Weight by this chunk's share of the global batch; DDP and FSDP average over ranks.
                weighted = loss * (real / n_global * world)
            (weighted if self.scaler is None else self.scaler.scale(weighted)).backward()
            loss_sum += loss.detach().double() * real
            for k, v in chunk_stats.items():
                stats[k] = stats.get(k, 0) + float64_on(v, self.device) * bool(real)
        return loss_sum, stats

    def sync(self) -> None:
        """Read the pending steps' sums into `self.sums` in step order (one copy to the host; under
        torchrun one all-reduce, which also carries the stop flags and rank 0's next sync step)."""
        now = time.perf_counter()
        steps, seconds = self.step - self.clock.step, now - self.clock.time
        wait = min(MAX_SYNC_STEPS, max(1, int(SYNC_SECONDS * steps / max(seconds, 1e-9))))
        flags = torch.tensor([float(self.signals.received is not None), wait if self.dist.is_main else 0],
                             dtype=torch.float64, device=self.device)
        values = self.dist.sum(torch.cat([*(sums for *_, sums in self.pending), flags])).tolist()
        at = 0
        for step, n_global, keys, _ in self.pending:
            loss = values[at] / n_global
            if not math.isfinite(loss):
                raise TrainingError(f"the loss became {loss} at step {step + 1}; stopping. The last good checkpoint "
                                    f"is kept in {self.run_dir}/{CKPT_DIR} (try a lower --lr or --grad-clip)")
            for k, v in zip(keys, values[at + 1:at + 1 + len(keys)]):
                self.sums[k] = self.sums.get(k, 0) + v
            self.sums["loss"] = self.sums.get("loss", 0.0) + loss
            self.last_loss, at = loss, at + 1 + len(keys)
        self.pending.clear()
        self.clock = SyncClock(self.step, now, self.step + int(values[at + 1]), values[at] > 0)

    def _should_stop(self) -> bool:
        # Ranks may see a signal at different moments; they stop together after the sync that tells them all.
        return self.clock.stop if self.dist.enabled else self.signals.received is not None

    def _evaluate_task(self) -> dict[str, Any]:
        with self.dist.gathered(self.model):
            return self.task.evaluate(self.evaluated_model(), self.dist)

    def evaluate(self) -> dict[str, Any]:
        """Score the model, append the metrics line, and start the next period's sums (after a sync)."""
        if self.pending:
            raise RuntimeError("evaluate() needs the steps' sums read first (sync)")
        result = self._evaluate_task()
        sums, unit = self.sums, self.task.unit
        line = {"step": self.step, "epoch": round(self.step / self.task.steps_per_epoch, 4),
                "train_loss": sums.get("loss", 0.0) / max(1, sums.get("steps", 0)),
                **self.task.train_metrics(sums),
                **{k: v for k, v in result.items() if isinstance(v, (int, float))},
                "lr": lr_at(self.step - 1, self.total_steps, self.cfg),
                f"{unit}_per_s": sums.get("items", 0) / max(1e-9, sums.get("seconds", 1e-9)),
                "time": round(self.elapsed, 2)}
        self.sums = {}
        self.files.append_metrics(line)
        self.metrics_lines += 1
        self.last_eval = result
        return line

    def run(self) -> dict[str, Any]:
        try:
            with self.step_plan.scope():
                summary = self._run()
        except Interrupted:
            # A stop is agreed at a sync: every rank raises it after the same step, so they can leave
            # together. One rank tearing its process group down while another still uses it aborts both.
            self._leave_group(wait=True)
            raise
        except BaseException as e:
            self._leave_group(wait=False)  # the other ranks may be gone already
            if (lost := elastic.lost_rank(e)) is not None:
                raise TrainingError(lost) from None
            raise
        self._leave_group(wait=True)
        return summary

    def _leave_group(self, wait: bool) -> None:
        """Leave the process group and free what still holds it (DDP's reducer, the compiled step over
        it) while the interpreter runs: freed at its exit instead, gloo's worker threads can abort a
        process whose run ended well (SIGABRT, "terminate called without an active exception")."""
        self.dist.close(wait=wait)
        if self.forward_model is not self.model:
            self.forward_model = self.model
            self.step_plan.compiled = None
            gc.collect()  # DDP's hooks hold it in reference cycles

    def steps_asked(self) -> int:
        """The steps --max-steps or --epochs ask for."""
        return self.cfg.max_steps or max(1, round(self.cfg.epochs * self.task.steps_per_epoch))

    def _run(self) -> dict[str, Any]:
        """The loop: one `if` per concern after each step; what comes before the first and after the
        last step is `_open` and `_close`."""
        resumed = self._open()
        fpi = own_model.flops_per_item(self.task, self.model) * passes_per_step(self.cfg.sam)
        bar = progress.progress_bar(self.total_steps, self.step, self.cfg.progress and self.dist.is_main)
        self.clock = SyncClock(self.step, time.perf_counter(), self.step + 1)
        try:
            with self.signals:
                while self.step < self.total_steps:
                    evaluating, saving, rate = self._timed_step(bar, fpi)
                    if evaluating:
                        self._evaluate_and_save(bar, rate * fpi)
                    elif saving:
                        checkpoint.save(self)
                    if self.budget is not None and (evaluating or self.budget.due(self.step)):
                        fit_run(self, bar)
                    if self._should_stop():
                        raise Interrupted(self.signals.received or signal.SIGTERM, self.step, checkpoint.save(self))
        finally:
            if bar is not None:
                bar.close()
        return self._close(resumed)

    def _open(self) -> bool:
        """Before the first step: the run directory, the checkpoint to resume from, the intro, the plan
        and the time the run expects. Whether it resumed."""
        cfg = self.cfg
        self.files.prepare(cfg.resume)
        self.files.write_files(getattr(self.task, "run_files", dict)())  # optional: see protocol.py
        resumed = bool(cfg.resume) and checkpoint.restore(self)
        if self.budget is not None:
            self.budget.start(self.step, self.elapsed)
        if self.dist.is_main:
            print(progress.intro(self))
        outputs.save_model(self)
        self.step_plan.say_source()
        self._settle_step_plan()
        self.write_plan()
        if estimate.wanted(self):  # a few steps timed and undone: the weights are as if it had said nothing
            print(estimate.expected_line(self))
        if self.budget is not None:
            self.budget.steady(self.step, self.elapsed)
        return resumed

    def _timed_step(self, bar, fpi: float) -> tuple[bool, bool, float]:
        """One step, then a sync where something reads its numbers: (whether to evaluate, whether to save a
        checkpoint, the items a second so far this period)."""
        every = self.cfg.checkpoint_every
        t0, planned = time.perf_counter(), self.step_plan.planning_seconds()
        self.train_step()
        evaluating = self.step % self.eval_every == 0 or self.step == self.total_steps
        saving = not evaluating and bool(every) and self.step % every == 0
        reading = evaluating or saving or self.step >= self.clock.next or (
            not self.dist.enabled and self.signals.received is not None)
        if reading:
            self.sync()
        # With the sync (on a GPU, the wait for the queued steps); without the speed plan's first-time
        # measurements of new shapes (reported apart as plan_seconds).
        dt = time.perf_counter() - t0 - (self.step_plan.planning_seconds() - planned)
        self.elapsed += dt
        self.sums["seconds"] = self.sums.get("seconds", 0.0) + dt
        rate = self.sums["items"] / max(1e-9, self.sums["seconds"])
        if bar is not None:
            bar.update(1)
            if reading:
                bar.set_postfix(progress.bar_fields(self, rate, fpi), refresh=False)
        return evaluating, saving, rate

    def _evaluate_and_save(self, bar, flops_per_s: float) -> None:
        """An evaluation: its line said and written, the weights it keeps, the model, the pictures where the
        task draws at each one, and a checkpoint."""
        t_eval = time.perf_counter()
        line = self.evaluate()
        line["flops_per_s"] = flops_per_s
        self.last_line = line
        self.kept.offer(self.last_eval, self.evaluated_model(), self.step, line)
        if self.dist.is_main:
            (bar.write if bar is not None else print)(progress.eval_message(self, line))
        outputs.save_model(self)
        if self.cfg.plots and getattr(self.task, "draw_each_evaluation", False):  # see protocol.py
            outputs.draw(self, self.run_dir)
        checkpoint.save(self)
        if self.budget is not None:
            self.budget.evaluated(time.perf_counter() - t_eval)

    def _close(self, resumed: bool) -> dict[str, Any]:
        """After the last step: the kept weights put back, the summary, the plan and the pictures written."""
        line = self.last_line
        if self.kept.step not in (None, self.step):  # the kept weights back: what the model file and pictures hold
            line = self.kept.put_back(self.evaluated_model())
            self.last_eval = self._evaluate_task()
            outputs.save_model(self)
            if self.dist.is_main:
                print(f"kept the weights of step {self.kept.step} of {self.step}: the best on the "
                      f"{self.task.select_examples} training rows held back for choosing")
        if self.last_eval is None:  # resumed after the final checkpoint: the pictures still need the results
            self.last_eval = self._evaluate_task()
        summary = progress.summary(self, line, resumed)
        if self.kept.step is not None:
            summary["kept_step"] = self.kept.step
        self.write_plan()  # with the answers the last evaluation's shapes added
        self.files.finish(summary, (lambda run_dir: outputs.draw_on_main(self, run_dir)) if self.cfg.plots else None)
        return summary

    def evaluated_model(self) -> nn.Module:
        return self.model if self.ema is None else self.ema.model
