"""The run directory and every write into it.

It holds config.json + model.safetensors (loadable by `anyformer.load`), metrics.jsonl (one line
per evaluation), summary.json, curves.png and the task's pictures, plan.json (the speed plan it trained
with: anyformer/train/runplan.py), and checkpoints/ to resume from.
Under torchrun rank 0 alone writes; a write that fails there stops every rank with the same
one-line error, so that no rank waits for a rank that has stopped.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from ..files import atomic_write, atomic_write_text, remove_temp_files
from .checkpoint import CKPT_DIR, TrainingError, list_checkpoints
from .config import LOGS
from .distributed import Distributed

# tokenizer.json: a tokenizer learned from the run's corpus (`--tokenizer bpe`), which the task hands over.
RUN_FILES = ("config.json", "model.safetensors", "metrics.jsonl", "summary.json", "curves.png", "plan.json",
             "tokenizer.json")
_CKPT_TEMP = re.compile(r"^\.(step-\d{9}\.pt)\.")  # atomic_write's temporary name for a checkpoint


class RunDir:
    def __init__(self, path: Path, dist: Distributed, pictures: Sequence[str] = (), log: str = "jsonl") -> None:
        """log: "jsonl" (metrics.jsonl only) or "tensorboard" (also RUN/tensorboard/, the same values)."""
        if log not in LOGS:
            raise ValueError(f"unknown log {log!r}; expected one of {LOGS}")
        self.path, self.dist, self.log = Path(path), dist, log
        self.files = (*RUN_FILES, *pictures)
        self.metrics = self.path / "metrics.jsonl"
        self._board: Any = None
        if log == "tensorboard":
            require_tensorboard()  # on every rank, before training starts, rather than at the first evaluation

    def on_main(self, what: str, path: Path, write: Callable[[], Any]) -> Any:
        """Run `write` on rank 0; if it fails, every rank stops with the same one-line error."""
        from safetensors import SafetensorError
        result, error = None, None
        if self.dist.is_main:
            try:
                result = write()
            except (OSError, RuntimeError, SafetensorError) as e:  # torch.save reports a failed write as RuntimeError
                error = write_error(what, path, e)
        error = self.dist.broadcast(error)
        if error:
            raise TrainingError(error)
        return result

    def prepare(self, resume: bool) -> None:
        """Create it; clear what a kill left half-written; unless resuming, remove an earlier run's files."""
        self.on_main("create the run directory", self.path, lambda: self._prepare(resume))

    def _prepare(self, resume: bool) -> None:
        d = self.path
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK):
            raise PermissionError(13, "Permission denied (not writable)")
        remove_temp_files(d, self.files)
        ckpts = d / CKPT_DIR
        if ckpts.is_dir():
            remove_temp_files(ckpts, {m.group(1) for p in ckpts.iterdir() if (m := _CKPT_TEMP.match(p.name))})
        if resume and list_checkpoints(d):
            return
        for name in self.files:  # a fresh run (or a resume with nothing to resume) replaces an old one
            (d / name).unlink(missing_ok=True)
        shutil.rmtree(ckpts, ignore_errors=True)
        shutil.rmtree(d / "tensorboard", ignore_errors=True)  # an earlier run's curves would mix with this one's

    def write_files(self, files: dict[str, bytes]) -> None:
        """Files a task keeps with the run (protocol.py's optional `run_files`), written atomically."""
        for name, data in files.items():
            path = self.path / name
            self.on_main(f"write {name} into", path, lambda p=path, d=data: atomic_write(p, lambda f: f.write(d)))

    # ---------------------------------------------------------------- metrics.jsonl
    def append_metrics(self, line: dict[str, Any]) -> None:
        def append() -> None:
            with open(self.metrics, "a") as f:
                f.write(json.dumps(line) + "\n")
            if self.log == "tensorboard":
                self._tensorboard(line)
        self.on_main("append to", self.metrics, append)

    def _tensorboard(self, line: dict[str, Any]) -> None:
        """Every number of the line as a scalar at its step (rank 0 only: called inside on_main)."""
        if self._board is None:
            from torch.utils.tensorboard import SummaryWriter
            self._board = SummaryWriter(log_dir=str(self.path / "tensorboard"))
        step = int(line.get("step", 0))
        for key, value in line.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._board.add_scalar(key, value, global_step=step)
        self._board.flush()  # a run killed at any moment still shows what metrics.jsonl shows

    def keep_metrics(self, n: int) -> None:
        """Keep the first n lines: those written after a checkpoint are written again when it resumes."""
        def truncate() -> None:
            lines = self.metrics.read_text().splitlines(keepends=True)[:n] if self.metrics.exists() else []
            atomic_write_text(self.metrics, "".join(lines))
        self.on_main("rewrite", self.metrics, truncate)

    def read_metrics(self) -> list[dict[str, Any]]:
        text = self.metrics.read_text() if self.metrics.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    # ---------------------------------------------------------------- the end
    def finish(self, summary: dict[str, Any], draw: Callable[[Path], None] | None) -> None:
        """summary.json, and unless `draw` is None curves.png and the task's pictures (rank 0 writes;
        the model is already saved)."""
        def write() -> None:
            atomic_write_text(self.path / "summary.json", json.dumps(summary, indent=2))
            if draw is None:
                return
            from ..viz import plot_curves  # matplotlib only when a run ends
            plot_curves(self.metrics, self.path / "curves.png")
            draw(self.path)
        self.on_main("write the summary and plots to", self.path, write)
        if self._board is not None:
            self._board.close()
            self._board = None


def require_tensorboard() -> None:
    """ImportError in one line, naming the extra to install, when TensorBoard logging cannot work."""
    try:
        import tensorboard  # noqa: F401 - torch.utils.tensorboard imports it when a writer is made
    except ImportError:
        raise ImportError('--log tensorboard needs the tensorboard package, which is not installed: '
                          'pip install "anyformer[tensorboard]"') from None


def write_error(what: str, path: Path, e: BaseException) -> str:
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
