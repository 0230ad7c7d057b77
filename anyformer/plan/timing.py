"""Timing candidates: a warm-up call, then rounds that alternate the candidates, the median per call.

Alternating in rounds (and rotating who goes first) means a burst of outside load, common on a
shared machine, slows every candidate alike, so the ratio that picks the winner survives it.
A call shorter than `min_batch_s` is repeated inside one timing so that the clock's resolution
and the call overhead of perf_counter itself do not decide anything.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping


@dataclass
class Measurement:
    """Median seconds per call of each candidate that ran; `errors` for those that raised."""

    times: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    rounds: int = 0
    inner: dict[str, int] = field(default_factory=dict)


def error_text(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:200]


def measure(runs: Mapping[str, Callable[[], object]], budget_s: float, *,
            clock: Callable[[], float] = time.perf_counter, min_rounds: int = 3, max_rounds: int | None = None,
            min_batch_s: float = 2e-3, max_inner: int = 1000) -> Measurement:
    """Time each of `runs` (name -> call). The rounds fill `budget_s` after the warm-up, between
    `min_rounds` and `max_rounds` (default: 9, or 4 per second of a budget over 2.25 s, for
    decisions whose calls are long and noisy); so a plan's cost is bounded by the budget, or by
    warm-up plus `min_rounds` calls per candidate where a single call is longer than the budget allows."""
    if max_rounds is None:
        max_rounds = max(9, int(budget_s * 4))
    m = Measurement()
    live: dict[str, Callable[[], object]] = {}
    cost: dict[str, float] = {}
    for name, run in runs.items():  # warm-up: caches, allocator, oneDNN primitive creation
        t0 = clock()
        try:
            run()
        except Exception as e:  # noqa: BLE001 - a candidate that fails is dropped, never fatal
            m.errors[name] = error_text(e)
            continue
        cost[name] = max(clock() - t0, 1e-9)
        live[name] = run
        m.inner[name] = max(1, min(max_inner, math.ceil(min_batch_s / cost[name])))
    if not live:
        return m
    round_s = sum(cost[n] * m.inner[n] for n in live)
    rounds = max(min_rounds, min(max_rounds, int(budget_s / round_s)))
    samples: dict[str, list[float]] = {n: [] for n in live}
    names = list(live)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name not in live:
                continue
            run, inner = live[name], m.inner[name]
            t0 = clock()
            try:
                for _ in range(inner):
                    run()
            except Exception as e:  # noqa: BLE001
                m.errors[name] = error_text(e)
                del live[name]
                continue
            samples[name].append((clock() - t0) / inner)
    m.rounds = rounds
    for name in live:
        m.times[name] = statistics.median(samples[name])
    return m


def pick(times: Mapping[str, float], stock: str, margin: float) -> str:
    """The fastest candidate if it beats stock by `margin` (0.1: stock takes >= 1.1x its time);
    stock otherwise, and whenever stock itself has no time."""
    if stock not in times:
        return stock
    others = {n: t for n, t in times.items() if n != stock}
    if not others:
        return stock
    best = min(others, key=others.__getitem__)
    return best if others[best] * (1.0 + margin) <= times[stock] else stock
