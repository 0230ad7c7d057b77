"""The machine's timings cache (what the speed plan measured here): one JSON file per machine key, in
the user's cache folder.

Location: `$ANYFORMER_CACHE/plan/`, else `$XDG_CACHE_HOME/anyformer/plan/`, else
`~/.cache/anyformer/plan/`. A file that cannot be read, is not JSON, has another format or was
written for another machine is ignored (its decisions are measured again and the file replaced);
an entry that is malformed is dropped alone. Writes are atomic (`anyformer.files`). Before a
write the file on disk is read again and merged, so two processes measuring at once lose at most
the entries both measured (the last write wins); nothing is locked across processes.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..files import atomic_write_text

FORMAT = "anyformer-plan/1"
ENV_CACHE = "ANYFORMER_CACHE"


def cache_root() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "anyformer"


def plan_dir() -> Path:
    return cache_root() / "plan"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def entry_key(decision: str, fields: Mapping[str, Any]) -> str:
    """'linear rows=4096 in=64 out=192 dtype=float32 training=1': readable, and stable for a shape."""
    def show(v: Any) -> str:
        return str(int(v)) if isinstance(v, bool) else str(v)
    return " ".join([decision, *(f"{k}={show(v)}" for k, v in fields.items())])


def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("decision"), str) or not isinstance(e.get("choice"), str):
        return False
    times = e.get("times")
    return isinstance(times, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for k, v in times.items())


def load(path: Path, machine: Mapping[str, Any]) -> tuple[dict[str, dict], float, str | None]:
    """(entries, planning seconds recorded, why the file was ignored or None)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, 0.0, None
    except (OSError, UnicodeDecodeError) as e:
        return {}, 0.0, f"could not read {path}: {e}"
    try:
        data = json.loads(text)
    except ValueError as e:
        return {}, 0.0, f"{path} is not JSON ({e}); re-measuring"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}, 0.0, f"{path} is not an {FORMAT} file; re-measuring"
    if data.get("machine") != dict(machine):
        return {}, 0.0, f"{path} was written for another machine key; re-measuring"
    raw = data.get("decisions")
    entries = {k: v for k, v in raw.items() if isinstance(k, str) and _valid_entry(v)} if isinstance(raw, dict) else {}
    spent = data.get("planning_s")
    spent = float(spent) if isinstance(spent, (int, float)) and math.isfinite(spent) and spent >= 0 else 0.0
    dropped = (len(raw) if isinstance(raw, dict) else 0) - len(entries)
    return entries, spent, (f"{path}: {dropped} malformed entries ignored" if dropped else None)


def save(path: Path, machine: Mapping[str, Any], entries: Mapping[str, dict], added_s: float) -> float:
    """Merge `entries` into the file (ours win) and add `added_s` to its planning time; returns
    the file's planning time after the write."""
    on_disk, spent, _ = load(path, machine)
    merged = {**on_disk, **entries}
    spent += added_s
    data = {"format": FORMAT, "machine": dict(machine), "updated": now(), "planning_s": round(spent, 6),
            "decisions": dict(sorted(merged.items()))}
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return spent
