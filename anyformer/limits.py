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
cannot run the product (oneDNN's bf16 on a CPU without the instructions it asks for) is passed over."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

SIZES = (1024, 2048)
SECONDS = 0.5           # each size is repeated for about this long, after one warm-up product
COPY_MIB = 256          # far past every cache level of the CPUs seen (L3 up to 32 MiB a CCD)


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


def limit_lines() -> list[str]:
    """`anyformer doctor --limits`: the rates, measured now (a few seconds)."""
    from .plan import host
    rates = [matmul_rate(torch.float32)]
    if host.native_bf16():
        rates.append(matmul_rate(torch.bfloat16))
    lines = [f"Matmul         {r.dtype}: {r.flops / 1e9:,.1f} GFLOP/s sustained ({r.size} x {r.size} on {r.library}, "
             f"{torch.get_num_threads()} threads)" for r in rates]
    lines.append(f"Memory         {copy_bandwidth() / 1e9:,.1f} GB/s (a {COPY_MIB} MiB copy, read and written)")
    return lines
