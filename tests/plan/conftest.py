"""Every test gets its own plan cache (never the user's) and planners it makes itself."""
from __future__ import annotations

import contextlib

import pytest
import torch

from anyformer.plan import Planner, using
from anyformer.plan.choices import Decision, register, unregister
from anyformer.plan.timing import Measurement


class FakeTimer:
    """A timing table instead of a clock: candidate name -> seconds per call."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table, self.calls = table, []

    def __call__(self, runs, budget_s):
        self.calls.append(list(runs))
        times = {n: self.table[n] for n in runs if n in self.table}
        errors = {n: "not in the fake timing table" for n in runs if n not in self.table}
        return Measurement(times=times, errors=errors, rounds=1)


class Toy:
    """Candidates for the test decision "toy": `build()` counts how often it is asked for them."""

    def __init__(self, **outputs) -> None:
        self.builds = 0
        self.outputs = {"stock": torch.ones(4), "fast": torch.ones(4), "faster": torch.ones(4), **outputs}

    def build(self):
        self.builds += 1
        return {name: (out if callable(out) else (lambda out=out: out)) for name, out in self.outputs.items()}


@pytest.fixture(autouse=True)
def plan_cache(tmp_path, monkeypatch):
    """The plan folder of this test's private cache."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ANYFORMER_PLAN", raising=False)
    return tmp_path / "cache" / "plan"


@pytest.fixture
def toy():
    register(Decision("toy", ("stock", "fast", "faster")))
    yield Toy
    unregister("toy")


@pytest.fixture
def planner_with():
    """planner_with(table, **kw): a Planner with a fake timing table, made the process's planner
    until the test ends."""
    with contextlib.ExitStack() as stack:
        def make(table=None, **kw):
            p = Planner(timer=FakeTimer(table) if table is not None else None, **kw)
            stack.enter_context(using(p))
            return p
        yield make
