"""SIGINT and SIGTERM while training: the first lets the step in flight finish, then the run writes
a checkpoint and stops (raising Interrupted); a second stops at once, the last checkpoint intact."""
from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any, Callable


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; a checkpoint was written before stopping."""

    def __init__(self, signum: int, step: int, path: Path | None) -> None:
        saved = f"checkpoint {path} written" if path is not None else "rank 0 wrote the checkpoint"
        super().__init__(f"stopped by signal {signal.Signals(signum).name} after step {step}; "
                         f"{saved}, continue with --resume")
        self.signum = signum


class StopSignals:
    """While entered, SIGINT and SIGTERM are recorded in `received` instead of killing the process."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, Callable[..., Any] | int | None] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # asked twice: stop now
            raise KeyboardInterrupt
        self.received = signum

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread: signals stay with whoever handles them
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
