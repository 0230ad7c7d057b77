"""The text of `anyformer doctor`: the machine, the torch build, and the plan in force.

Here, on the plan's floor, so that the report needs nothing above it; anyformer/doctor.py adds the
command line and `--measure` (which builds models).
"""
from __future__ import annotations

import os
import platform
from typing import Any

import torch

from . import choices, host, native, store
from .planner import Planner, planner
from .timing import pick

# thread settings that change what is measured (runtime.configure sets the first two)
_OMP_ENV = ("OMP_PROC_BIND", "OMP_PLACES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _machine_lines() -> list[str]:
    cpu = host.cpu_info()
    build = host.build_info()
    cores = host.affinity()
    bf16 = [f for f in cpu["flags"] if f in host.NATIVE_BF16_FLAGS]
    cuda = "not available"
    if torch.cuda.is_available():
        cuda = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return [
        "Machine",
        f"  CPU            {cpu['model']} ({platform.machine()})",
        f"  flags          {' '.join(cpu['flags']) or '(none of the relevant ones)'}",
        f"  native bf16    {'yes (' + ', '.join(bf16) + ')' if bf16 else 'no: bf16 is emulated through fp32'}",
        f"  cores          {os.cpu_count()} online; this thread may run on {host.as_ranges(cores)}"
        + (" (OpenMP binding pins it)" if os.environ.get("OMP_PROC_BIND") not in (None, "", "false") else ""),
        f"  torch          {torch.__version__}: MKL {build['mkl']}, oneDNN {build['onednn']}, "
        f"OpenMP {build['openmp']}, CPU capability {build['capability']}",
        f"  threads        {torch.get_num_threads()} (interop {torch.get_num_interop_threads()})"
        + "".join(f", {k}={os.environ[k]}" for k in _OMP_ENV if os.environ.get(k)),
        f"  CUDA           {cuda}",
        f"  plan code      {host.code_hash()} (a change to anyformer/plan/ is measured again); C++ {host.compiler()}",
    ]


def _entry_lines(key: str, e: dict[str, Any], margin: float) -> list[str]:
    stock = choices.decision(e["decision"]).stock if e["decision"] in choices.decisions() else None
    times = e["times"]
    choice = _current_choice(e, stock, margin)
    fastest = min(times, key=times.__getitem__) if times else None
    timed = "   ".join(f"{n} {_ms(t)}{'*' if n == fastest else ''}" for n, t in times.items()) or "nothing timed"
    line = f"      {timed}   -> {choice}"
    if e.get("measured_with"):
        line += "   [timed at " + ", ".join(f"{k}={v}" for k, v in e["measured_with"].items()) + "]"
    about = [f"planned in {_ms(e['seconds'])}" if isinstance(e.get("seconds"), (int, float)) else "",
             f"of which compiling {_ms(e['compile_s'])}" if isinstance(e.get("compile_s"), (int, float)) else "",
             f"timed on {e['timed']}" if isinstance(e.get("timed"), str) else "",
             f"load {e['load_1min']:g}" if isinstance(e.get("load_1min"), (int, float)) else ""]
    about_text = ", ".join(a for a in about if a)
    out = [f"    {key}" + (f"   ({about_text})" if about_text else ""), line]
    out += [f"      dropped {n}: {why}" for n, why in (e.get("dropped") or {}).items()]
    return out


def _current_choice(e: dict[str, Any], stock: str | None, margin: float) -> str:
    if stock is None:
        return e["choice"]
    d = choices.decision(e["decision"])
    return pick(e["times"], stock, d.margin if d.margin is not None else margin)


def report(p: Planner | None = None) -> str:
    """The report `anyformer doctor` prints; reads the plan file, measures nothing."""
    p = p or planner()
    lines = ["anyformer doctor", "", *_machine_lines(), "", "Plan"]
    try:
        snap = p.snapshot()
    except ValueError as e:  # a malformed ANYFORMER_PLAN: the one thing doctor must show, not hide
        m = host.machine()
        path = store.plan_dir() / host.file_name(m)
        return "\n".join([*lines, f"  cache file     {path}", f"  forced         INVALID: {e}"])
    path, entries = snap["path"], snap["entries"]
    exists = "exists" if path.exists() else "not written yet"
    forced = snap["forced"]
    known = choices.decisions()
    if forced:
        shown = ", ".join(f"{n}={choices.forced_choice(forced, n) or 'auto'}" for n in sorted(known))
        forced_text = f"{shown} (from {snap['forced_from']})"
    else:
        forced_text = f"nothing (from {snap['forced_from']}: {os.environ.get(choices.ENV_PLAN) or 'unset'})" \
            if snap["forced_from"] == choices.ENV_PLAN else "nothing (force() set to auto)"
    margins = ", ".join(f"{n} {d.margin:.0%}" for n, d in sorted(known.items()) if d.margin is not None)
    lines += [
        f"  cache file     {path} ({exists}, {len(entries)} decisions)",
        f"  machine key    {snap['machine'].get('key', '?')}",
        f"  forced         {forced_text}",
        f"  margin         {snap['margin']:.0%}{' (' + margins + ')' if margins else ''}; "
        f"timing budget {snap['budget_s']:g} s per decision",
        f"  planning time  {snap['file_planning_s']:.2f} s recorded in the cache file; "
        f"{snap['planning_s']:.2f} s in this process",
        "  decisions      " + "; ".join(f"{n}: {' | '.join(d.choices)}" for n, d in sorted(known.items())),
        f"  native kernels attention and GELU (fp32): {native.status()}",
    ]
    if entries:
        lines.append("  measured (median time per call; * fastest; -> the choice at the current margin)")
        for key in sorted(entries):
            lines += _entry_lines(key, entries[key], snap["margin"])
    else:
        lines.append("  measured       nothing yet (`anyformer doctor --measure` plans a default workload)")
    lines += [f"  note: {n}" for n in snap["notes"]]
    return "\n".join(lines)
