"""Every test gets its own plan cache (never the user's) and planners it makes itself; the planned layers'
tests see which private kernel or attention function each call ran on (`ran`, `choice`) and stand in
for torch.compile's tracing (`compiling`); `plan.prepare`'s tests have the planner's decisions answered
and recorded (`asked`)."""
from __future__ import annotations

import contextlib

import pytest
import torch

from anyformer.plan import Planner, attention_choice, layers, native, using
from anyformer.plan.attention_choice import AttentionChoice
from anyformer.plan.choices import Decision, register, unregister
from anyformer.plan.timing import Measurement

from .layer_calls import recorded
from .prepare_doubles import Asked, door


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


@pytest.fixture
def ran(monkeypatch):
    """The planned layers' tests: the private kernels that calls ran on, in order: "onednn", "mixed" (oneDNN with the weight
    gradient on BLAS), "rows" (native.linear_rows), "rowwise" (layers.rowwise_linear), "gelu"
    (native.gelu), "attention" (native.attention_packed); F.linear, F.gelu and SDPA record nothing."""
    log = []

    def watch(owner, attr, name):
        real = getattr(owner, attr)

        def spy(*args, **kwargs):
            log.append(name(args, kwargs) if callable(name) else name)
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, attr, spy)

    watch(layers, "onednn_linear",
          lambda a, kw: "mixed" if kw.get("blas_dw", a[3] if len(a) > 3 else False) else "onednn")
    watch(native, "linear_rows", "rows")
    watch(layers, "rowwise_linear", "rowwise")
    watch(native, "gelu", "gelu")
    watch(native, "attention_packed", "attention")
    return log


@pytest.fixture
def compiling(monkeypatch):
    """Inside torch.compile's tracing, as the layers and the attention function see it."""
    monkeypatch.setattr(layers, "_is_compiling", lambda: True)
    monkeypatch.setattr(attention_choice, "_is_compiling", lambda: True)


@pytest.fixture
def choice():
    """An AttentionChoice with a recording function per kind of call, and its record."""
    log = []
    kinds = {(False, False): "many", (False, True): "one", (True, False): "many, grads", (True, True): "one, grads"}
    return AttentionChoice({key: recorded(log, name) for key, name in kinds.items()}), log


@pytest.fixture
def asked(monkeypatch) -> Asked:
    """`plan.prepare`'s tests: the planner's CPU decisions, as prepare's module calls them, answered
    and recorded by an `Asked` (stock answers until the test sets its own); a CUDA question fails."""
    a = Asked()
    for name in ("linear_kernel", "gelu_kernel", "attention_kernel"):
        monkeypatch.setattr(door, name, getattr(a, name))
    monkeypatch.setattr(door, "sdpa_backend", lambda *args, **kw: pytest.fail("a CPU model asked for CUDA"))
    # A linear call is asked about only where it could run on oneDNN; these tests are about what
    # prepare asks, whichever torch build runs them (no oneDNN kernel runs here: every answer is
    # left on the layers, and the example runs before any is made).
    monkeypatch.setattr(layers, "_ONEDNN", True)
    return a
