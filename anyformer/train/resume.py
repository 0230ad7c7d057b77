"""A run keeps its own settings: `--resume` continues a run with the settings its config.json
recorded, a setting asked for that contradicts them is refused, and `--out` never replaces a run
unless `--overwrite` says so. `--resume auto` decides by what the directory holds (`resumes`): the
one command that both starts a run and, relaunched or restarted by torchrun, continues it.
`settings_to_run` is the command line's one pass: the run's settings read once, and the decision
(fresh, resume, continue past the end, or refuse) made there."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..models import read_config
from .checkpoint import CKPT_DIR

# Settings a resumed run may change: where it is written, how it is watched and what it runs on,
# never what it computes (FSDP and DDP hold the same numbers: a run killed under one resumes under the other).
FREE_ON_RESUME = frozenset({"out", "resume", "overwrite", "progress", "plots", "threads", "device", "fsdp",
                            "keep_checkpoints", "checkpoint_every", "log"})


def recorded_settings(run_dir: str | Path) -> dict[str, Any] | None:
    """The training settings a run recorded in its config.json (None where it holds no run's);
    a damaged config.json is refused by `read_config` in one line."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return None
    meta = json.loads(path.read_text()) if _own_run(path) else read_config(run_dir)
    train = meta.get("train")
    return train if isinstance(train, dict) else None


def _own_run(path: Path) -> bool:
    """A run of the user's own module (train.fit), whose config.json names no preset to read."""
    try:
        return json.loads(path.read_text()).get("family") == "own"
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False  # read_config says what is wrong with it


def contradictions(recorded: dict[str, Any], asked: dict[str, Any]) -> list[str]:
    """'--name VALUE (the run has VALUE)' for each setting asked that differs from the recorded one."""
    out = []
    for key, value in asked.items():
        if key in FREE_ON_RESUME or key not in recorded:
            continue
        have = recorded[key]
        if key == "model_overrides":  # only the overrides asked for are compared
            differ = {k: v for k, v in (value or {}).items() if have.get(k) != v}
            out += [f"--set {k}={json.dumps(v)} (the run has {k}={json.dumps(have.get(k))})" for k, v in differ.items()]
        elif _plain(value) != _plain(have):
            flag = "the recipe" if key == "recipe" else f"--{key.replace('_', '-')}"
            out.append(f"{flag} {json.dumps(_plain(value))} (the run has {json.dumps(_plain(have))})")
    return out


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def settings_to_run(run_dir: str | Path, asked: dict[str, Any], resume: bool | str,
                    overwrite: bool = False, say: Callable[[str], None] = print) -> tuple[bool, dict[str, Any] | None]:
    """The one pass from a command line to a run's settings, the run's config.json read once:
    (whether the run resumes, the settings it runs with; None: a fresh run, derived from the recipe).

    - `resume="auto"`: resume where `run_dir` holds a run, start one where it holds none (`--overwrite`
      with it is refused: the two ask opposite things);
    - resume: the settings the run recorded, with the free ones asked for (FREE_ON_RESUME) on top; a
      setting asked that contradicts them is refused in one line naming both values;
    - resume with another `max_steps` on a finished run: the run continued past its end (`extended_settings`).
    `say` prints what was decided where it is not plain (rank 0 alone under torchrun)."""
    if resume == "auto" and overwrite:
        raise ValueError("--resume auto continues the run --out holds, and --overwrite replaces it: give one of them")
    if not resume:  # a fresh run: the trainer refuses a directory that holds one (check_fresh_out)
        return False, None
    recorded, unreadable = _read(run_dir, refuse=resume is True)
    if resume == "auto":
        resume = _holds_run(run_dir, recorded, unreadable)
        if not resume:
            say(f"--resume auto: no run in {run_dir} yet; starting one")
    if not resume or recorded is None:
        return bool(resume), None
    max_steps = asked.get("max_steps")
    if max_steps is not None and recorded.get("max_steps") != max_steps and (Path(run_dir) / "summary.json").is_file():
        settings = extended_settings(run_dir, max_steps, asked, recorded)
        say(f"continuing {run_dir}: {settings['extended'][-1]['schedule']}")
        return True, settings
    check_resume(run_dir, recorded, asked)
    return True, {**recorded, **{k: v for k, v in asked.items() if k in FREE_ON_RESUME}, "resume": True}


def _read(run_dir: str | Path, refuse: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(the recorded settings or None, why they could not be read or None); `refuse`: raise instead."""
    try:
        return recorded_settings(run_dir), None
    except (ValueError, OSError) as e:  # a config.json that is not a run's, or not readable
        if refuse:
            raise
        return None, " ".join(str(e).split())[:200]


# What continuing a finished run past its end changes (`extended_settings`), and nothing else may.
EXTENSION = ("max_steps", "epochs", "time_budget", "extended")


def check_resume(run_dir: str | Path, recorded: dict[str, Any], asked: dict[str, Any]) -> None:
    if len(asked.get("extended") or []) > len(recorded.get("extended") or []):
        asked = {k: v for k, v in asked.items() if k not in EXTENSION}
    bad = contradictions(recorded, asked)
    if bad:
        raise ValueError(f"--resume continues {run_dir} with the settings it recorded in config.json, but "
                         f"{'; '.join(bad)}: leave {'them' if len(bad) > 1 else 'it'} out to continue the run, "
                         f"or start afresh with --overwrite")


# What marks a directory as holding a run (a fresh run refuses it; --resume auto resumes it).
RUN_MARKS = ("config.json", "model.safetensors", CKPT_DIR)


def held(run_dir: str | Path) -> list[str]:
    """The names in `run_dir` that mark a run (RUN_MARKS), in that order."""
    d = Path(run_dir)
    return [name for name in RUN_MARKS if (d / name).exists()] if d.is_dir() else []


def resumes(run_dir: str | Path) -> bool:
    """`--resume auto`: True where `run_dir` holds a training run (its config.json records the
    settings to resume with), False where it holds none (start one). A directory that holds a run's
    files but no training run's config.json (a saved model, another program's files) is refused."""
    return _holds_run(run_dir, *_read(run_dir, refuse=False))


def _holds_run(run_dir: str | Path, recorded: dict[str, Any] | None, unreadable: str | None) -> bool:
    marks = held(run_dir)
    if not marks:
        return False
    if recorded is not None:
        return True
    why = unreadable or ("its config.json records no training settings" if (Path(run_dir) / "config.json").is_file()
                         else "no config.json records its settings")
    raise ValueError(f"--resume auto: {run_dir} holds {', '.join(marks)} but no training run to resume ({why}); "
                     f"choose another --out, or --overwrite to replace what it holds")


def check_fresh_out(run_dir: str | Path, resume: bool, overwrite: bool, restarted: bool = False) -> None:
    """Refuse to train into a directory that holds a run, unless resuming it or told to overwrite it.
    `restarted`: torchrun restarted the workers (the refusal then says how to launch instead)."""
    if resume or overwrite:
        return
    marks = held(run_dir)
    if marks and restarted:
        raise ValueError(f"{run_dir} holds the run this job began ({', '.join(marks)}), and torchrun has restarted "
                         f"its workers: launch with --resume auto, so that a restart continues the run")
    if marks:
        raise ValueError(f"{run_dir} holds a run already ({', '.join(marks)}); pass --resume to continue it, "
                         f"--overwrite to replace it, or choose another --out")


def extended_settings(run_dir: str | Path, max_steps: int, asked: dict[str, Any],
                      recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings that continue a finished run past its end (`--resume --max-steps N`): those it
    recorded, now `max_steps` long, without a time budget (a length asked for is taken as asked),
    with the added steps' schedule recorded in `extended`. The added steps follow the learning rate
    of a run asked for `max_steps` from the start: the same warm-up, the same schedule stretched to
    the new end, so the rate rises again from where the old run had brought it down. `recorded`: the
    settings the run recorded, where the caller has read them already."""
    recorded = recorded_settings(run_dir) if recorded is None else recorded
    if recorded is None:
        raise ValueError(f"--resume --max-steps {max_steps}: {run_dir} holds no run to continue")
    summary = Path(run_dir) / "summary.json"
    if not summary.is_file():
        raise ValueError(f"--max-steps {max_steps} continues a finished run, and {run_dir} has not finished (no "
                         f"summary.json); resume it without --max-steps first")
    done = int(json.loads(summary.read_text()).get("steps", 0))
    if max_steps <= done:
        raise ValueError(f"{run_dir} has run {done} steps already; --max-steps {max_steps} must be past that "
                         f"to continue it")
    check_resume(run_dir, recorded, {k: v for k, v in asked.items() if k not in EXTENSION})
    schedule = recorded.get("schedule", "cosine")
    added = {"from_step": done, "to_step": max_steps,
             "schedule": f"the learning rate of a {max_steps}-step run ({schedule}, the same "
                         f"{recorded.get('warmup_steps', 0)}-step warm-up) from step {done} on"}
    return {**recorded, **{k: v for k, v in asked.items() if k in FREE_ON_RESUME}, "resume": True,
            "max_steps": max_steps, "time_budget": None, "extended": [*recorded.get("extended", []), added]}
