"""The planner: decides each speed choice by measuring its candidates once per shape key, and
keeps the answers per machine (see store.py), like cuDNN's benchmark mode or FFTW's wisdom.

Order of authority for one decision: a forced choice (`force()`, else `ANYFORMER_PLAN`), then the
plan file, then a measurement. A measurement runs every candidate once and compares its output
with stock's (a candidate that raises or disagrees is dropped), times the survivors, and keeps
stock unless another is faster by the margin. Anything going wrong in here gives stock: a
speed plan must never be the reason a run fails. Malformed forcing is the exception: it is the
user's input and raises a one-line ValueError.

`ANYFORMER_PLAN` is read at first use and again after `reset()`; answers are remembered in the
process, so the hot path (`lookup`) is one dict look-up plus a thread-count check. One lock
serialises planning in a process; separate processes may measure the same thing at once.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Mapping, Sequence

import torch

from . import choices, host, store
from .numerics import max_error
from .timing import Measurement, error_text, measure, pick

Runs = Mapping[str, Callable[[], Any]]
Timer = Callable[[Runs, float], Measurement]


class _StockFailed(Exception):
    pass


def _tracing() -> bool:
    return bool(torch.compiler.is_compiling() or torch.jit.is_tracing())


@contextlib.contextmanager
def _clean_state() -> Iterator[None]:
    """Candidates run as if at top level: not under the caller's inference mode, autocast or
    grad mode (a training candidate turns grad on itself)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.autocast("cuda", enabled=False))
        yield


class Planner:
    """`margin`: a candidate replaces stock when stock takes at least (1 + margin) times as long.
    `budget_s`: timing time per decision. `total_budget_s`: planning time per process; past it,
    new keys get stock unmeasured (and are measured by a later process). `clock` and `timer`
    (runs, budget_s) -> Measurement can be replaced, e.g. by a fake timing table in tests."""

    def __init__(self, *, margin: float = 0.10, budget_s: float = 0.2, total_budget_s: float = 60.0,
                 clock: Callable[[], float] = time.perf_counter, timer: Timer | None = None,
                 machine: Callable[[int], dict[str, Any]] = host.machine) -> None:
        self.margin, self.budget_s, self.total_budget_s = margin, budget_s, total_budget_s
        self.clock = clock
        self.timer: Timer = timer or (lambda runs, budget: measure(runs, budget, clock=self.clock))
        self._machine_fn = machine
        self._lock = threading.RLock()
        self._local = threading.local()
        self._api: dict[str, str | None] | None = None  # force(): replaces ANYFORMER_PLAN when set
        self._forced: dict[str, str | None] = {}
        self._threads = -1  # -1: re-read the environment and the plan file before the next answer
        self._memo: dict[Hashable, str] = {}
        self._entries: dict[str, dict] | None = None
        self._machine: dict[str, Any] | None = None
        self._path: Path | None = None
        self.file_planning_s = 0.0  # recorded in the plan file, all processes together
        self.planning_s = 0.0       # spent measuring in this process
        self.measured: list[str] = []  # keys measured in this process
        self.notes: list[str] = []
        # The plan in force for a run (`recording`): entry key -> choice, each answer pinned once given.
        self._pinned: dict[str, str] | None = None

    # --- forcing -------------------------------------------------------------------------------
    def force(self, spec: str | Mapping[str, str] | None = None, **by_name: str) -> dict[str, str | None] | None:
        """Force choices from Python, replacing ANYFORMER_PLAN: `force("stock")`,
        `force(linear="stock", attention="explicit")`; `force()` gives control back to the
        environment. Returns the previous setting (for `forcing`)."""
        previous = self._api
        if spec is None and not by_name:
            new = None
        else:
            new = choices.parse(spec, where="force()") if spec is not None else {}
            new.update(choices.parse(by_name, where="force()"))
        with self._lock:
            self._api = new
            self.reset()
        return previous

    @contextlib.contextmanager
    def forcing(self, spec: str | Mapping[str, str] | None = None, **by_name: str) -> Iterator[None]:
        previous = self.force(spec, **by_name)
        try:
            yield
        finally:
            with self._lock:
                self._api = previous
                self.reset()

    def forced(self) -> tuple[dict[str, str | None], str]:
        """(what is forced, where it comes from); raises ValueError for a malformed ANYFORMER_PLAN."""
        if self._api is not None:
            return dict(self._api), "force()"
        return choices.parse(os.environ.get(choices.ENV_PLAN)), choices.ENV_PLAN

    # --- a run's plan: recorded, pinned, replayed ----------------------------------------------
    @contextlib.contextmanager
    def recording(self, replay: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
        """Inside, every answer is kept in the yielded dict (entry key -> choice) and given again for
        the same key, whatever a later measurement or a record timed under load would say: a run
        never changes its plan midway. `replay`: a recorded plan's answers, given first (a choice
        not available here gives stock, with a note). Forcing still wins: it is the user's word."""
        with self._lock:
            previous, self._pinned = self._pinned, dict(replay or {})
            self._memo.clear()  # answers remembered before the block are asked again, and so pinned
        try:
            yield self._pinned
        finally:
            with self._lock:
                self._pinned = previous
                self._memo.clear()

    def pinned(self) -> dict[str, str]:
        """The answers pinned so far in the plan being recorded (empty outside `recording`)."""
        with self._lock:
            return dict(self._pinned or {})

    def adopt(self, answers: Mapping[str, str]) -> None:
        """Pin another process's answers in the plan being recorded (under torchrun, rank 0's): this
        process then gives the same for those keys, whatever its own plan file holds or lacks (on
        another machine it holds none of rank 0's measurements). Forcing still wins."""
        with self._lock:
            if self._pinned is None:
                raise RuntimeError("adopt() pins answers in a recorded plan: call it inside recording()")
            self._pinned.update(answers)
            self._memo.clear()

    # --- state ---------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget what this process remembers; the environment and the plan file are read again."""
        with self._lock:
            self._threads = -1
            self._memo.clear()
            self._entries = self._machine = self._path = None

    def _sync(self) -> None:
        threads = torch.get_num_threads()
        if threads == self._threads:
            return
        forced, _ = self.forced()  # raises on malformed input before anything is changed
        self.reset()
        self._forced, self._threads = forced, threads

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            self._machine = self._machine_fn(self._threads)
            self._path = store.plan_dir() / host.file_name(self._machine)
            self._entries, self.file_planning_s, why = store.load(self._path, self._machine)
            if why:
                self._note(why)
        return self._entries

    def _note(self, text: str) -> None:
        if len(self.notes) < 100:
            self.notes.append(text)

    # --- deciding ------------------------------------------------------------------------------
    def lookup(self, memo_key: Hashable) -> str | None:
        """The remembered answer for `memo_key`, or None: the hot path, called on every layer call."""
        if torch.get_num_threads() != self._threads:
            return None
        return self._memo.get(memo_key)

    def decide(self, name: str, fields: Mapping[str, Any], build: Callable[[], Runs], *,
               memo_key: Hashable | None = None, available: Sequence[str] | None = None, tolerance: float = 0.0,
               margin: float | None = None, budget_s: float | None = None,
               measured_with: Mapping[str, Any] | None = None,
               extra: Callable[[], Mapping[str, Any]] | None = None, partial: Sequence[str] = ()) -> str:
        """The choice for decision `name` at the shape `fields` (the plan file's key).

        `build()` returns the candidates, name -> call returning tensors, stock first; it runs only
        when a measurement is needed. `available`: the choices this build of torch can run
        (default: all). `tolerance`: see `max_error`. `measured_with`: the sizes actually timed
        where they differ from `fields` (recorded). `extra()`: more fields to record with a new
        measurement (e.g. a compile time), asked after the candidates ran. `partial`: choices that
        apply to some cases only; forcing one where it is not available gives stock, not an error."""
        with self._lock:
            self._sync()
            d = choices.decision(name)
            avail = tuple(d.choices if available is None else available)
            forced = choices.forced_choice(self._forced, name)
            key = store.entry_key(name, fields)
            if forced is not None:
                if forced not in avail and forced in partial:
                    return self._remember(memo_key, d.stock, key)
                if forced not in avail:
                    raise ValueError(f"{name}={forced} is forced but not available here "
                                     f"(available: {', '.join(avail)})")
                return self._remember(memo_key, forced, key)
            if getattr(self._local, "busy", False) or _tracing():
                return d.stock  # never plan inside a measurement or a tracer; not remembered
            if self._pinned is not None and key in self._pinned:
                pinned = d.canonical(self._pinned[key])  # a choice recorded under an old name reads as its new one
                if pinned in avail:
                    return self._remember(memo_key, pinned)
                self._note(f"{key}: the recorded plan's {pinned} cannot run here (available: {', '.join(avail)}); "
                           f"using {d.stock}")
                return self._remember(memo_key, d.stock, key)
            if len(avail) <= 1:
                return self._remember(memo_key, d.stock, key)
            margin = d.margin if margin is None else margin
            margin = self.margin if margin is None else margin
            try:
                return self._remember(memo_key, self._decide(d, fields, build, avail, tolerance, margin,
                                                             budget_s, measured_with, extra), key)
            except Exception as e:  # noqa: BLE001 - a failing plan falls back to stock
                self._note(f"{key}: planning failed ({error_text(e)}); using {d.stock}")
                return self._remember(memo_key, d.stock, key)

    def _remember(self, memo_key: Hashable, choice: str, key: str | None = None) -> str:
        """Remember `choice` in this process, and, while a run records its plan, pin it under `key`."""
        if memo_key is not None:
            self._memo[memo_key] = choice
        if key is not None and self._pinned is not None:
            self._pinned.setdefault(key, choice)  # the first answer stands: a later forcing does not rewrite it
        return choice

    def _decide(self, d: choices.Decision, fields: Mapping[str, Any], build: Callable[[], Runs],
                avail: tuple[str, ...], tolerance: float, margin: float, budget_s: float | None,
                measured_with: Mapping[str, Any] | None,
                extra: Callable[[], Mapping[str, Any]] | None = None) -> str:
        key = store.entry_key(d.name, fields)
        entries = self._load()
        entry = entries.get(key)
        cached = None
        # A record is reused when it judged exactly the candidates available now (timed or dropped):
        # a new candidate (a newer anyformer, or oneDNN found) is measured.
        judged = set(entry["times"]) | set(entry.get("dropped") or {}) if entry is not None else set()
        if entry is not None and entry["decision"] == d.name and set(entry["times"]) <= set(avail) <= judged:
            cached = pick(entry["times"], d.stock, margin)
            if cached in avail:
                return cached
        if self.planning_s >= self.total_budget_s:
            self._note(f"{key}: planning budget of {self.total_budget_s:g} s spent; using {d.stock} unmeasured")
            return d.stock
        start = time.perf_counter()
        try:
            entry = self._measure(d, build, avail, tolerance, margin, self.budget_s if budget_s is None else budget_s)
        except _StockFailed as e:
            self._note(f"{key}: stock raised {e}; using {d.stock}, nothing cached")
            return d.stock
        finally:
            spent = time.perf_counter() - start
            self.planning_s += spent
        entry.update(fields=dict(fields), seconds=round(spent, 6), when=store.now())
        if extra is not None:
            entry.update(extra())
        if measured_with:
            entry["measured_with"] = dict(measured_with)
        entries[key] = entry
        self.measured.append(key)
        try:
            self.file_planning_s = store.save(self._path, self._machine, {key: entry}, spent)
        except OSError as e:
            self._note(f"could not write the plan file {self._path} ({error_text(e)}); kept in memory")
        return entry["choice"]

    def _measure(self, d: choices.Decision, build: Callable[[], Runs], avail: tuple[str, ...],
                 tolerance: float, margin: float, budget_s: float) -> dict[str, Any]:
        self._local.busy = True
        try:
            with _clean_state():
                runs = dict(build())
                names = list(runs)
                if not names or names[0] != d.stock or not set(names) <= set(avail):
                    raise ValueError(f"{d.name}: candidates must start with {d.stock!r} and be among "
                                     f"{avail}; got {names}")
                try:
                    ref = runs[d.stock]()
                except Exception as e:  # noqa: BLE001
                    raise _StockFailed(error_text(e)) from e
                kept, dropped, errors = {d.stock: runs[d.stock]}, {}, {}
                for name in names[1:]:
                    try:
                        err = max_error(runs[name](), ref)
                    except Exception as e:  # noqa: BLE001 - dropped, with the reason on record
                        dropped[name] = f"raised {error_text(e)}"
                        continue
                    errors[name] = err
                    if err <= tolerance:
                        kept[name] = runs[name]
                    else:
                        dropped[name] = f"differs from {d.stock}: error {err:.2e} of scale > tolerance {tolerance:.0e}"
                m = self.timer(kept, budget_s) if len(kept) > 1 else Measurement()
        finally:
            self._local.busy = False
        if d.stock in m.errors:
            raise _StockFailed(m.errors[d.stock])
        dropped.update({n: f"raised {e}" for n, e in m.errors.items()})
        return {"decision": d.name, "choice": pick(m.times, d.stock, margin), "margin": margin,
                "times": {n: float(f"{t:.4g}") for n, t in m.times.items()},
                "error_vs_stock": {n: float(f"{e:.3g}") for n, e in errors.items()},
                "tolerance": tolerance, "rounds": m.rounds, "dropped": dropped}

    def entry(self, name: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
        """The plan file's record for decision `name` at `fields`, or None; measures nothing."""
        with self._lock:
            self._sync()
            found = self._load().get(store.entry_key(name, fields))
            return dict(found) if found is not None else None

    def records(self, name: str) -> list[dict[str, Any]]:
        """Every record of decision `name` on this machine (e.g. the compile times of earlier shapes:
        what the next one will likely cost); measures nothing."""
        with self._lock:
            self._sync()
            return [dict(e) for e in self._load().values() if e.get("decision") == name]

    # --- reporting -----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything `anyformer doctor` shows; reads the plan file, measures nothing."""
        with self._lock:
            self._sync()
            entries = dict(self._load())
            forced, source = self.forced()
            return {"machine": dict(self._machine or {}), "path": self._path, "entries": entries,
                    "forced": forced, "forced_from": source, "margin": self.margin, "budget_s": self.budget_s,
                    "planning_s": self.planning_s, "file_planning_s": self.file_planning_s,
                    "measured": list(self.measured), "notes": list(self.notes)}


_PLANNER = Planner()


def planner() -> Planner:
    """The process's planner (what the decision helpers use)."""
    return _PLANNER


@contextlib.contextmanager
def using(p: Planner) -> Iterator[Planner]:
    """Make `p` the process's planner inside the block (tests: a fake timer, a fresh memory)."""
    global _PLANNER
    previous, _PLANNER = _PLANNER, p
    try:
        yield p
    finally:
        _PLANNER = previous
