"""What GET /metrics reports, in Prometheus' text format (version 0.0.4): requests by route and
status, refusals by reason, each lane's queue, latency quantiles per route, and the objects frozen out of
the cyclic collector.

Written out here rather than with prometheus_client: that library's Summary computes no quantiles
(only Histogram buckets), and the few lines below need no new dependency. Quantiles are over a
window of each route's most recent answers, so they describe the server now, not since start.
"""
from __future__ import annotations

import collections
import gc
import math
import time
from typing import Iterable

WINDOW = 2048          # recent answers per route the quantiles are computed over
QUANTILES = (0.5, 0.9, 0.99)


class Metrics:
    def __init__(self) -> None:
        self.started = time.time()
        self.requests: collections.Counter[tuple[str, int]] = collections.Counter()
        self.refusals: collections.Counter[str] = collections.Counter()
        self.latency: dict[str, collections.deque[float]] = {}
        self.latency_sum: collections.Counter[str] = collections.Counter()

    def record(self, route: str, status: int, seconds: float, refusal: str | None) -> None:
        self.requests[route, status] += 1
        if refusal is not None:
            self.refusals[refusal] += 1
        self.latency.setdefault(route, collections.deque(maxlen=WINDOW)).append(seconds)
        self.latency_sum[route] += seconds

    def render(self, depth: dict[str, dict[str, int]], ready: bool) -> str:
        """The exposition text; `depth` is the worker's {lane: {"waiting": n, "running": n}}."""
        out = ["# HELP anyformer_requests_total Requests answered, by route and status.",
               "# TYPE anyformer_requests_total counter"]
        out += [f'anyformer_requests_total{{route="{r}",status="{s}"}} {n}' for (r, s), n in sorted(self.requests.items())]
        out += ["# HELP anyformer_refusals_total Requests refused or stopped, by reason.",
                "# TYPE anyformer_refusals_total counter"]
        out += [f'anyformer_refusals_total{{reason="{r}"}} {n}' for r, n in sorted(self.refusals.items())]
        out += _gauge("anyformer_queue_depth", "Requests waiting for a model call, by lane.",
                      ((f'lane="{lane}"', d["waiting"]) for lane, d in depth.items()))
        out += _gauge("anyformer_running", "Model calls running now, by lane.",
                      ((f'lane="{lane}"', d["running"]) for lane, d in depth.items()))
        out += ["# HELP anyformer_request_seconds Latency from the request's arrival to its answer "
                f"(quantiles over the last {WINDOW} answers of each route).",
                "# TYPE anyformer_request_seconds summary"]
        for route, window in sorted(self.latency.items()):
            ordered = sorted(window)
            for q in QUANTILES:
                out.append(f'anyformer_request_seconds{{route="{route}",quantile="{q}"}} {quantile(ordered, q):.6f}')
            out.append(f'anyformer_request_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
            out.append(f'anyformer_request_seconds_count{{route="{route}"}} '
                       f'{sum(n for (r, _), n in self.requests.items() if r == route)}')
        out += _gauge("anyformer_ready", "1 while the server takes requests, 0 once it is shutting down.",
                      [("", int(ready))])
        out += _gauge("anyformer_start_time_seconds", "When the server started (Unix time).", [("", self.started)])
        out += _gauge("anyformer_gc_frozen_objects", "Objects out of the cyclic collector's reach since the server "
                      "started (gc.freeze; anyformer/serve/server.py).", [("", gc.get_freeze_count())])
        return "\n".join(out) + "\n"


def quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _gauge(name: str, help_text: str, values: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    return lines + [f"{name}{{{labels}}} {value}" if labels else f"{name} {value}" for labels, value in values]
