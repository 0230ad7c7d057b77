"""A run's checkpoints from the trainer's side: what a checkpoint holds (weights, optimiser, each
rank's RNG, the loop's sums and counters, the plan in force) and how --resume puts it back, so that
a resumed run continues to the bit where the uninterrupted one would have gone.

Under torchrun a checkpoint is committed in two phases: rank 0 writes it under a temporary name,
every rank checks that it sees that file whole (on several machines: that the run directory is
on a file system they share), and only then does rank 0 rename it to `step-N.pt`. A rank that dies
anywhere before the rename leaves no `step-N.pt`, so a restarted job resumes from the last
checkpoint that every rank finished; rank 0 chooses it and every rank reads it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .checkpoint import (CKPT_DIR, CheckpointError, checkpoint_path, commit_checkpoint, list_checkpoints,
                         load_checkpoint, stage_checkpoint)
from .rundir import TrainingError
from .own_model import config_dict

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = ["restore", "save"]


def save(t: Trainer) -> Path | None:
    """Write a checkpoint of step `t.step` (every rank takes part; rank 0 writes) and the plan beside
    it; its path on rank 0. A step already saved is not written twice."""
    if t.pending:  # the sums it saves, and a loss found non-finite before it is written
        t.sync()
    if t.saved_step == t.step:  # e.g. a signal right after an evaluation's checkpoint
        return list_checkpoints(t.run_dir)[-1] if t.dist.is_main else None
    model_state, optim_state = t.dist.state(t.model, t.optimizer)
    rng = {"cpu": torch.get_rng_state()}
    if t.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(t.device)
    rngs = t.dist.gather(rng)  # each rank's own, so dropout continues exactly on every rank
    state: dict[str, Any] = {
        "step": t.step, "model": model_state, "optimizer": optim_state,
        "model_config": config_dict(t.model), "sums": t.sums, "rng": rngs,
        "metrics_lines": t.metrics_lines, "elapsed": t.elapsed, "last_line": t.last_line,
        "total_steps": t.total_steps, "plan": t.step_plan.state()}
    if t.scaler is not None:
        state["scaler"] = t.scaler.state_dict()
    if t.ema is not None:
        state["ema"] = t.ema.state_dict()
    path = checkpoint_path(t.run_dir, t.step)
    staged = t.files.on_main("write the checkpoint", path, lambda: stage_checkpoint(t.run_dir, t.step, state))
    try:
        tmp, size = t.dist.broadcast(staged)
        blind = [rank for rank, seen in enumerate(t.dist.all_gather(_sees(tmp, size))) if not seen]
        if blind:  # a run directory on each machine's own disk: the others could never resume from it
            raise TrainingError(f"rank {', '.join(map(str, blind))} cannot see the checkpoint rank 0 wrote ({tmp}, "
                                f"{size} bytes): under torchrun --out must be a folder every machine sees (a "
                                f"shared file system), since rank 0 alone writes it and every rank reads it")
        t.files.on_main("write the checkpoint", path,
                        lambda: commit_checkpoint(t.run_dir, t.step, tmp, keep=t.cfg.keep_checkpoints))
    except BaseException:  # a rank lost, or blind: the staged file is never named, and goes
        if t.dist.is_main:
            Path(staged[0]).unlink(missing_ok=True)
        raise
    t.write_plan()
    t.saved_step = t.step
    return path if t.dist.is_main else None


def _sees(tmp: str, size: int) -> bool:
    try:
        return Path(tmp).stat().st_size == size
    except OSError:
        return False


def restore(t: Trainer) -> bool:
    """--resume: load the run's last checkpoint into `t`; False where it has none (from step 0).
    Rank 0 chooses it, every rank reads it, and a rank that cannot stops every rank with its error."""
    last = list_checkpoints(t.run_dir)[-1:] if t.dist.is_main else None
    path = t.dist.broadcast(last)
    if not path:
        if t.dist.is_main:
            print(f"--resume: no checkpoint in {t.run_dir}/{CKPT_DIR}, starting from step 0")
        return False
    path = path[0]
    state, error = None, None
    try:
        state = load_checkpoint(path)
    except CheckpointError as e:
        error = str(e)
    errors = [(rank, e) for rank, e in enumerate(t.dist.all_gather(error)) if e]
    if errors:
        rank, first = errors[0]
        raise CheckpointError(first if t.dist.world == 1 else f"rank {rank}: {first}")
    if state.get("model_config") != config_dict(t.model):
        raise CheckpointError(f"checkpoint {path} belongs to another model ({state.get('model_config')}), "
                              f"not to {t.cfg.model} ({config_dict(t.model)})")
    try:  # every rank reads the same file; nothing on disk changes until it has all been read
        rngs = state["rng"]
        mine = rngs[t.dist.rank] if len(rngs) == t.dist.world else rngs[0]
        # load_state_dict takes the saved run's fused/foreach flags, but the optimiser's loss-scaling
        # support was set when it was built: keep the implementation this run's plan chose.
        impl = [(g.get("fused"), g.get("foreach")) for g in t.optimizer.param_groups]
        t.dist.load_state(t.model, t.optimizer, state["model"], state["optimizer"])
        for group, (fused, foreach) in zip(t.optimizer.param_groups, impl):
            group["fused"], group["foreach"] = fused, foreach
        torch.set_rng_state(mine["cpu"])
        if "cuda" in mine and t.device.type == "cuda":
            torch.cuda.set_rng_state(mine["cuda"], t.device)
        if t.ema is not None:
            if "ema" not in state:
                raise KeyError("it holds no EMA weights, and this run keeps an EMA (--ema)")
            t.ema.load_state_dict(state["ema"])
        if t.scaler is not None and "scaler" in state:
            t.scaler.load_state_dict(state["scaler"])
        t.step, t.sums = int(state["step"]), dict(state["sums"])
        t.metrics_lines, t.elapsed = int(state["metrics_lines"]), float(state["elapsed"])
        t.last_line = dict(state["last_line"])
        if t.budget is not None:  # the steps a time budget fitted; this process re-fits what is left
            t.total_steps = int(state.get("total_steps", t.total_steps))
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise CheckpointError(f"checkpoint {path} does not fit this run: {str(e).splitlines()[0][:300]} "
                              f"(delete it to resume from an earlier one)") from None
    t.saved_step = t.step
    t.files.keep_metrics(t.metrics_lines)  # lines written after the checkpoint will be written again
    if t.dist.is_main:
        print(f"resumed from {path} at step {t.step}/{t.total_steps}")
    return True
