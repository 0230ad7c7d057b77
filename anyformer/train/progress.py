"""What a training run says as it goes: its first line, the progress bar, each evaluation's line,
and the summary it ends with."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .own_model import count_params, is_own
from .planning import cpu_info
from .precision import resolve_amp

if TYPE_CHECKING:
    from .trainer import Trainer

SYNC_SECONDS = 0.5      # tqdm's refresh interval: a bar redrawn no faster shows nothing newer

PRECISION = {"none": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_info()['model']} ({torch.get_num_threads()} threads)"


def progress_bar(total: int, start: int, enabled: bool):
    """A tqdm bar over the run's steps, or None where it is not shown."""
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, mininterval=SYNC_SECONDS,
                desc="train", leave=True)


def intro(t: Trainer) -> str:
    """The run's first line: what is trained, on which data, where, in what precision, how long."""
    cfg, info = t.cfg, t.task.run_info()
    if "train_tokens_used" in info:
        data = f"{cfg.data}: {info['train_tokens_used']:,} training tokens"
    else:
        data = f"{cfg.data}: {info.get('train_examples', 0):,} training examples"
    steps = f"{t.total_steps:,} steps ({t.total_steps / t.task.steps_per_epoch:.2f} epochs)"
    budget = f", at most {cfg.time_budget:.0f} s" if cfg.time_budget else ""
    world = f" x {t.dist.world} processes" if t.dist.world > 1 else ""
    precision = PRECISION[resolve_amp(cfg.amp, t.device)]
    name = type(t.model).__name__ if is_own(t.model) else cfg.model
    return (f"train {name} ({count_params(t.model):,} parameters) on {data} | {device_name(t.device)}{world} | "
            f"{precision} | {steps}{budget} -> {t.run_dir}")


def bar_fields(t: Trainer, rate: float, flops_per_item: float) -> dict[str, str]:
    loss = {} if t.last_loss is None else {"loss": f"{t.last_loss:.4f}"}
    return {**loss, f"{t.task.unit[:3]}/s": f"{rate:.0f}", "mfu": f"{100 * rate * flops_per_item / t.peak.flops():.0f}%",
            **t.task.progress_fields(t.sums)}


def eval_message(t: Trainer, line: dict[str, Any]) -> str:
    parts = [f"step {line['step']}", f"epoch {line['epoch']:.2f}", f"train loss {line['train_loss']:.4f}",
             t.task.eval_text(line), f"{line['time']:.0f}s"]
    return " | ".join(p for p in parts if p)


def summary(t: Trainer, line: dict[str, Any], resumed: bool) -> dict[str, Any]:
    """The run's summary.json: its settings' outcome, speed and plan, then the task's own fields."""
    if t.dist.is_main:  # a kept rate below the run's own steps is measured again (the summary is the main rank's)
        t.peak.recheck(line.get("flops_per_s", 0.0))
    cfg, peak, unit = t.cfg, t.peak.flops(), f"{t.task.unit}_per_s"
    # A module of the user's own is named by its class, not by the preset the data would have derived.
    s = {"recipe": cfg.recipe, "model": type(t.model).__name__ if is_own(t.model) else cfg.model, "steps": t.step,
         "epochs": round(t.step / t.task.steps_per_epoch, 3), "train_seconds": round(t.elapsed, 2),
         "params": count_params(t.model), "device": str(t.device), "device_name": device_name(t.device),
         "world_size": t.dist.world, "amp": resolve_amp(cfg.amp, t.device), unit: round(line.get(unit, 0.0), 1),
         "mfu": round(line.get("flops_per_s", 0.0) / peak, 4), "peak_flops": peak,
         "peak_flops_source": t.peak.source(), "resumed": resumed,
         "plan_seconds": round(t.step_plan.planning_seconds(), 2), "compile": t.step_plan.compile_choice,
         "linears": t.step_plan.linears_choice, "plan": cfg.plan, "plan_choices": len(t.step_plan.plan["answers"]),
         "time_budget": cfg.time_budget}
    return {**s, **t.task.summary_fields(line, t.files.read_metrics())}
