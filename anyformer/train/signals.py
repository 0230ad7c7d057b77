"""SIGINT and SIGTERM while training: the first lets the step in flight finish, then the run writes
a checkpoint and stops (raising Interrupted); a second stops at once, the last checkpoint intact.

Under torchrun a second signal is not a second request: a preempted job's scheduler signals every
process, and the agent, signalled too, forwards the same signal to its workers a moment later. There
the stop is escalated by the agent itself, which kills its workers with SIGKILL once its
--shutdown-timeout (30 s by default) has passed."""
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
    """While entered, SIGINT and SIGTERM are recorded in `received` instead of killing the process.
    `escalate`: a second signal stops at once (KeyboardInterrupt); without it a second is ignored."""

    def __init__(self, escalate: bool = True) -> None:
        self.escalate = escalate
        self.received: int | None = None
        self._old: dict[int, Callable[..., Any] | int | None] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # asked twice: stop now, unless it is the same request again
            if self.escalate:
                raise KeyboardInterrupt
            return
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
