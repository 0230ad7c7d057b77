"""The training loop shared by every task: optimise, evaluate, log, checkpoint, resume.

A run directory holds config.json + model.safetensors (loadable by `anyformer.load`),
metrics.jsonl (one line per evaluation), summary.json, plots, and checkpoints/ to resume from.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..models import REGISTRY, PRESETS, Model
from .checkpoint import CheckpointError, atomic_write_bytes, list_checkpoints, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .distributed import Distributed
from .optim import lr_at, make_optimizer
from .perf import flops_per_item, measured_peak_flops
from .tasks import Task, autocast, make_task

RUN_FILES = ("config.json", "model.safetensors", "metrics.jsonl", "summary.json", "curves.png",
             "confusion.png", "attention.png")


class TrainingError(ValueError):
    """The run cannot go on (a non-finite loss, a checkpoint that does not fit)."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; a checkpoint was written before stopping."""

    def __init__(self, signum: int, step: int, path: Path | None) -> None:
        super().__init__(f"stopped by signal {signal.Signals(signum).name} after step {step}; "
                         f"checkpoint {path} written, continue with --resume")
        self.signum = signum


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


def build_model(cfg: TrainConfig, task: Task) -> Model:
    if cfg.model not in PRESETS:
        raise ValueError(f"unknown model preset {cfg.model!r}; valid presets: {sorted(PRESETS)}")
    family = PRESETS[cfg.model][0]
    if family != task.family:
        raise ValueError(f"model {cfg.model!r} is a {family} model, but task {cfg.task!r} trains {task.family} models")
    return REGISTRY[family].preset(cfg.model, **{**cfg.model_overrides, **task.model_overrides()})


class Trainer:
    def __init__(self, cfg: TrainConfig, task: Task | None = None) -> None:
        self.cfg = cfg
        self.dist = Distributed.from_env(cfg.device)
        self.device = self.dist.device or pick_device(cfg.device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        self.task = task or make_task(cfg, self.device)
        self.model = build_model(cfg, self.task).to(self.device)
        self.optimizer = make_optimizer(self.model, cfg, self.device)
        self.forward_model: nn.Module = self.dist.wrap(self.model)
        if cfg.compile:
            self.forward_model = torch.compile(self.forward_model)
        self.run_dir = Path(cfg.out or f"runs/{cfg.recipe}")
        spe = self.task.steps_per_epoch
        self.total_steps = cfg.max_steps or max(1, round(cfg.epochs * spe))
        self.eval_every = cfg.eval_every or spe
        self.step = 0
        self.sums: dict[str, float] = {}
        self.metrics_lines = 0
        self.elapsed = 0.0
        self._signal: int | None = None

    # ---------------------------------------------------------------- run directory and resume
    def _prepare_run_dir(self) -> None:
        if not self.dist.is_main:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"cannot create the run directory {self.run_dir}: {e.strerror}") from None
        if not os.access(self.run_dir, os.W_OK):
            raise ValueError(f"the run directory {self.run_dir} is not writable")
        if self.cfg.resume:
            return
        for name in RUN_FILES:  # a fresh run replaces an old one in the same place
            (self.run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)

    def _resume(self) -> bool:
        ckpts = list_checkpoints(self.run_dir)
        if not ckpts:
            if self.dist.is_main:
                print(f"--resume: no checkpoint in {self.run_dir}/checkpoints, starting from step 0")
            return False
        state = load_checkpoint(ckpts[-1])
        if state.get("model_config") != self.model.config.__dict__:
            raise CheckpointError(f"checkpoint {ckpts[-1]} belongs to another model "
                                  f"({state.get('model_config')}), not to {self.cfg.model}")
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise CheckpointError(f"checkpoint {ckpts[-1]} does not fit this model: {str(e).splitlines()[0]}") from None
        self.step, self.sums = int(state["step"]), state["sums"]
        self.metrics_lines, self.elapsed = int(state["metrics_lines"]), float(state["elapsed"])
        torch.set_rng_state(state["rng_cpu"])
        if "rng_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["rng_cuda"])
        if self.dist.is_main:  # drop metrics written after the checkpoint: they will be written again
            path = self.run_dir / "metrics.jsonl"
            lines = path.read_text().splitlines(keepends=True)[:self.metrics_lines] if path.exists() else []
            atomic_write_bytes(path, lambda f: f.write("".join(lines).encode()))
            print(f"resumed from {ckpts[-1]} at step {self.step}/{self.total_steps}")
        return True

    def _checkpoint(self) -> Path | None:
        if not self.dist.is_main:
            return None
        state = {"step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "model_config": dict(self.model.config.__dict__), "sums": self.sums,
                 "metrics_lines": self.metrics_lines, "elapsed": self.elapsed, "rng_cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["rng_cuda"] = torch.cuda.get_rng_state()
        return save_checkpoint(self.run_dir, self.step, state, keep=self.cfg.keep_checkpoints)

    # ---------------------------------------------------------------- the loop
    def train_step(self) -> float:
        cfg, step = self.cfg, self.step
        lr = lr_at(step, self.total_steps, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        (x, y), n_global = self.task.batch(step, self.dist.rank, self.dist.world)
        chunks = max(1, min(cfg.grad_accum, len(x)))
        total_loss = torch.zeros((), device=self.device)
        for i, (xc, yc) in enumerate(zip(x.chunk(chunks), y.chunk(chunks))):
            last = i == chunks - 1
            sync = nullcontext() if last or not self.dist.enabled else self.forward_model.no_sync()
            with sync, autocast(cfg.amp, self.device):
                loss, stats = self.task.loss(self.forward_model, (xc, yc))
                # Weight by this chunk's share of the global batch; DDP averages over ranks.
                weighted = loss * (len(xc) / n_global) * self.dist.world
            weighted.backward()
            total_loss += loss.detach() * len(xc)
            for k, v in stats.items():
                self.sums[k] = self.sums.get(k, 0) + (v.item() if torch.is_tensor(v) else v)
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss_value = self.dist.mean(total_loss / len(x))
        if not math.isfinite(loss_value):
            raise TrainingError(f"the loss became {loss_value} at step {step + 1}; stopping. The last good "
                                f"checkpoint is kept in {self.run_dir}/checkpoints (try a lower --lr or --grad-clip)")
        self.sums["loss"] = self.sums.get("loss", 0.0) + loss_value
        self.sums["steps"] = self.sums.get("steps", 0) + 1
        self.sums["items"] = self.sums.get("items", 0) + n_global
        self.step += 1
        return loss_value

    def evaluate(self) -> dict[str, Any]:
        result = self.task.evaluate(self.model, self.dist)
        steps = max(1, self.sums.get("steps", 0))
        line = {"step": self.step, "epoch": round(self.step / self.task.steps_per_epoch, 4),
                "train_loss": self.sums.get("loss", 0.0) / steps,
                **({"train_accuracy": self.sums["correct"] / max(1, self.sums["count"])} if "correct" in self.sums else {}),
                **{k: v for k, v in result.items() if isinstance(v, (int, float))},
                "lr": lr_at(self.step - 1, self.total_steps, self.cfg),
                f"{self.task.unit}_per_s": self.sums.get("items", 0) / max(1e-9, self.sums.get("seconds", 1e-9)),
                "time": round(self.elapsed, 2)}
        self.sums = {}
        if self.dist.is_main:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")
        self.metrics_lines += 1
        self.last_eval = result
        return line

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self._prepare_run_dir()
        self.dist.barrier()
        resumed = cfg.resume and self._resume()
        if self.dist.is_main:
            self._save_model()
        peak = measured_peak_flops(self.device, cfg.amp)
        fpi = flops_per_item(self.model, self.task)
        bar = _progress(self.total_steps, self.step, cfg.progress and self.dist.is_main, self.task.unit)
        old_handlers = _install_signal_handlers(self)
        line: dict[str, Any] = {}
        try:
            while self.step < self.total_steps:
                t0 = time.perf_counter()
                loss = self.train_step()
                dt = time.perf_counter() - t0
                self.elapsed += dt
                self.sums["seconds"] = self.sums.get("seconds", 0.0) + dt
                rate = self.sums["items"] / max(1e-9, self.sums["seconds"])
                if bar is not None:
                    bar.update(1)
                    post = {"loss": f"{loss:.4f}", f"{self.task.unit[:3]}/s": f"{rate:.0f}",
                            "mfu": f"{100 * rate * fpi / peak:.0f}%"}
                    if "correct" in self.sums:
                        post["acc"] = f"{self.sums['correct'] / max(1, self.sums['count']):.3f}"
                    bar.set_postfix(post, refresh=False)
                if self.step % self.eval_every == 0 or self.step == self.total_steps:
                    line = self.evaluate()
                    line["mfu"] = rate * fpi / peak
                    if self.dist.is_main:
                        _print_eval(line, bar)
                        self._save_model()
                    self._checkpoint()
                elif cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self._checkpoint()
                if self._signal is not None:
                    raise Interrupted(self._signal, self.step, self._checkpoint())
        finally:
            if bar is not None:
                bar.close()
            _restore_signal_handlers(old_handlers)
        summary = self._summary(line, peak, fpi, resumed)
        if self.dist.is_main:
            self._finish(summary)
        self.dist.close()
        return summary

    # ---------------------------------------------------------------- outputs
    def _save_model(self) -> None:
        self.model.save(self.run_dir, extra={"train": self.cfg.to_dict(), "data": self.task.run_info()})

    def _summary(self, line: dict[str, Any], peak: float, fpi: float, resumed: bool) -> dict[str, Any]:
        s = {"recipe": self.cfg.recipe, "model": self.cfg.model, "steps": self.step,
             "epochs": round(self.step / self.task.steps_per_epoch, 3), "train_seconds": round(self.elapsed, 2),
             "params": self.model.num_params(), "device": str(self.device),
             "device_name": _device_name(self.device), "world_size": self.dist.world, "amp": self.cfg.amp,
             f"{self.task.unit}_per_s": round(line.get(f"{self.task.unit}_per_s", 0.0), 1),
             "mfu": round(float(line.get("mfu", 0.0)), 4), "peak_flops_measured": peak, "resumed": resumed}
        if "eval_accuracy" in line:
            s["test_accuracy"] = line["eval_accuracy"]
            s["test_loss"] = line["eval_loss"]
        elif "eval_loss" in line:
            s["val_loss"] = line["eval_loss"]
            s["best_val_loss"] = line.get("best_val_loss", line["eval_loss"])
        return s

    def _finish(self, summary: dict[str, Any]) -> None:
        atomic_write_bytes(self.run_dir / "summary.json", lambda f: f.write(json.dumps(summary, indent=2).encode()))
        from ..viz import plot_confusion, plot_curves, plot_digit_attention
        plot_curves(self.run_dir / "metrics.jsonl", self.run_dir / "curves.png")
        confusion = getattr(self, "last_eval", {}).get("confusion")
        if confusion is not None:
            plot_confusion(confusion, self.task.test.classes, self.run_dir / "confusion.png")
            _, images, labels = self.task.sample_images(8)
            plot_digit_attention(self.model, images, labels, self.task.test.classes, self.run_dir / "attention.png")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({torch.get_num_threads()} threads)"
    except OSError:
        pass
    return f"cpu ({torch.get_num_threads()} threads)"


def _progress(total: int, start: int, enabled: bool, unit: str):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, mininterval=0.5,
                desc="train", leave=True)


def _print_eval(line: dict[str, Any], bar) -> None:
    parts = [f"step {line['step']}", f"epoch {line['epoch']:.2f}", f"train loss {line['train_loss']:.4f}"]
    if "eval_accuracy" in line:
        parts.append(f"test loss {line['eval_loss']:.4f}  test acc {line['eval_accuracy']:.4f}")
    elif "eval_loss" in line:
        parts.append(f"val loss {line['eval_loss']:.4f}")
    parts.append(f"{line['time']:.0f}s")
    msg = " | ".join(parts)
    (bar.write if bar is not None else print)(msg)


def _install_signal_handlers(trainer: Trainer):
    def handler(signum, frame):  # finish the step in flight, then checkpoint and stop
        trainer._signal = signum
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return old


def _restore_signal_handlers(old) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)
