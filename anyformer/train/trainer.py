"""The training loop shared by every task: optimise, evaluate, log, checkpoint, resume.

A run directory holds config.json + model.safetensors (loadable by `anyformer.load`),
metrics.jsonl (one line per evaluation), summary.json, plots, and checkpoints/ to resume from.

Under torchrun every rank runs this same loop on its share of each global batch; rank 0 alone
writes files, and a write that fails there stops every rank with the same one-line error.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
import types
import typing
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from ..models import REGISTRY, PRESETS, Model
from ..files import atomic_write
from .checkpoint import CKPT_DIR, CheckpointError, list_checkpoints, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .distributed import Distributed
from .optim import lr_at, make_optimizer
from .perf import resolve_amp, flops_per_item, measured_peak_flops
from .tasks import Task, autocast, make_task

RUN_FILES = ("config.json", "model.safetensors", "metrics.jsonl", "summary.json", "curves.png",
             "confusion.png", "attention.png")


class TrainingError(ValueError):
    """The run cannot go on (a non-finite loss, a checkpoint that does not fit, a failed write)."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; a checkpoint was written before stopping."""

    def __init__(self, signum: int, step: int, path: Path | None) -> None:
        saved = f"checkpoint {path} written" if path is not None else "rank 0 wrote the checkpoint"
        super().__init__(f"stopped by signal {signal.Signals(signum).name} after step {step}; "
                         f"{saved}, continue with --resume")
        self.signum = signum


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


def build_model(cfg: TrainConfig, task: Task, device: torch.device | None = None, shards: int = 1) -> Model:
    if cfg.model not in PRESETS:
        raise ValueError(f"unknown model preset {cfg.model!r}; valid presets: {sorted(PRESETS)}")
    family = PRESETS[cfg.model][0]
    if family != task.family:
        raise ValueError(f"model {cfg.model!r} is a {family} model, but task {cfg.task!r} trains {task.family} models")
    _check_types(REGISTRY[family].config_class, cfg.model_overrides)
    fixed = task.model_overrides()
    for key, value in cfg.model_overrides.items():
        if key in fixed and _as_list(value, fixed[key]) != _as_list(fixed[key], fixed[key]):
            raise ValueError(f"--set {key}={json.dumps(value)} contradicts the data, which needs "
                             f"{key}={json.dumps(fixed[key])}; leave {key} out")
    kwargs = {**cfg.model_overrides, **fixed}
    # Build once without memory first, so that an absurd size is refused instead of exhausting the machine.
    with torch.device("meta"):
        probe = REGISTRY[family].preset(cfg.model, **kwargs)
    _check_fits(probe, device or torch.device("cpu"), shards)
    return REGISTRY[family].preset(cfg.model, **kwargs)


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def _check_types(config_class: type, overrides: dict[str, Any]) -> None:
    """`--set depth=2.5` or `--set width=abc` named plainly, before the model trips over it."""
    hints = typing.get_type_hints(config_class)
    for key, value in overrides.items():
        if key in hints and not _fits(value, hints[key]):
            raise ValueError(f"--set {key}={json.dumps(value)}: expected {_describe(hints[key])}")


def _fits(value: Any, hint: Any) -> bool:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, a) for a in args)
    if typing.get_origin(hint) is tuple:
        return isinstance(value, (list, tuple)) and len(value) == len(args) and all(map(_fits, value, args))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in _NAMES:
        return isinstance(value, hint)
    return True  # anything else is the config's own business


def _describe(hint: Any) -> str:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {len(typing.get_args(hint))} values"
    return _NAMES.get(hint, str(hint))


def _as_list(v: Any, like: Any) -> Any:
    """28 and [28, 28] are the same image size."""
    if isinstance(like, (list, tuple)):
        return list(v) if isinstance(v, (list, tuple)) else [v] * len(like)
    return v


def _check_fits(model: nn.Module, device: torch.device, shards: int) -> None:
    tensors = [*model.parameters(), *model.buffers()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    need = 4 * nbytes / shards  # weights, gradients and Adam's two moments (FSDP splits them)
    if device.type == "cuda":
        have = torch.cuda.mem_get_info(device)[1]
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        params = sum(p.numel() for p in model.parameters())
        raise ValueError(f"this model has {params:,} parameters and needs about {need / 2**30:,.1f} GiB to train "
                         f"(weights, gradients, optimiser state), more than the {have / 2**30:,.1f} GiB of "
                         f"{device.type} memory; choose a smaller width, depth or image size")


class Trainer:
    def __init__(self, cfg: TrainConfig, task: Task | None = None) -> None:
        self.cfg = cfg
        self.dist = Distributed.from_env(pick_device(cfg.device), cfg.fsdp)
        self.device = self.dist.device
        if cfg.threads is not None:
            if cfg.threads < 1:
                raise ValueError(f"threads must be >= 1, got {cfg.threads}")
            torch.set_num_threads(cfg.threads)
        elif self.dist.enabled and self.device.type == "cpu":
            # torchrun sets OMP_NUM_THREADS=1 for each rank; share the cores among the local ranks instead.
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // self.dist.local_world))
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.task = task or make_task(cfg, self.device)
        self.model = build_model(cfg, self.task, self.device, self.dist.world if self.dist.fsdp else 1)
        self.model.to(self.device)
        torch.manual_seed(cfg.seed + self.dist.rank)  # but each rank its own dropout masks
        self.forward_model: nn.Module = self.dist.wrap(self.model)
        # After wrapping: FSDP replaces the parameters with sharded ones, which the optimiser must hold.
        self.optimizer = make_optimizer(self.model, cfg, self.device)
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
        self.last_line: dict[str, Any] = {}
        self.last_eval: dict[str, Any] | None = None
        self._signal: int | None = None
        self._stop_agreed = False
        self._saved_step: int | None = None
        self._cpu_copy: Model | None = None
        self._peak_flops: float | None = None

    # ---------------------------------------------------------------- writing, on rank 0 only
    def _on_main(self, what: str, path: Path, write: Callable[[], Any]) -> Any:
        """Run `write` on rank 0; if it fails, every rank stops with the same one-line error."""
        from safetensors import SafetensorError
        result, error = None, None
        if self.dist.is_main:
            try:
                result = write()
            except (OSError, RuntimeError, SafetensorError) as e:  # torch.save reports a failed write as RuntimeError
                error = _write_error(what, path, e)
        error = self.dist.broadcast(error)
        if error:
            raise TrainingError(error)
        return result

    def _prepare_run_dir(self) -> None:
        d = self.run_dir
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK):
            raise PermissionError(13, "Permission denied (not writable)")
        _remove_temp_files(d)
        if self.cfg.resume and list_checkpoints(d):
            return
        for name in RUN_FILES:  # a fresh run (or a resume with nothing to resume) replaces an old one
            (d / name).unlink(missing_ok=True)
        shutil.rmtree(d / CKPT_DIR, ignore_errors=True)

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
            self.dist.load_state(self.model, self.optimizer, state["model"], state["optimizer"])
            torch.set_rng_state(mine["cpu"])
            if "cuda" in mine and self.device.type == "cuda":
                torch.cuda.set_rng_state(mine["cuda"], self.device)
            self.step, self.sums = int(state["step"]), dict(state["sums"])
            self.metrics_lines, self.elapsed = int(state["metrics_lines"]), float(state["elapsed"])
            self.last_line = dict(state["last_line"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise CheckpointError(f"checkpoint {path} does not fit this run: {str(e).splitlines()[0][:300]} "
                                  f"(delete it to resume from an earlier one)") from None
        self._saved_step = self.step

        def truncate_metrics() -> None:  # lines written after the checkpoint will be written again
            metrics = self.run_dir / "metrics.jsonl"
            lines = metrics.read_text().splitlines(keepends=True)[:self.metrics_lines] if metrics.exists() else []
            atomic_write(metrics, lambda f: f.write("".join(lines).encode()))
        self._on_main("rewrite", self.run_dir / "metrics.jsonl", truncate_metrics)
        if self.dist.is_main:
            print(f"resumed from {path} at step {self.step}/{self.total_steps}")
        return True

    def _checkpoint(self) -> Path | None:
        if self._saved_step == self.step:  # e.g. a signal right after an evaluation's checkpoint
            return list_checkpoints(self.run_dir)[-1] if self.dist.is_main else None
        model_state, optim_state = self.dist.state(self.model, self.optimizer)
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        rngs = self.dist.gather(rng)  # each rank's own, so dropout continues exactly on every rank
        state = {"step": self.step, "model": model_state, "optimizer": optim_state,
                 "model_config": dict(self.model.config.__dict__), "sums": self.sums, "rng": rngs,
                 "metrics_lines": self.metrics_lines, "elapsed": self.elapsed, "last_line": self.last_line}
        path = self.run_dir / CKPT_DIR / f"step-{self.step:09d}.pt"
        self._on_main("write the checkpoint", path,
                      lambda: save_checkpoint(self.run_dir, self.step, state, keep=self.cfg.keep_checkpoints))
        self._saved_step = self.step
        return path if self.dist.is_main else None

    # ---------------------------------------------------------------- the loop
    def train_step(self) -> float:
        cfg, step, world = self.cfg, self.step, self.dist.world
        lr = lr_at(step, self.total_steps, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        (x, y), n_global = self.task.batch(step, self.dist.rank, world)
        # Every rank runs the same number of chunks (FSDP gathers weights in each forward). A chunk
        # left empty (more chunks or ranks than examples) runs a stand-in example with weight 0.
        chunks = cfg.grad_accum
        spare = (x[:1], y[:1]) if len(x) else tuple(t[:1] for t in self.task.batch(step, 0, world)[0])
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        stats: dict[str, Tensor] = {}
        for i, (xc, yc) in enumerate(zip(torch.tensor_split(x, chunks), torch.tensor_split(y, chunks))):
            real = len(xc)
            if not real:
                xc, yc = spare
            with self.dist.grad_sync(self.forward_model, i == chunks - 1), autocast(cfg.amp, self.device):
                loss, chunk_stats = self.task.loss(self.forward_model, (xc, yc))
                # Weight by this chunk's share of the global batch; DDP and FSDP average over ranks.
                weighted = loss * (real / n_global * world)
            weighted.backward()
            loss_sum += loss.detach().double() * real
            for k, v in chunk_stats.items():
                stats[k] = stats.get(k, 0) + torch.as_tensor(v, dtype=torch.float64, device=self.device) * bool(real)
        keys = sorted(stats)
        # One all-reduce per step: the loss, the task's counts, and whether any rank was asked to stop.
        stop = torch.tensor(float(self._signal is not None), dtype=torch.float64, device=self.device)
        totals = self.dist.sum(torch.stack([loss_sum, stop, *(stats[k] for k in keys)])).tolist()
        loss_value, self._stop_agreed = totals[0] / n_global, totals[1] > 0
        if not math.isfinite(loss_value):
            raise TrainingError(f"the loss became {loss_value} at step {step + 1}; stopping. The last good "
                                f"checkpoint is kept in {self.run_dir}/{CKPT_DIR} (try a lower --lr or --grad-clip)")
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        for k, v in zip(keys, totals[2:]):
            self.sums[k] = self.sums.get(k, 0) + v
        self.sums["loss"] = self.sums.get("loss", 0.0) + loss_value
        self.sums["steps"] = self.sums.get("steps", 0) + 1
        # Throughput counts images or tokens; n_global counts examples (sequences, for a language model).
        per_example = self.task.seq_len if self.task.unit == "tokens" else 1
        self.sums["items"] = self.sums.get("items", 0) + n_global * per_example
        self.step += 1
        return loss_value

    def _should_stop(self) -> bool:
        # Ranks may see a signal at different moments; they stop together at the step all agreed on.
        return self._stop_agreed if self.dist.enabled else self._signal is not None

    def _evaluate_task(self) -> dict[str, Any]:
        with self.dist.gathered(self.model):
            return self.task.evaluate(self.model, self.dist)

    def evaluate(self) -> dict[str, Any]:
        result = self._evaluate_task()
        steps = max(1, self.sums.get("steps", 0))
        line = {"step": self.step, "epoch": round(self.step / self.task.steps_per_epoch, 4),
                "train_loss": self.sums.get("loss", 0.0) / steps,
                **({"train_accuracy": self.sums["correct"] / max(1, self.sums["count"])} if "correct" in self.sums else {}),
                **{k: v for k, v in result.items() if isinstance(v, (int, float))},
                "lr": lr_at(self.step - 1, self.total_steps, self.cfg),
                f"{self.task.unit}_per_s": self.sums.get("items", 0) / max(1e-9, self.sums.get("seconds", 1e-9)),
                "time": round(self.elapsed, 2)}
        self.sums = {}
        path = self.run_dir / "metrics.jsonl"

        def append() -> None:
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")
        self._on_main("append to", path, append)
        self.metrics_lines += 1
        self.last_eval = result
        return line

    def run(self) -> dict[str, Any]:
        try:
            summary = self._run()
        except BaseException:
            self.dist.close(wait=False)  # the other ranks may be gone already
            raise
        self.dist.close(wait=True)
        return summary

    def _run(self) -> dict[str, Any]:
        cfg = self.cfg
        self._on_main("create the run directory", self.run_dir, self._prepare_run_dir)
        resumed = cfg.resume and self._resume()
        self._save_model()
        fpi = flops_per_item(self.model, self.task)
        bar = _progress(self.total_steps, self.step, cfg.progress and self.dist.is_main, self.task.unit)
        old_handlers = _install_signal_handlers(self)
        line = self.last_line
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
                            "mfu": f"{100 * rate * fpi / self._peak():.0f}%"}
                    if "correct" in self.sums:
                        post["acc"] = f"{self.sums['correct'] / max(1, self.sums['count']):.3f}"
                    bar.set_postfix(post, refresh=False)
                if self.step % self.eval_every == 0 or self.step == self.total_steps:
                    line = self.evaluate()
                    line["flops_per_s"] = rate * fpi
                    self.last_line = line
                    if self.dist.is_main:
                        _print_eval(line, bar)
                    self._save_model()
                    self._checkpoint()
                elif cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self._checkpoint()
                if self._should_stop():
                    raise Interrupted(self._signal or signal.SIGTERM, self.step, self._checkpoint())
        finally:
            if bar is not None:
                bar.close()
            _restore_signal_handlers(old_handlers)
        if self.last_eval is None:  # resumed after the final checkpoint: the plots still need the test results
            self.last_eval = self._evaluate_task()
        summary = self._summary(line, resumed)
        self._on_main("write the summary and plots to", self.run_dir, lambda: self._finish(summary))
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

    def _save_model(self) -> None:
        model = self._plain_model()
        extra = {"train": self.cfg.to_dict(), "data": self.task.run_info()}
        self._on_main("write the model", self.run_dir / "model.safetensors", lambda: model.save(self.run_dir, extra=extra))

    def _peak(self) -> float:
        """The device's measured matmul peak, for MFU; measured when first needed (a second or so on a
        CPU), so that a run stopped early never pays for it."""
        if self._peak_flops is None:  # its random matrices must not move the training RNG
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                self._peak_flops = measured_peak_flops(self.device, self.cfg.amp)
        return self._peak_flops

    def _summary(self, line: dict[str, Any], resumed: bool) -> dict[str, Any]:
        peak = self._peak()
        s = {"recipe": self.cfg.recipe, "model": self.cfg.model, "steps": self.step,
             "epochs": round(self.step / self.task.steps_per_epoch, 3), "train_seconds": round(self.elapsed, 2),
             "params": self.model.num_params(), "device": str(self.device),
             "device_name": _device_name(self.device), "world_size": self.dist.world,
             "amp": resolve_amp(self.cfg.amp, self.device),
             f"{self.task.unit}_per_s": round(line.get(f"{self.task.unit}_per_s", 0.0), 1),
             "mfu": round(line.get("flops_per_s", 0.0) / peak, 4), "peak_flops_measured": peak, "resumed": resumed}
        if "eval_accuracy" in line:
            s["test_accuracy"] = line["eval_accuracy"]
            s["test_loss"] = line["eval_loss"]
        elif "eval_loss" in line:
            s["val_loss"] = line["eval_loss"]
            best = min(self._metrics(), key=lambda m: m.get("eval_loss", float("inf")), default=line)
            s["best_val_loss"], s["best_val_step"] = best["eval_loss"], best["step"]
            s["best_val_seconds"] = best["time"]
        return s

    def _metrics(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []

    def _finish(self, summary: dict[str, Any]) -> None:
        """Rank 0: summary.json and the plots (the model is already saved)."""
        atomic_write(self.run_dir / "summary.json", lambda f: f.write(json.dumps(summary, indent=2).encode()))
        from ..viz import plot_confusion, plot_curves, plot_digit_attention
        plot_curves(self.run_dir / "metrics.jsonl", self.run_dir / "curves.png")
        confusion = (self.last_eval or {}).get("confusion")
        if confusion is not None:
            model = self._cpu_copy if self.dist.fsdp else self.model
            plot_confusion(confusion, self.task.test.classes, self.run_dir / "confusion.png")
            _, images, labels = self.task.sample_images(8)
            device = next(model.parameters()).device
            plot_digit_attention(model, images.to(device), labels, self.task.test.classes,
                                 self.run_dir / "attention.png")


def _write_error(what: str, path: Path, e: BaseException) -> str:
    """One line: what could not be written, why, and how much room is left there."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else " ".join(str(e).split())[:200]
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"; {shutil.disk_usage(where).free / 2**20:,.0f} MiB free there"
    except OSError:
        free = ""
    return f"cannot {what} {path}: {reason}{free}. Free some space or choose another --out"


def _remove_temp_files(run_dir: Path) -> None:
    """Temporary files of writes cut short by a kill (atomic writes name them '.<target>.*')."""
    for folder in (run_dir, run_dir / CKPT_DIR):
        if folder.is_dir():
            for p in folder.iterdir():
                if p.name.startswith(".") and p.is_file() and (
                        p.name[1:].startswith(tuple(f"{n}." for n in RUN_FILES)) or p.name.startswith(".step-")):
                    p.unlink(missing_ok=True)


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
        if trainer._signal is not None:  # asked twice: stop now; the last checkpoint is intact
            raise KeyboardInterrupt
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
