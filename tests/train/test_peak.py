"""The peak a run's MFU divides by: on a CPU the sustained matrix-product rate that `doctor --limits` and
the benchmarks read against (anyformer.limits), in the run's precision, measured by the first run on the
machine and kept for the next ones, without moving the training RNG; on a known GPU its data sheet's dense
bf16 peak."""
import json
import re

import pytest
import torch

from anyformer import limits
from anyformer.train import perf


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    perf._peak.cache_clear()
    yield tmp_path
    perf._peak.cache_clear()


def test_a_cpu_run_divides_by_the_limits_rate_in_its_precision(monkeypatch, empty_cache):
    asked = []

    def rate(dtype=torch.float32, sizes=None, seconds=None, clock=None):
        asked.append(dtype)
        torch.randn(3)  # draws of its own, as the real one's matrices
        return limits.MatmulRate(str(dtype), 123e9 if dtype == torch.float32 else 456e9, 2048)
    monkeypatch.setattr(limits, "matmul_rate", rate)
    flops, source = perf.peak_flops(torch.device("cpu"), "none")
    assert flops == 123e9 and re.fullmatch(r"measured: fp32 matmul, the best of 1024 and 2048 products on torch.mm "
                                           r"and oneDNN \(\d{4}-\d\d-\d\dT\d\d:\d\dZ\)", source)
    assert perf.peak_flops(torch.device("cpu"), "none")[0] == 123e9 and asked == [torch.float32]  # once
    assert perf.peak_flops(torch.device("cpu"), "bf16")[0] == 456e9 and asked[-1] == torch.bfloat16

    class Cfg:
        amp = "none"
    (empty_cache / "limits").rename(empty_cache / "elsewhere")  # nothing kept: this one measures again
    perf._peak.cache_clear()
    torch.manual_seed(0)
    want = torch.rand(2)
    torch.manual_seed(0)
    assert perf.Peak(torch.device("cpu"), Cfg()).flops() == 123e9 and len(asked) == 3
    assert torch.equal(torch.rand(2), want)  # the measurement's own draws left the training RNG alone


def test_the_next_run_reads_the_kept_rate_and_says_when_it_was_measured(monkeypatch, empty_cache):
    asked = []
    monkeypatch.setattr(limits, "matmul_rate", lambda dtype=torch.float32: asked.append(dtype) or
                        limits.MatmulRate(str(dtype).removeprefix("torch."), 77e9, 1024, "oneDNN"))
    first = perf.peak_flops(torch.device("cpu"), "none")
    perf._peak.cache_clear()  # a new process: it reads the file the first one wrote
    assert perf.peak_flops(torch.device("cpu"), "none") == first and asked == [torch.float32]
    assert limits.kept_matmul_rate(torch.float32)[0] == limits.MatmulRate("float32", 77e9, 1024, "oneDNN")


def test_a_kept_rate_unreadable_of_another_machine_or_malformed_is_measured_again(monkeypatch, empty_cache):
    asked = []
    monkeypatch.setattr(limits, "matmul_rate", lambda dtype=torch.float32: asked.append(dtype) or
                        limits.MatmulRate(str(dtype).removeprefix("torch."), 5e9, 1024))
    path = limits.limits_path()
    path.parent.mkdir(parents=True)
    ours = json.dumps(limits._machine())
    for n, text in enumerate(("not json", '{"format": "anyformer-limits/1", "machine": {"cpu": "another"}, '
                              '"matmul": {"float32": {"flops": 1e15, "when": "2020-01-01T00:00Z"}}}',
                              '{"format": "anyformer-limits/1", "machine": ' + ours + ', '
                              '"matmul": {"float32": {"flops": 1e15, "when": "2020-01-01T00:00Z", "size": "big"}}}'), 1):
        path.write_text(text)
        assert limits.kept_matmul_rate(torch.float32)[0].flops == 5e9 and len(asked) == n  # measured
        assert limits.kept_matmul_rate(torch.float32)[0].flops == 5e9 and len(asked) == n  # then read back


def test_a_run_whose_steps_beat_the_kept_rate_measures_it_again_and_keeps_the_higher(monkeypatch, empty_cache):
    measured = iter([50e9, 80e9, 60e9])  # kept while the cores were busy, then the host's, then busy again

    def rate(dtype=torch.float32):
        torch.randn(3)
        return limits.MatmulRate("float32", next(measured), 1024)
    monkeypatch.setattr(limits, "matmul_rate", rate)

    class Cfg:
        amp = "none"
    peak = perf.Peak(torch.device("cpu"), Cfg())
    assert peak.flops() == 50e9
    peak.recheck(40e9)  # below the kept rate: nothing is measured
    assert peak.flops() == 50e9 and next(iter(limits._read(limits.limits_path(), limits._machine()).values()))[
        "flops"] == 50e9
    torch.manual_seed(0)
    want = torch.rand(2)
    torch.manual_seed(0)
    peak.recheck(70e9)  # the steps beat it: measured again, higher, kept and read from here on
    assert torch.equal(torch.rand(2), want)
    assert peak.flops() == 80e9 and peak.source().startswith("measured: fp32 matmul")
    perf._peak.cache_clear()
    assert limits.kept_matmul_rate(torch.float32)[0].flops == 80e9  # what the next run reads
    peak.recheck(90e9)  # measured again, lower than the kept: the kept one stands
    assert peak.flops() == 80e9 and limits.kept_matmul_rate(torch.float32)[0].flops == 80e9


@pytest.mark.slow
def test_a_run_that_beats_the_kept_rate_reports_its_mfu_against_the_rate_measured_again(tmp_path, monkeypatch,
                                                                                         empty_cache):
    """End to end: a kept rate of 1 kFLOP/s (as if measured while other work held the cores) is measured again
    at the run's end, and the summary divides by what was measured and kept."""
    from anyformer.cli import main
    from tests.conftest import SHARED_DATA
    from tests.train.test_run_settings import TINY
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    monkeypatch.setattr(limits, "SIZES", (128,))
    monkeypatch.setattr(limits, "SECONDS", 0.01)
    limits.keep(limits.MatmulRate("float32", 1e3, 1024))
    i = TINY.index("--threads")
    run = tmp_path / "run"
    assert main(["train", "mnist", "--max-steps", "2", "--eval-every", "2", "--out", str(run),
                 *TINY[:i], *TINY[i + 2:]]) == 0  # the process's own threads: the limits file named by them
    summary = json.loads((run / "summary.json").read_text())
    kept = limits.kept_matmul_rate(torch.float32)[0].flops
    assert summary["peak_flops"] == kept > 1e3 and summary["mfu"] < 1e3


def test_a_known_gpu_takes_its_data_sheet_peak():
    assert perf.spec_peak_flops("NVIDIA H100 PCIe") == 756e12 and perf.spec_peak_flops("NVIDIA H200") == 989.4e12
    assert perf.spec_peak_flops("Some Card") is None
