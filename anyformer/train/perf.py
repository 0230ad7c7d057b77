"""Throughput accounting: the peak that MFU divides by (what `amp=auto` means is train/precision.py's).

Model FLOPs come from the models themselves (`Model.forward_flops`), through each task.

MFU is achieved model FLOP/s over a peak. On a GPU whose name we know, the peak is the dense bf16
rate of its data sheet, the convention of the MFU that PaLM, nanoGPT, llm.c and nanochat report, so
that figures compare across libraries. Elsewhere (CPUs, unknown cards) it is the rate that a large
matrix multiply reaches on the same device in the run's precision, measured when first asked: on a CPU
the sustained rate `anyformer doctor --limits` prints (anyformer.limits: the best of 1024 and 2048 products
on torch.mm and on oneDNN, each repeated for half a second), which a small product timed briefly can fall
short of, so that a run's CPU MFU and the benchmarks' read against the same ceiling. That measurement takes
about two and a half seconds, so a CPU run reads the rate kept by the first run on the machine (or by the
last `doctor --limits`) and says when it was measured (anyformer.limits.kept_matmul_rate).
"""
from __future__ import annotations

import functools
import time
from typing import Any

import torch

from .precision import resolve_amp

# Dense bf16 tensor-core peaks (FLOP/s, without sparsity) from NVIDIA's data sheets, matched in this
# order as substrings of torch.cuda.get_device_name(): a variant's longer name (PCIe, NVL) before the
# shorter name it contains, so that a card takes its own variant's peak.
SPEC_PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989.4e12), ("H200", 989.4e12), ("H20", 148e12),
    ("GH200", 989.4e12), ("B200", 2250e12), ("A100", 312e12), ("A10G", 70e12), ("L40S", 362e12),
    ("L4", 121e12), ("RTX 4090", 165.2e12), ("RTX 3090", 71e12),
)


def spec_peak_flops(name: str) -> float | None:
    """The data sheet's dense bf16 peak of the GPU called `name`, None for a name not in the table."""
    return next((peak for key, peak in SPEC_PEAK_BF16 if key in name), None)


@functools.lru_cache(maxsize=None)
def _peak(device_type: str, device_index: int | None, dtype: torch.dtype) -> tuple[float, str]:
    """(FLOP/s, " (<when it was measured>)" for a CPU's kept rate, "" for a GPU's, measured now)."""
    if device_type == "cpu":
        from ..limits import kept_matmul_rate
        rate, when = kept_matmul_rate(dtype)
        return rate.flops, f" ({when})"
    device = torch.device(device_type, device_index) if device_index is not None else torch.device(device_type)
    n = 4096  # large enough to saturate a card, small enough for ~0.1 s
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(3):
        _sync(device)
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - t) / 4)
    return 2 * n ** 3 / best, ""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dtype(device: torch.device, amp: str) -> torch.dtype:
    """The dtype of the run's matrix products."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(resolve_amp(amp, device), torch.float32)


def measured_peak_flops(device: torch.device, amp: str = "none") -> tuple[float, str]:
    """(the measured matmul FLOP/s in the run's precision, " (when it was measured)" for a kept CPU rate)."""
    return _peak(device.type, device.index, _dtype(device, amp))


def peak_flops(device: torch.device, amp: str = "none") -> tuple[float, str]:
    """(peak FLOP/s for MFU, where it comes from): a known GPU's data-sheet bf16 peak, whatever the
    run's precision (as nanoGPT's estimate_mfu does), else the measured matmul rate."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        spec = spec_peak_flops(name)
        if spec is not None:
            return spec, f"data sheet: {name}, dense bf16"
    what = ("matmul, the best of 1024 and 2048 products on torch.mm and oneDNN" if device.type == "cpu"
            else "4096 matmul")
    precision = resolve_amp(amp, device).replace("none", "fp32")
    flops, when = measured_peak_flops(device, amp)
    return flops, f"measured: {precision} {what}{when}"


class Peak:
    """The FLOP/s a run's MFU divides by (`peak_flops` at the run's precision), found when first asked (on a
    CPU the machine's kept rate, or about two and a half seconds of matrix products where none is kept yet),
    so that a run stopped early never pays for it."""

    def __init__(self, device: torch.device, cfg: Any) -> None:
        self.device, self.cfg = device, cfg  # the precision is read when first asked: settled by then
        self._found: tuple[float, str] | None = None

    def _find(self) -> tuple[float, str]:
        if self._found is None:  # its random matrices must not move the training RNG
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                self._found = peak_flops(self.device, self.cfg.amp)
        return self._found

    def flops(self) -> float:
        return self._find()[0]

    def recheck(self, achieved: float) -> None:
        """After a CPU run whose steps went at `achieved` FLOP/s, above the kept rate: the rate measured again
        and, if higher, kept and read from here on (anyformer.limits.measured_above). A kept rate is too low
        when other work held the cores while it was measured, and every run's MFU read then over 100%."""
        if self.device.type != "cpu" or achieved <= self.flops():
            return
        from ..limits import measured_above
        with torch.random.fork_rng(devices=[]):
            found = measured_above(_dtype(self.device, self.cfg.amp), self.flops())
        if found is not None:
            _peak.cache_clear()
            self._found = peak_flops(self.device, self.cfg.amp)

    def source(self) -> str:
        """Where the figure came from: the data sheet named, or the measurement."""
        return self._find()[1]
