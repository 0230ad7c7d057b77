"""Stand-ins the trainer's unit tests hand a tiny real trainer in place of its parts: a time
budget whose fit is fixed, a progress bar and a clock that record, a process that records how it
left its group, and a record of the steps after which the trainer read its sums."""
from __future__ import annotations

from anyformer.train.distributed import Distributed


class Budget:
    """A budget whose fit is `fitted`, recording what it was asked."""

    seconds = 3600.0
    said: int | None = None  # as TimeBudget's: the steps the last notice named

    def __init__(self, fitted: int) -> None:
        self.fitted, self.asked = fitted, []
        self.started: list[tuple[int, float]] = []

    def fit(self, step, elapsed, eval_every, current, asked):
        self.asked.append((step, elapsed, eval_every, current, asked))
        return self.fitted

    def start(self, step, elapsed):
        self.started.append((step, elapsed))


class Bar:
    """A progress bar (tqdm's calls) that records what the run does with it."""

    def __init__(self, total: int = 0) -> None:
        self.total, self.lines = total, []
        self.updates, self.postfixes, self.closed = [], [], False

    def update(self, n) -> None:
        self.updates.append(n)

    def set_postfix(self, fields=None, refresh=True) -> None:
        self.postfixes.append((fields, refresh))

    def write(self, line: str) -> None:
        self.lines.append(line)

    def close(self) -> None:
        self.closed = True


def record_syncs(t) -> list[int]:
    """The steps after which `t` reads its pending sums, filled in as it runs."""
    read, sync = [], t.sync
    t.sync = lambda: (read.append(t.step), sync())[1]
    return read


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


class Closing(Distributed):
    """One process that records how it was asked to leave its group."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[bool] = []

    def close(self, wait: bool = True) -> None:
        self.closed.append(wait)
