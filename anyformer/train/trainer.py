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

import contextlib
import hashlib
import json
import math
import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from ..models import REGISTRY, Model
from ..nn import set_training_kernel
from ..plan import adamw_impl, choices, compile_for_training, linears_for_training, planner
from ..plan.host import cpu_info
from .build import build_model, pick_device
from .checkpoint import CKPT_DIR, CheckpointError, list_checkpoints, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .distributed import Distributed
from .ema import EMA
from .optim import lr_at, make_optimizer, param_groups
from .perf import peak_flops
from .precision import autocast, deterministic_kernels, fast_fp32_matmuls, make_scaler, resolve_amp, settle_amp
from .protocol import Task
from .resume import check_fresh_out, check_resume, recorded_settings
from .runplan import PLAN_FILE, empty_plan, read_plan, synthetic_like, write_plan
from .rundir import RunDir, TrainingError
from .signals import Interrupted, StopSignals
from .timebudget import TimeBudget
from .tasks import make_task, task_pictures

__all__ = ["Trainer", "TrainingError", "Interrupted", "build_model", "pick_device"]

SYNC_SECONDS = 0.5      # tqdm's refresh interval: a bar redrawn no faster shows nothing newer
MAX_SYNC_STEPS = 1000   # however fast the steps, the steps awaiting a read stay few


class Trainer:
    def __init__(self, cfg: TrainConfig, task: Task | None = None) -> None:
        self.cfg = cfg
        self.dist = Distributed.from_env(pick_device(cfg.device), cfg.fsdp)
        self.device = self.dist.device
        self.run_dir = Path(cfg.out or f"runs/{cfg.recipe}")
        check_fresh_out(self.run_dir, cfg.resume, cfg.overwrite)  # before any work: nothing is lost by mistake
        recorded = recorded_settings(self.run_dir) if cfg.resume else None
        if recorded is not None:
            check_resume(self.run_dir, recorded, cfg.to_dict())
        self.scaler = make_scaler(cfg.amp, self.device)  # refuses fp16 off CUDA before any data is read
        fast_fp32_matmuls(self.device)
        if cfg.deterministic:
            deterministic_kernels()
        if cfg.threads is not None:
            if cfg.threads < 1:
                raise ValueError(f"threads must be >= 1, got {cfg.threads}")
            torch.set_num_threads(cfg.threads)
        elif self.dist.enabled and self.device.type == "cpu":
            # torchrun sets OMP_NUM_THREADS=1 for each rank; share the cores among the local ranks instead.
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // self.dist.local_world))
        # The plan in force: replayed from the run (--resume) or another (--plan PATH), else made now;
        # every decision from here on is taken inside `_plan_scope`, which records and pins it.
        self.plan = self._recorded_plan()
        self.replaying = bool(self.plan["answers"] or self.plan["compile"])
        with self._plan_scope():
            self._build(task)
        self.files = RunDir(self.run_dir, self.dist, task_pictures(), log=self.cfg.log)
        spe = self.task.steps_per_epoch
        self.total_steps = self._steps_asked()  # a --time-budget may fit it lower as the run goes
        self.budget = TimeBudget(cfg.time_budget) if cfg.time_budget else None
        self.eval_every = cfg.eval_every or spe
        self.step = 0
        self.sums: dict[str, float] = {}  # since the last evaluation, as read at the last sync
        self.metrics_lines = 0
        self.elapsed = 0.0
        self.last_line: dict[str, Any] = {}
        self.last_eval: dict[str, Any] | None = None
        self.last_loss: float | None = None
        self.signals = StopSignals()
        self._pending: list[tuple[int, int, list[str], Tensor]] = []  # (step, global batch, stat names, sums)
        self._stop_agreed = False
        self._next_sync = 0
        self._synced = (0, 0.0)  # (step, time) of the last sync
        self._saved_step: int | None = None
        self._cpu_copy: Model | None = None
        self._peak_flops: tuple[float, str] | None = None

    def _build(self, task: Task | None) -> None:
        """The task, the model, its precision and its optimiser (the decisions they need are the plan's)."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.task = task or make_task(cfg, self.device)
        self.model = build_model(cfg, self.task, self.device, self.dist.world if self.dist.fsdp else 1)
        self.model.to(self.device)
        if cfg.ema and self.dist.fsdp:
            raise ValueError("--ema keeps a full copy of the weights on each rank; it does not combine with --fsdp")
        self.ema = EMA(self.model, cfg.ema) if cfg.ema else None  # what is evaluated and saved, when asked for
        torch.manual_seed(cfg.seed + self.dist.rank)  # but each rank its own dropout masks
        c = self.model.config  # `auto` precision measured for this model's size, with the run's threads
        size = dict(width=c.width, hidden=getattr(c, "mlp_hidden", None) or 4 * c.width)
        # Under torchrun rank 0 measures and every rank takes its answer: ranks that timed each other's
        # load could settle on different precisions.
        amp = settle_amp(cfg.amp, self.device, **size) if self.dist.is_main else None
        if self.dist.enabled:
            settle_amp(cfg.amp, self.device, **size, decided=self.dist.broadcast(amp))
            self._plan_on_rank0()
        self.forward_model: nn.Module = self.dist.wrap(self.model)
        # After wrapping: FSDP replaces the parameters with sharded ones, which the optimiser must hold.
        self.optimizer = make_optimizer(self.model, cfg, self.device)
        # The training step's module under torch.compile, where `_plan_compile` chose it, for chunks of
        # the shape it was planned for; other shapes (an epoch's short last batch) run eagerly.
        self.compiled: nn.Module | None = None
        self._compiled_shape: tuple[int, ...] | None = None
        self.compile_choice = "eager"
        self.linears_choice: str | None = None  # the model-wide linear kernel `_plan_compile` settles (fp32 CPU)

    # ---------------------------------------------------------------- the plan
    def _recorded_plan(self) -> dict[str, Any]:
        """The plan to replay: --plan PATH's, else on --resume the run's own plan.json, else none."""
        cfg = self.cfg
        if cfg.plan not in ("auto", "stock"):
            return read_plan(cfg.plan)
        if cfg.resume and (self.run_dir / PLAN_FILE).is_file():
            return read_plan(self.run_dir)
        return empty_plan()

    @contextlib.contextmanager
    def _plan_scope(self) -> Iterator[None]:
        """Decisions inside are recorded in `self.plan` and pinned (a run never changes its plan
        midway); `--plan stock` forces every one to stock."""
        with contextlib.ExitStack() as stack:
            if self.cfg.plan == "stock":
                stack.enter_context(planner().forcing("stock"))
            self.plan["answers"] = stack.enter_context(planner().recording(self.plan["answers"]))
            yield

    def tune(self) -> dict[str, Any]:
        """The plan this run would train with, made now without training a step: its precision,
        optimiser and per-shape kernels, and the training step's linears and compile (measured on a
        forward and backward of stand-ins shaped like its first batch). Nothing is written; `train
        --plan FILE` replays it."""
        if self.budget is not None:  # a compile is judged against the budget the run would have
            self.budget.start(self.step, self.elapsed)
        with self._plan_scope():
            self._plan_compile()
        return self._plan_state()

    def _write_plan(self) -> None:
        self.files.on_main("write the plan", self.run_dir / PLAN_FILE, lambda: write_plan(self.run_dir, self._plan_state()))

    def _plan_state(self) -> dict[str, Any]:
        """The plan in force now, as plan.json and the checkpoints keep it."""
        return {**self.plan, "answers": dict(self.plan["answers"]), "compile": self.compile_choice,
                "linears": self.linears_choice}

    # ---------------------------------------------------------------- resume and checkpoints
    def _resume(self) -> bool:
        ckpts = list_checkpoints(self.run_dir)
        if not ckpts:
            if self.dist.is_main:
                print(f"--resume: no checkpoint in {self.run_dir}/{CKPT_DIR}, starting from step 0")
            return False
        path = ckpts[-1]
        state = load_checkpoint(path)
        if state.get("model_config") != self.model.config.__dict__:
            raise CheckpointError(f"checkpoint {path} belongs to another model "
                                  f"({state.get('model_config')}), not to {self.cfg.model} "
                                  f"({self.model.config.__dict__})")
        try:  # every rank reads the same file; nothing on disk changes until it has all been read
            rngs = state["rng"]
            mine = rngs[self.dist.rank] if len(rngs) == self.dist.world else rngs[0]
            # load_state_dict takes the saved run's fused/foreach flags, but the optimiser's loss-scaling
            # support was set when it was built: keep the implementation this run's plan chose.
            impl = [(g.get("fused"), g.get("foreach")) for g in self.optimizer.param_groups]
            self.dist.load_state(self.model, self.optimizer, state["model"], state["optimizer"])
            for group, (fused, foreach) in zip(self.optimizer.param_groups, impl):
                group["fused"], group["foreach"] = fused, foreach
            torch.set_rng_state(mine["cpu"])
            if "cuda" in mine and self.device.type == "cuda":
                torch.cuda.set_rng_state(mine["cuda"], self.device)
            if self.ema is not None:
                if "ema" not in state:
                    raise KeyError("it holds no EMA weights, and this run keeps an EMA (--ema)")
                self.ema.load_state_dict(state["ema"])
            if self.scaler is not None and "scaler" in state:
                self.scaler.load_state_dict(state["scaler"])
            self.step, self.sums = int(state["step"]), dict(state["sums"])
            self.metrics_lines, self.elapsed = int(state["metrics_lines"]), float(state["elapsed"])
            self.last_line = dict(state["last_line"])
            if self.budget is not None:  # the steps a time budget fitted; this process re-fits what is left
                self.total_steps = int(state.get("total_steps", self.total_steps))
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this run: {str(e).splitlines()[0][:300]} "
                                  f"(delete it to resume from an earlier one)") from None
        self._saved_step = self.step
        self.files.keep_metrics(self.metrics_lines)  # lines written after the checkpoint will be written again
        if self.dist.is_main:
            print(f"resumed from {path} at step {self.step}/{self.total_steps}")
        return True

    def _checkpoint(self) -> Path | None:
        if self._pending:  # the sums it saves, and a loss found non-finite before it is written
            self._sync()
        if self._saved_step == self.step:  # e.g. a signal right after an evaluation's checkpoint
            return list_checkpoints(self.run_dir)[-1] if self.dist.is_main else None
        model_state, optim_state = self.dist.state(self.model, self.optimizer)
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        rngs = self.dist.gather(rng)  # each rank's own, so dropout continues exactly on every rank
        state = {"step": self.step, "model": model_state, "optimizer": optim_state,
                 "model_config": dict(self.model.config.__dict__), "sums": self.sums, "rng": rngs,
                 "metrics_lines": self.metrics_lines, "elapsed": self.elapsed, "last_line": self.last_line,
                 "total_steps": self.total_steps, "plan": self._plan_state()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        if self.ema is not None:
            state["ema"] = self.ema.state_dict()
        path = self.run_dir / CKPT_DIR / f"step-{self.step:09d}.pt"
        self.files.on_main("write the checkpoint", path,
                           lambda: save_checkpoint(self.run_dir, self.step, state, keep=self.cfg.keep_checkpoints))
        self._write_plan()
        self._saved_step = self.step
        return path if self.dist.is_main else None

    # ---------------------------------------------------------------- the loop
    def train_step(self, module: nn.Module | None = None) -> None:
        """One optimiser step on the step's global batch; its loss and stats wait on the device.
        `module`: run the step's chunks with it instead of the compiled or plain model (the compile
        plan times both this way), where the chunk has the shape the compiled module was planned for."""
        cfg, step, world = self.cfg, self.step, self.dist.world
        lr = lr_at(step, self.total_steps, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch, n_global = self.task.batch(step, self.dist.rank, world)
        # Every rank runs the same number of chunks (FSDP gathers weights in each forward). A chunk
        # left empty (more chunks or ranks than examples) runs a stand-in example with weight 0.
        spare = tuple(t[:1] for t in (batch if len(batch[0]) else self.task.batch(step, 0, world)[0]))
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        stats: dict[str, Tensor] = {}
        for i, chunk in enumerate(zip(*(torch.tensor_split(t, cfg.grad_accum) for t in batch))):
            real = len(chunk[0])
            model = self.forward_model
            use = module if module is not None else self.compiled
            if use is not None and real and tuple(chunk[0].shape) == self._compiled_shape:
                model = use
            with self.dist.grad_sync(self.forward_model, i == cfg.grad_accum - 1), autocast(cfg.amp, self.device):
                loss, chunk_stats = self.task.loss(model, chunk if real else spare)
                # Weight by this chunk's share of the global batch; DDP and FSDP average over ranks.
                weighted = loss * (real / n_global * world)
            (weighted if self.scaler is None else self.scaler.scale(weighted)).backward()
            loss_sum += loss.detach().double() * real
            for k, v in chunk_stats.items():
                stats[k] = stats.get(k, 0) + torch.as_tensor(v, dtype=torch.float64, device=self.device) * bool(real)
        keys = sorted(stats)
        self._pending.append((step, n_global, keys, torch.stack([loss_sum, *(stats[k] for k in keys)])))
        if self.scaler is not None and cfg.grad_clip:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
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

    def _sync(self) -> None:
        """Read the pending steps' sums into `self.sums` in step order (one copy to the host; under
        torchrun one all-reduce, which also carries the stop flags and rank 0's next sync step)."""
        now = time.perf_counter()
        steps, seconds = self.step - self._synced[0], now - self._synced[1]
        wait = min(MAX_SYNC_STEPS, max(1, int(SYNC_SECONDS * steps / max(seconds, 1e-9))))
        flags = torch.tensor([float(self.signals.received is not None), wait if self.dist.is_main else 0],
                             dtype=torch.float64, device=self.device)
        values = self.dist.sum(torch.cat([*(sums for *_, sums in self._pending), flags])).tolist()
        at = 0
        for step, n_global, keys, _ in self._pending:
            loss = values[at] / n_global
            if not math.isfinite(loss):
                raise TrainingError(f"the loss became {loss} at step {step + 1}; stopping. The last good checkpoint "
                                    f"is kept in {self.run_dir}/{CKPT_DIR} (try a lower --lr or --grad-clip)")
            for k, v in zip(keys, values[at + 1:at + 1 + len(keys)]):
                self.sums[k] = self.sums.get(k, 0) + v
            self.sums["loss"] = self.sums.get("loss", 0.0) + loss
            self.last_loss, at = loss, at + 1 + len(keys)
        self._pending.clear()
        self._stop_agreed, self._next_sync = values[at] > 0, self.step + int(values[at + 1])
        self._synced = (self.step, now)

    def _should_stop(self) -> bool:
        # Ranks may see a signal at different moments; they stop together after the sync that tells them all.
        return self._stop_agreed if self.dist.enabled else self.signals.received is not None

    def _evaluate_task(self) -> dict[str, Any]:
        with self.dist.gathered(self.model):
            return self.task.evaluate(self.model if self.ema is None else self.ema.model, self.dist)

    def evaluate(self) -> dict[str, Any]:
        """Score the model, append the metrics line, and start the next period's sums (after a sync)."""
        if self._pending:
            raise RuntimeError("evaluate() needs the steps' sums read first (_sync)")
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
            with self._plan_scope():
                summary = self._run()
        except Interrupted:
            # A stop is agreed at a sync: every rank raises it after the same step, so they can leave
            # together. One rank tearing its process group down while another still uses it aborts both.
            self.dist.close(wait=True)
            raise
        except BaseException:
            self.dist.close(wait=False)  # the other ranks may be gone already
            raise
        self.dist.close(wait=True)
        return summary

    def _planning_chunk(self, step: int) -> tuple[Tensor, ...]:
        """What a planning pass runs: stand-ins (`synthetic_like`) of the shapes of this rank's first
        gradient-accumulation chunk of step `step`'s batch."""
        batch, _ = self.task.batch(step, self.dist.rank, self.dist.world)
        first = [torch.tensor_split(t, self.cfg.grad_accum)[0] for t in batch]
        return synthetic_like(first, self.cfg.seed)

    def _plan_on_rank0(self) -> None:
        """Under torchrun: rank 0 takes one training forward and backward of stand-ins shaped like its
        share of the first batch (before the model is wrapped: no collectives; gradients discarded,
        RNG untouched) and asks for AdamW's kernel, so that the plan measures the step's choices
        once, while the other ranks wait. They then read its answers from the plan file instead of
        timing the same cores under each other's load (and perhaps choosing differently)."""
        if self.dist.is_main:
            chunk = self._planning_chunk(0)
            if len(chunk[0]):
                with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                    with autocast(self.cfg.amp, self.device):
                        loss = self.task.loss(self.model, chunk)[0]
                    loss.backward()
                self.model.zero_grad(set_to_none=True)
            adamw_impl(param_groups(self.model, self.cfg.weight_decay, self.cfg.decay_all), device=self.device)
        self.dist.barrier()
        if not self.dist.is_main:
            planner().reset()  # read the plan file again: rank 0's measurements are in it

    def _plan_compile(self) -> None:
        """Eager or torch.compile for the training step: forced by --compile / --no-compile, else
        measured by the speed plan on this step's model, batch shape and precision, the compile
        time counted against the steps left (anyformer.plan.compiled). Before that, for an fp32 CPU
        step that runs eagerly, the kernel of all its linear layers together (anyformer.plan.linears)."""
        cfg = self.cfg
        if self.step >= self.total_steps or (self.dist.enabled and not cfg.compile):
            return  # under torchrun ranks would time each other's load: only --compile compiles
        chunk = self._planning_chunk(self.step)
        if not len(chunk[0]):
            return
        amp = resolve_amp(cfg.amp, self.device)

        def step_loss(m: nn.Module) -> Tensor:
            with autocast(cfg.amp, self.device):
                return self.task.loss(m, chunk)[0]

        self._compiled_shape = tuple(chunk[0].shape)
        config = json.dumps(self.model.config.__dict__, sort_keys=True, default=str)
        fields = {"model": f"{type(self.model).__name__}-{hashlib.sha1(config.encode()).hexdigest()[:10]}",
                  "task": cfg.task, "batch": "x".join(map(str, chunk[0].shape)), "amp": amp,
                  "device": self.device.type}
        # A recorded plan's choices are replayed as they were; otherwise measured on the step's own
        # forward and backward (never on the run's steps: a step taken under a candidate kernel would
        # make the weights depend on what the cache held).
        wants = cfg.compile if cfg.compile is not None else {"compiled": True, "eager": False}.get(self.plan["compile"])
        compiles = wants or choices.forced_choice(planner().forced()[0], "compile") == "compiled"
        if amp == "none" and self.device.type == "cpu" and not compiles:  # a compiled graph's products are F.linear's
            if self.plan["linears"] is not None:
                self.linears_choice, why = self.plan["linears"], "replayed from the recorded plan"
                set_training_kernel(self.model, None if self.linears_choice == "planned" else self.linears_choice)
            else:
                chosen_linears = linears_for_training(
                    self.forward_model, lambda kernel: set_training_kernel(self.model, kernel), step_loss,
                    fields=fields, steps=self.total_steps - self.step, device=self.device)
                self.linears_choice, why = chosen_linears.choice, chosen_linears.why
            if self.dist.is_main:
                print(f"linears: {self.linears_choice} ({why})")
        if wants is not False:
            with planner().forcing(compile="compiled") if wants else contextlib.nullcontext():
                chosen = compile_for_training(self.forward_model, step_loss, fields=fields,
                                              steps=self.total_steps - self.step,
                                              tolerance=1e-3 if amp == "none" else 5e-2, device=self.device,
                                              seconds=None if self.budget is None else self.budget.left())
            self.compile_choice = chosen.choice
            if chosen.choice == "compiled":
                self.compiled = chosen.module
            if self.dist.is_main:
                replayed = " (replayed from the recorded plan)" if cfg.compile is None and self.plan["compile"] else ""
                print(f"compile: {chosen.choice} ({chosen.why}){replayed}")

    def _fit_budget(self, bar) -> None:
        """--time-budget: set the run's steps so that it ends within the budget, from the time per step
        and per evaluation measured so far (rank 0's figure, on every rank). Never more steps than
        --epochs / --max-steps ask for; the schedule (warm-up, cosine) stretches to the new length."""
        if self.step >= self.total_steps:
            return  # the final evaluation is done
        fitted = self.budget.fit(self.step, self.elapsed, self.eval_every, self.total_steps, self._steps_asked())
        if self.dist.enabled:
            mine = torch.tensor([float(fitted) if self.dist.is_main else 0.0], dtype=torch.float64, device=self.device)
            fitted = int(self.dist.sum(mine).item())
        if fitted == self.total_steps:
            return
        before, self.total_steps = self.total_steps, fitted
        if bar is not None:
            bar.total = fitted
        if self.dist.is_main and abs(fitted - before) > 0.01 * before:
            msg = (f"time budget {self.budget.seconds:.0f} s: {fitted} steps ({fitted / self.task.steps_per_epoch:.2f} "
                   f"epochs) instead of {before}")
            (bar.write if bar is not None else print)(msg)

    def _steps_asked(self) -> int:
        """The steps --max-steps or --epochs ask for."""
        return self.cfg.max_steps or max(1, round(self.cfg.epochs * self.task.steps_per_epoch))

    def _run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.files.prepare(cfg.resume)
        resumed = cfg.resume and self._resume()
        if self.budget is not None:
            self.budget.start(self.step, self.elapsed)
        if self.dist.is_main:
            print(self._intro())
        self._save_model()
        if self.replaying and self.dist.is_main:
            source = self.cfg.plan if self.cfg.plan not in ("auto", "stock") else self.run_dir / PLAN_FILE
            print(f"plan: replaying {len(self.plan['answers'])} recorded choices from {source}")
        self._plan_compile()
        self._write_plan()
        if self.budget is not None:
            self.budget.steady(self.step, self.elapsed)
        fpi = self.task.flops_per_item(self.model)
        bar = _progress(self.total_steps, self.step, cfg.progress and self.dist.is_main)
        line = self.last_line
        self._synced, self._next_sync = (self.step, time.perf_counter()), self.step + 1
        try:
            with self.signals:
                while self.step < self.total_steps:
                    t0, planned = time.perf_counter(), planner().planning_s
                    self.train_step()
                    evaluating = self.step % self.eval_every == 0 or self.step == self.total_steps
                    checkpointing = not evaluating and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
                    reading = evaluating or checkpointing or self.step >= self._next_sync or (
                        not self.dist.enabled and self.signals.received is not None)
                    if reading:
                        self._sync()
                    # With the sync (on a GPU, the wait for the queued steps); without the speed plan's
                    # first-time measurements of new shapes (reported apart as plan_seconds).
                    dt = time.perf_counter() - t0 - (planner().planning_s - planned)
                    self.elapsed += dt
                    self.sums["seconds"] = self.sums.get("seconds", 0.0) + dt
                    rate = self.sums["items"] / max(1e-9, self.sums["seconds"])
                    if bar is not None:
                        bar.update(1)
                        if reading:
                            bar.set_postfix(self._bar_fields(rate, fpi), refresh=False)
                    if evaluating:
                        t_eval = time.perf_counter()
                        line = self.evaluate()
                        line["flops_per_s"] = rate * fpi
                        self.last_line = line
                        if self.dist.is_main:
                            (bar.write if bar is not None else print)(self._eval_message(line))
                        self._save_model()
                        if getattr(self.task, "draw_each_evaluation", False):  # optional: see protocol.py
                            self._draw(self.run_dir)
                        self._checkpoint()
                        if self.budget is not None:
                            self.budget.evaluated(time.perf_counter() - t_eval)
                    elif checkpointing:
                        self._checkpoint()
                    if self.budget is not None and (evaluating or self.budget.due(self.step)):
                        self._fit_budget(bar)
                    if self._should_stop():
                        raise Interrupted(self.signals.received or signal.SIGTERM, self.step, self._checkpoint())
        finally:
            if bar is not None:
                bar.close()
        if self.last_eval is None:  # resumed after the final checkpoint: the pictures still need the results
            self.last_eval = self._evaluate_task()
        summary = self._summary(line, resumed)
        self._write_plan()  # with the answers the last evaluation's shapes added
        self.files.finish(summary, self._draw_on_main)
        return summary

    # ---------------------------------------------------------------- outputs
    def _plain_model(self) -> Model:
        """The model as one ordinary module: itself, or under FSDP a CPU copy of the gathered weights
        (on rank 0). Every rank must call this: the gathering is collective."""
        if not self.dist.fsdp:
            return self.model
        weights = self.dist.state(self.model)
        if self.dist.is_main:
            if self._cpu_copy is None:
                with torch.random.fork_rng(devices=[]):  # building it must not move the training RNG
                    self._cpu_copy = REGISTRY[self.model.family].from_config(self.model.config)
            self._cpu_copy.load_state_dict(weights)
        return self._cpu_copy

    def _draw_on_main(self, run_dir: Path) -> None:
        """The task's pictures from the last evaluation (rank 0; `finish` and `_draw` run it there)."""
        model = self._cpu_copy if self.dist.fsdp else self.model if self.ema is None else self.ema.model
        self.task.draw(model, self.last_eval, run_dir)

    def _draw(self, run_dir: Path) -> None:
        self.files.on_main("draw the pictures into", run_dir, lambda: self._draw_on_main(run_dir))

    def _save_model(self) -> None:
        model = self._plain_model() if self.ema is None else self.ema.model
        extra = {"train": self.cfg.to_dict(), "data": self.task.run_info()}
        self.files.on_main("write the model", self.run_dir / "model.safetensors",
                           lambda: model.save(self.run_dir, extra=extra))

    def _peak(self) -> float:
        """The peak MFU divides by (anyformer.train.perf): a known GPU's data sheet, or the measured
        matmul rate, measured when first needed (a second or so on a CPU), so that a run stopped
        early never pays for it."""
        if self._peak_flops is None:  # its random matrices must not move the training RNG
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                self._peak_flops = peak_flops(self.device, self.cfg.amp)
        return self._peak_flops[0]

    def _bar_fields(self, rate: float, fpi: float) -> dict[str, str]:
        loss = {} if self.last_loss is None else {"loss": f"{self.last_loss:.4f}"}
        return {**loss, f"{self.task.unit[:3]}/s": f"{rate:.0f}", "mfu": f"{100 * rate * fpi / self._peak():.0f}%",
                **self.task.progress_fields(self.sums)}

    def _intro(self) -> str:
        """The run's first line: what is trained, on which data, where, in what precision, how long."""
        cfg, info = self.cfg, self.task.run_info()
        if "train_tokens_used" in info:
            data = f"{cfg.data}: {info['train_tokens_used']:,} training tokens"
        else:
            data = f"{cfg.data}: {info.get('train_examples', 0):,} training examples"
        steps = f"{self.total_steps:,} steps ({self.total_steps / self.task.steps_per_epoch:.2f} epochs)"
        budget = f", at most {cfg.time_budget:.0f} s" if cfg.time_budget else ""
        world = f" x {self.dist.world} processes" if self.dist.world > 1 else ""
        where = f"{_device_name(self.device)}{world}"
        precision = {"none": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}[resolve_amp(cfg.amp, self.device)]
        return (f"train {cfg.model} ({self.model.num_params():,} parameters) on {data} | {where} | {precision} | "
                f"{steps}{budget} -> {self.run_dir}")

    def _eval_message(self, line: dict[str, Any]) -> str:
        parts = [f"step {line['step']}", f"epoch {line['epoch']:.2f}", f"train loss {line['train_loss']:.4f}",
                 self.task.eval_text(line), f"{line['time']:.0f}s"]
        return " | ".join(p for p in parts if p)

    def _summary(self, line: dict[str, Any], resumed: bool) -> dict[str, Any]:
        peak, unit = self._peak(), f"{self.task.unit}_per_s"
        s = {"recipe": self.cfg.recipe, "model": self.cfg.model, "steps": self.step,
             "epochs": round(self.step / self.task.steps_per_epoch, 3), "train_seconds": round(self.elapsed, 2),
             "params": self.model.num_params(), "device": str(self.device),
             "device_name": _device_name(self.device), "world_size": self.dist.world,
             "amp": resolve_amp(self.cfg.amp, self.device), unit: round(line.get(unit, 0.0), 1),
             "mfu": round(line.get("flops_per_s", 0.0) / peak, 4), "peak_flops": peak,
             "peak_flops_source": self._peak_flops[1], "resumed": resumed,
             "plan_seconds": round(planner().planning_s, 2), "compile": self.compile_choice,
             "linears": self.linears_choice, "plan": self.cfg.plan, "plan_choices": len(self.plan["answers"]),
             "time_budget": self.cfg.time_budget}
        return {**s, **self.task.summary_fields(line, self.files.read_metrics())}


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_info()['model']} ({torch.get_num_threads()} threads)"


def _progress(total: int, start: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, mininterval=SYNC_SECONDS,
                desc="train", leave=True)
