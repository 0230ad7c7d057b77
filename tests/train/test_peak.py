"""The peak a run's MFU divides by: on a CPU the sustained matrix-product rate that `doctor --limits` and
the benchmarks read against (anyformer.limits), measured once a process, in the run's precision, without
moving the training RNG; on a known GPU its data sheet's dense bf16 peak."""
import torch

from anyformer import limits
from anyformer.train import perf


def test_a_cpu_run_divides_by_the_limits_rate_in_its_precision(monkeypatch):
    asked = []

    def rate(dtype=torch.float32, sizes=None, seconds=None, clock=None):
        asked.append(dtype)
        torch.randn(3)  # draws of its own, as the real one's matrices
        return limits.MatmulRate(str(dtype), 123e9 if dtype == torch.float32 else 456e9, 2048)
    monkeypatch.setattr(limits, "matmul_rate", rate)
    perf._peak.cache_clear()
    try:
        assert perf.peak_flops(torch.device("cpu"), "none") == (
            123e9, "measured: fp32 matmul, the best of 1024 and 2048 products on torch.mm and oneDNN")
        assert perf.peak_flops(torch.device("cpu"), "none")[0] == 123e9 and asked == [torch.float32]  # once
        assert perf.peak_flops(torch.device("cpu"), "bf16")[0] == 456e9 and asked[-1] == torch.bfloat16

        class Cfg:
            amp = "none"
        perf._peak.cache_clear()
        torch.manual_seed(0)
        want = torch.rand(2)
        torch.manual_seed(0)
        assert perf.Peak(torch.device("cpu"), Cfg()).flops() == 123e9
        assert torch.equal(torch.rand(2), want)  # the measurement's own draws left the training RNG alone
    finally:
        perf._peak.cache_clear()


def test_a_known_gpu_takes_its_data_sheet_peak():
    assert perf.spec_peak_flops("NVIDIA H100 PCIe") == 756e12 and perf.spec_peak_flops("NVIDIA H200") == 989.4e12
    assert perf.spec_peak_flops("Some Card") is None
