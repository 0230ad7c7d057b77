"""A GPT's one-token generation step: the model's eager forward, or its blocks in one call of anyformer's own
kernel (plan/decode_native.py). Timed on the model itself, at the cache's position (plan/decode.py)."""
from __future__ import annotations

from typing import Callable, Mapping

from .. import planner as _planner
from ..choices import Decision, register
from .common import _may_build

DECODE = register(Decision("decode", ("stock", "native"),
                           "a GPT's one-token generation step (fp32 CPU): the model's eager forward, or its "
                           "blocks in one call of anyformer's own kernel, compiled here (plan/decode_native.py)"))


def may_run_native() -> bool:
    """Whether the native step may be offered (and its kernels built): not where another choice is forced."""
    return _may_build(_planner._PLANNER, DECODE.name)


def decode_kernel(fields: Mapping[str, object], runs: Callable[[], dict[str, Callable]], native: bool,
                  tolerance: float) -> str:
    """"stock" or "native" for the step keyed by `fields` (plan/decode.py's `plan_fields`); `runs()`: each
    choice's step from the same position, stock first; `native`: whether the native step can run here."""
    return _planner._PLANNER.decide(DECODE.name, fields, runs, available=DECODE.choices if native else ("stock",),
                                    partial=("native",), tolerance=tolerance)
