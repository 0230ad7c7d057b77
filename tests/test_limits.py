"""The host's limits (`anyformer doctor --limits`): a matmul rate is 2 n^3 FLOPs a product over the time the
products took, the best size kept; the copy's bandwidth counts each byte read and written; the command
prints both."""
from __future__ import annotations

import itertools

import torch

from anyformer import limits
from anyformer.cli import main


def ticking(step: float):
    """A clock that moves `step` seconds each time it is read."""
    counter = itertools.count()
    return lambda: next(counter) * step


def test_the_rate_is_the_products_flops_over_their_time_at_the_best_size():
    # Each product reads the clock once after it: 4 products of n=8 at 0.25 s each reach the 1 s asked.
    r = limits.matmul_rate(torch.float32, sizes=(8,), seconds=1.0, clock=ticking(0.25))
    assert r.size == 8 and r.dtype == "float32" and r.flops == 2 * 8 ** 3 * 4 / 1.0
    both = limits.matmul_rate(torch.float32, sizes=(4, 8), seconds=1.0, clock=ticking(0.25))
    assert both.size == 8  # the same time a product, 8x the work


def test_the_best_library_is_kept_and_named():
    # A product on "slow" costs two ticks of the clock (it reads the clock itself once), one on "fast" one tick:
    # the fast library's rate, twice the slow one's, is the limit, and it is named.
    clock = ticking(0.25)
    slow = {"slow": lambda a, b: clock(), "fast": lambda a, b: None}
    r = limits.matmul_rate(torch.float32, sizes=(8,), seconds=1.0, clock=clock, products=slow)
    assert r.library == "fast" and r.flops == 2 * 8 ** 3 * 4 / 1.0


def test_a_library_without_a_kernel_for_the_dtype_is_passed_over():
    def refuses(a, b):
        raise RuntimeError("no bf16 kernel on this CPU")
    r = limits.matmul_rate(torch.float32, sizes=(8,), seconds=1.0, clock=ticking(0.25),
                           products={"refuses": refuses, "torch.mm": torch.mm})
    assert r.library == "torch.mm" and r.flops > 0


def test_onednn_is_among_the_libraries_where_torch_has_it():
    from anyformer.plan.kernels import onednn_linear_op
    names = list(limits.libraries())
    assert names[0] == "torch.mm" and ("oneDNN" in names) == (onednn_linear_op() is not None)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    for product in limits.libraries().values():  # the same FLOPs: a @ b on BLAS, a @ b^T on oneDNN
        assert product(a, b).shape == (16, 16)


def test_the_copy_counts_each_byte_read_and_written():
    assert limits.copy_bandwidth(mib=1, repeats=2, clock=ticking(0.5)) == 2 * 2 ** 20 / 0.5


def test_doctor_limits_prints_the_rates_measured_now_and_keeps_them(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    assert main(["doctor"]) == 0
    assert "kept limits    none yet: the first run measures them" in capsys.readouterr().out
    monkeypatch.setattr(limits, "SIZES", (64,))
    monkeypatch.setattr(limits, "SECONDS", 0.01)
    monkeypatch.setattr(limits, "COPY_MIB", 1)
    assert main(["doctor", "--limits"]) == 0
    out = capsys.readouterr().out
    assert "Matmul         float32: " in out and "GFLOP/s sustained (64 x 64 on " in out
    assert "GB/s (a 1 MiB copy, read and written)" in out
    kept, _ = limits.kept_matmul_rate(torch.float32)  # what the next run's MFU divides by, not measured again
    assert f"{kept.flops / 1e9:,.1f} GFLOP/s sustained (64 x 64 on {kept.library}" in out
    assert str(limits.limits_path()) in out
    assert main(["doctor"]) == 0  # the report reads them back, measuring nothing
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  kept limits "))
    assert f"float32 {kept.flops / 1e9:,.1f} GFLOP/s (" in line and str(limits.limits_path()) in line
