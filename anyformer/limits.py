"""What this host can do at most, for the speed figures to be read against: the sustained rate of a large
matrix product (fp32, and bf16 where the CPU has bf16 arithmetic) on all of torch's threads, the best of the
libraries torch can run it on, and the memory bandwidth of a large copy. `anyformer doctor --limits` prints
them; a step's FLOP/s over the matmul rate is a CPU MFU (how much of the processor the step uses), its bytes
a token over the bandwidth say how near memory-bound decoding is.

The 512 x 512 product the trainer's bar divides by (train/perf.py) is timed in about 0.1 s at start-up; it
can fall short of the rate the cores sustain, which larger products reach: here the best of 1024 and 2048,
each repeated for about half a second after a warm-up. The libraries: torch's BLAS (`torch.mm`, MKL on x86) and
oneDNN (what the plan's linear layers run where it measured them faster). They differ most where MKL takes its
AVX2 path on an AVX-512 AMD processor: on a 2-core Zen 5, fp32 at 201 GFLOP/s through MKL and 432-441 through
oneDNN (2026-12-01); a limit read from MKL alone put anyformer's oneDNN steps at 102-211% of it. A library that
cannot run the product (oneDNN's bf16 on a CPU without the instructions it asks for) is passed over.

A run's MFU divides by the same rate (train/perf.py). Measuring it takes about two and a half seconds, a
share of a short run, so the first run on a machine keeps what it measured in the user's cache
(`$ANYFORMER_CACHE/limits/`, named like the speed plan's file by the CPU, torch, its instruction-set
switches and threads) and later runs read it; `anyformer doctor --limits` always measures afresh and
replaces it. A rate measured while other work held the cores is kept too low, and every later run's MFU
reads too high: so a run whose own steps went faster than the kept rate measures it again at its end and keeps
the higher (`measured_above`). Only the MFU a run reports reads it: nothing a run computes depends on it."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

SIZES = (1024, 2048)
SECONDS = 0.5           # each size is repeated for about this long, after one warm-up product
COPY_MIB = 256          # far past every cache level of the CPUs seen (L3 up to 32 MiB a CCD)
FORMAT = "anyformer-limits/1"


@dataclass(frozen=True)
class MatmulRate:
    dtype: str
    flops: float        # FLOP/s, 2 n^3 a product
    size: int           # the n that reached it
    library: str = "torch.mm"  # the library that reached it


Product = Callable[[Tensor, Tensor], Any]


def libraries() -> dict[str, Product]:
    """The libraries torch runs an (n, n) product on here, by name: its BLAS always, oneDNN where this build
    has it (a @ b^T there, the same 2 n^3 FLOPs)."""
    from .plan.kernels import onednn_linear_op, onednn_mm
    out: dict[str, Product] = {"torch.mm": torch.mm}
    if onednn_linear_op() is not None:
        out["oneDNN"] = onednn_mm
    return out


def matmul_rate(dtype: torch.dtype = torch.float32, sizes: tuple[int, ...] | None = None,
                seconds: float | None = None, clock: Callable[[], float] = time.perf_counter,
                products: dict[str, Product] | None = None) -> MatmulRate:
    """The best sustained rate of an (n, n) @ (n, n) product over `sizes` (default SIZES) and `products` (default
    `libraries()`), each repeated for `seconds` (default SECONDS)."""
    sizes, seconds = sizes or SIZES, SECONDS if seconds is None else seconds
    best = MatmulRate(str(dtype).removeprefix("torch."), 0.0, 0)
    for library, product in (products or libraries()).items():
        for n in sizes:
            a, b = (torch.randn(n, n).to(dtype) for _ in range(2))
            try:
                product(a, b)  # the warm-up: the library's threads, buffers and kernel choice
            except RuntimeError:  # this library has no kernel for the dtype on this CPU: the others say
                break
            reps, t0 = 0, clock()
            while True:
                product(a, b)
                reps += 1
                spent = clock() - t0
                if spent >= seconds:
                    break
            rate = 2 * n ** 3 * reps / spent
            if rate > best.flops:
                best = MatmulRate(best.dtype, rate, n, library)
    return best


def copy_bandwidth(mib: int | None = None, repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Bytes a second a copy of a `mib` MiB buffer (default COPY_MIB) moves, each byte read once and written
    once; the best of `repeats`."""
    mib = mib or COPY_MIB
    src = torch.ones(mib * 2 ** 20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # the pages touched once before timing
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        dst.copy_(src)
        best = min(best, clock() - t0)
    return 2 * src.numel() * 4 / best


def _machine() -> dict[str, Any]:
    """What a matrix product's rate depends on: the speed plan's machine key (plan/host.py) without the
    anyformer code and C++ compiler it also names (neither touches torch's products), rehashed."""
    from .plan import host
    fields = {k: v for k, v in host.machine().items() if k not in ("code", "compiler", "key")}
    return {**fields, "key": hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]}


def limits_path(machine: dict[str, Any] | None = None) -> Path:
    """This machine's limits file in the user's cache (see the module's docstring)."""
    from .plan import host, store
    return store.cache_root() / "limits" / host.file_name(machine or _machine())


def _read(path: Path, machine: dict[str, Any]) -> dict[str, dict]:
    """The kept rates by dtype name; {} for a file that is missing, unreadable, another format or another
    machine's, and without any entry that is not a positive finite rate with its date, size and library."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("machine") != machine:
        return {}
    rates = data.get("matmul")
    return {k: v for k, v in rates.items() if isinstance(v, dict) and isinstance(v.get("flops"), (int, float))
            and math.isfinite(v["flops"]) and v["flops"] > 0 and isinstance(v.get("when"), str)
            and type(v.get("size", 0)) is int and isinstance(v.get("library", ""), str)
            } if isinstance(rates, dict) else {}


def keep(rate: MatmulRate, machine: dict[str, Any] | None = None) -> str:
    """Write `rate` into this machine's limits file (beside the other dtypes' rates); returns when it was
    measured, as recorded. A cache that cannot be written is passed over: the next run measures again."""
    from .files import atomic_write_text
    machine, when = machine or _machine(), _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    path = limits_path(machine)
    rates = {**_read(path, machine), rate.dtype: {**asdict(rate), "when": when}}
    try:
        atomic_write_text(path, json.dumps({"format": FORMAT, "machine": machine, "matmul": rates}, indent=1) + "\n")
    except OSError:
        pass
    return when


def kept_matmul_rate(dtype: torch.dtype = torch.float32) -> tuple[MatmulRate, str]:
    """(this machine's matmul rate in `dtype`, when it was measured): read from its limits file, else
    measured now (`matmul_rate`) and kept there for the next run."""
    machine = _machine()
    entry = _read(limits_path(machine), machine).get(str(dtype).removeprefix("torch."))
    if entry is not None:
        return MatmulRate(entry.get("dtype", str(dtype)), float(entry["flops"]), int(entry.get("size", 0)),
                          str(entry.get("library", "torch.mm"))), entry["when"]
    rate = matmul_rate(dtype)
    return rate, keep(rate, machine)


def measured_above(dtype: torch.dtype, kept: float) -> tuple[MatmulRate, str] | None:
    """The rate in `dtype` measured now and kept, with when, if it is above `kept`; None (and the file left
    as it is) if it is not: the cores were busy now, or the kept rate was right and a step beat it."""
    rate = matmul_rate(dtype)
    return (rate, keep(rate)) if rate.flops > kept else None


def kept_line() -> str:
    """`anyformer doctor`'s line on the rates kept for the runs' MFU, read from the file, measuring nothing."""
    machine = _machine()
    path = limits_path(machine)
    kept = _read(path, machine)
    if not kept:
        return f"  kept limits    none yet: the first run measures them, `--limits` now ({path})"
    rates = ", ".join(f"{dtype} {r['flops'] / 1e9:,.1f} GFLOP/s ({r['when']})" for dtype, r in sorted(kept.items()))
    return f"  kept limits    {rates}: the runs' MFU divides by these; `--limits` measures again ({path})"


def limit_lines() -> list[str]:
    """`anyformer doctor --limits`: the rates, measured now (a few seconds), and kept for the runs' MFU."""
    from .plan import host
    rates = [matmul_rate(torch.float32)]
    if host.native_bf16():
        rates.append(matmul_rate(torch.bfloat16))
    for r in rates:
        keep(r)
    lines = [f"Matmul         {r.dtype}: {r.flops / 1e9:,.1f} GFLOP/s sustained ({r.size} x {r.size} on {r.library}, "
             f"{torch.get_num_threads()} threads)" for r in rates]
    lines.append(f"Memory         {copy_bandwidth() / 1e9:,.1f} GB/s (a {COPY_MIB} MiB copy, read and written)")
    lines.append(f"               the matmul rates are kept for the MFU of later runs: {limits_path()}")
    return lines
