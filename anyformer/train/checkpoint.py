"""A run's checkpoints, all in one place: the file (how it is written, named, listed and read) and
the trainer's side (what it holds, `save`, and how --resume puts it back with `restore`).

A checkpoint holds the model (and its EMA, when the run keeps one), the best evaluation's weights
(when the run keeps those), optimiser, step, the running epoch sums, each rank's RNG state, how many
metrics lines had been written, and the plan in force,
so that a resumed run continues to the bit where the uninterrupted one would have gone.
It is written to a temporary file and flushed to disk (`stage_checkpoint`), then renamed to its
name (`commit_checkpoint`), so the name `step-N.pt` is the mark that a checkpoint is complete, and a
temporary file that a kill left half-written is never read (RunDir.prepare removes it). The last K
are kept. It carries a SHA-256 of its contents: the zip format does not check the tensor bytes, and
a flipped byte would otherwise load as a silently different weight. It is read with
`weights_only=True`, so reading one never runs code.

Under torchrun a checkpoint is committed in two phases (`save`): rank 0 stages it, every rank checks
that it sees that file whole (on several machines: that the run directory is on a file system they
share), and only then does rank 0 rename it to `step-N.pt`. A rank that dies anywhere before the
rename leaves no `step-N.pt`, so a restarted job resumes from the last checkpoint that every rank
finished; rank 0 chooses it and every rank reads it (`restore`).

`TrainingError` (the run cannot go on) is defined here because `save` raises it and rundir.py, which
raises it too, imports this module; rundir.py and the package export it as before.
"""
from __future__ import annotations

import hashlib
import pickle
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..files import commit, write_temp
from .own_model import config_dict

if TYPE_CHECKING:
    from .distributed import Distributed
    from .rundir import RunDir
    from .trainer import Trainer

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d{9})\.pt$")
_DIGEST = "sha256"


class TrainingError(ValueError):
    """The run cannot go on (a non-finite loss, a checkpoint that does not fit, a failed write)."""


class CheckpointError(ValueError):
    """A checkpoint that is damaged, foreign, or unsafe to read."""


@dataclass
class Checkpoint:
    """What a checkpoint holds, a field a thing: written as a plain dict of these names (`state`), read
    back by `from_state`, so that the file stays tensors and plain data."""
    step: int                       # the steps done
    model: dict[str, Any]           # the weights (gathered whole under FSDP)
    optimizer: dict[str, Any]       # AdamW's moments and step counts
    model_config: dict[str, Any]    # what the weights belong to: a resume into another model is refused
    sums: dict[str, Any]            # the running epoch sums the metrics lines report
    rng: list[dict[str, Any]]       # each rank's RNG states, so dropout continues exactly
    metrics_lines: int              # metrics.jsonl lines written (later ones are written again)
    elapsed: float                  # training seconds so far
    last_line: dict[str, Any]       # the last metrics line (the summary reads it)
    plan: dict[str, Any] | None     # the speed plan in force
    total_steps: int | None = None  # the run's length (a budget fitted it; a resume keeps it; old files lack it)
    scaler: dict[str, Any] | None = None  # fp16's loss scale
    ema: dict[str, Any] | None = None     # the EMA weights (--ema)
    best: Any = None                # the best evaluation's weights (--select-fraction)

    def state(self) -> dict[str, Any]:
        """The dict written to the file: every field, the optional ones only where the run keeps them."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.default is not None or getattr(self, f.name) is not None}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Checkpoint:
        """The fields from a loaded dict (`load_checkpoint`); a missing required one is a TypeError, which
        `restore` reports as a checkpoint that does not fit."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in names})


# ---------------------------------------------------------------- the file: stage, commit, list, load
def digest(obj: Any) -> str:
    """SHA-256 of a state: every tensor's dtype, shape and bytes, every other value's repr, in order."""
    h = hashlib.sha256()

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(o.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().data if t.numel() else b"")
        elif isinstance(o, dict):
            h.update(f"D{len(o)}".encode())
            for k, v in o.items():
                walk(k)
                walk(v)
        elif isinstance(o, (list, tuple)):
            h.update(f"L{len(o)}".encode())
            for v in o:
                walk(v)
        else:
            h.update(f"{type(o).__name__}:{o!r};".encode())
    walk(obj)
    return h.hexdigest()


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step-{step:09d}.pt"


def stage_checkpoint(run_dir: Path, step: int, state: dict[str, Any]) -> tuple[str, int]:
    """Write step `step`'s checkpoint to a temporary file beside its name, flushed to disk:
    (its temporary name, its size in bytes). Nothing reads it until `commit_checkpoint` names it."""
    state = {**state, _DIGEST: digest(state)}
    tmp = write_temp(checkpoint_path(run_dir, step), lambda f: torch.save(state, f))
    return tmp, Path(tmp).stat().st_size


def commit_checkpoint(run_dir: Path, step: int, tmp: str, keep: int = 2) -> Path:
    """Give a staged checkpoint its name (an atomic rename), then drop all but the last `keep`."""
    path = checkpoint_path(run_dir, step)
    commit(tmp, path)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / CKPT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True` (tensors and plain containers only, no code) and
    check its SHA-256."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        code = re.search(r"GLOBAL (\S+)", str(e))
        if code:  # the pickle names a function or class to call: that is code, not data
            raise CheckpointError(f"refusing to load {path}: it asks to run {code.group(1)}, and a checkpoint "
                                  f"holds only tensors and plain data; do not use this file") from None
        reason = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
        raise CheckpointError(f"refusing to load {path}: it is not a checkpoint of tensors and plain data "
                              f"({reason.group(1).strip()[:120] if reason else 'unreadable pickle'})") from None
    except Exception as e:  # noqa: BLE001 - whatever a damaged zip or pickle raises, it is damage
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state or _DIGEST not in state:
        raise CheckpointError(f"{path} is not an anyformer training checkpoint")
    expected = state.pop(_DIGEST)
    if digest(state) != expected:
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the SHA-256 written "
                              f"with it (delete it to resume from an earlier one)")
    return state

# ---------------------------------------------------------------- the trainer's side: save, restore
def save(t: Trainer) -> Path | None:
    """Write a checkpoint of step `t.step` (every rank takes part; rank 0 writes) and the plan beside
    it; its path on rank 0. A step already saved is not written twice."""
    if t.pending:  # the sums it saves, and a loss found non-finite before it is written
        t.sync()
    step, dist, files = t.step, t.dist, t.files
    if t.saved_step == step:  # e.g. a signal right after an evaluation's checkpoint
        return list_checkpoints(files.path)[-1] if dist.is_main else None
    path = _write_everywhere(dist, files, step, state_of(t).state(), keep=t.cfg.keep_checkpoints)
    t.write_plan()
    t.saved_step = step
    return path if dist.is_main else None


def state_of(t: Trainer) -> Checkpoint:
    """What trainer `t` holds at its step, as a Checkpoint (collective: under FSDP the weights are
    gathered whole, and every rank's RNG state is gathered to rank 0)."""
    model_state, optim_state = t.dist.state(t.model, t.optimizer)
    rng = {"cpu": torch.get_rng_state()}
    if t.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(t.device)
    return Checkpoint(
        step=t.step, model=model_state, optimizer=optim_state, model_config=config_dict(t.model), sums=t.sums,
        rng=t.dist.gather(rng),  # each rank's own, so dropout continues exactly on every rank
        metrics_lines=t.metrics_lines, elapsed=t.elapsed, last_line=t.last_line,
        plan=t.step_plan.state(), total_steps=t.total_steps,
        scaler=None if t.scaler is None else t.scaler.state_dict(),
        ema=None if t.ema is None else t.ema.state_dict(),
        best=t.kept.state())  # the weights a run keeps (--select-fraction) continue across a resume


def _write_everywhere(dist: Distributed, files: RunDir, step: int, state: dict[str, Any], keep: int) -> Path:
    """The two-phase commit: rank 0 stages the file, every rank checks that it sees it whole, then rank 0
    names it. A failure anywhere before the rename leaves no `step-N.pt`, and the staged file goes."""
    path = checkpoint_path(files.path, step)
    staged = files.on_main("write the checkpoint", path, lambda: stage_checkpoint(files.path, step, state))
    try:
        tmp, size = dist.broadcast(staged)
        blind = [rank for rank, seen in enumerate(dist.all_gather(_sees(tmp, size))) if not seen]
        if blind:  # a run directory on each machine's own disk: the others could never resume from it
            raise TrainingError(f"rank {', '.join(map(str, blind))} cannot see the checkpoint rank 0 wrote ({tmp}, "
                                f"{size} bytes): under torchrun --out must be a folder every machine sees (a "
                                f"shared file system), since rank 0 alone writes it and every rank reads it")
        files.on_main("write the checkpoint", path, lambda: commit_checkpoint(files.path, step, tmp, keep=keep))
    except BaseException:  # a rank lost, or blind: the staged file is never named, and goes
        if dist.is_main:
            Path(staged[0]).unlink(missing_ok=True)
        raise
    return path


def _put_back(t: Trainer, c: Checkpoint) -> None:
    """The checkpoint's state into the trainer `t` (its model, optimiser, RNG, sums and counts)."""
    mine = c.rng[t.dist.rank] if len(c.rng) == t.dist.world else c.rng[0]
    # load_state_dict takes the saved run's fused/foreach flags, but the optimiser's loss-scaling
    # support was set when it was built: keep the implementation this run's plan chose.
    impl = [(g.get("fused"), g.get("foreach")) for g in t.optimizer.param_groups]
    t.dist.load_state(t.model, t.optimizer, c.model, c.optimizer)
    for group, (fused, foreach) in zip(t.optimizer.param_groups, impl):
        group["fused"], group["foreach"] = fused, foreach
    torch.set_rng_state(mine["cpu"])
    if "cuda" in mine and t.device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda"], t.device)
    if t.ema is not None:
        if c.ema is None:
            raise KeyError("it holds no EMA weights, and this run keeps an EMA (--ema)")
        t.ema.load_state_dict(c.ema)
    if t.scaler is not None and c.scaler is not None:
        t.scaler.load_state_dict(c.scaler)
    t.step, t.sums = int(c.step), dict(c.sums)
    t.metrics_lines, t.elapsed, t.last_line = int(c.metrics_lines), float(c.elapsed), dict(c.last_line)
    t.kept.load(c.best)
    if t.budget is not None and c.total_steps is not None:  # the steps a budget fitted; what is left is re-fitted
        t.total_steps = int(c.total_steps)


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
        _put_back(t, Checkpoint.from_state(state))
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise CheckpointError(f"checkpoint {path} does not fit this run: {str(e).splitlines()[0][:300]} "
                              f"(delete it to resume from an earlier one)") from None
    t.saved_step = t.step
    t.files.keep_metrics(t.metrics_lines)  # lines written after the checkpoint will be written again
    if t.dist.is_main:
        print(f"resumed from {path} at step {t.step}/{t.total_steps}")
    return True
