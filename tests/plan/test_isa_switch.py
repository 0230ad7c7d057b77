"""`--isa avx2` of the CPU benchmarks (bench_common.setup_env): the process is run again with torch's, oneDNN's,
MKL's and the native kernels' switches set, so an AVX-512 host runs the code of a host without it; its results
go to a folder of their own, and the speed plan files its measurements under another machine key."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyformer.plan import host

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
from bench_common import processor_folder, setup_env
setup_env()
import torch
from anyformer.plan import host
print(torch.backends.cpu.get_cpu_capability(), processor_folder(), host.asked_isa(), sep="|")
"""


def _run(tmp_path: Path, *args: str) -> list[str]:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT.format(bench=str(REPO / "benchmarks")))
    env = {k: v for k, v in os.environ.items() if k not in host.ISA_SWITCHES and k != "_ANYFORMER_BENCH_REEXEC"}
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                       env={**env, "PYTHONPATH": str(REPO)}, check=False)
    assert r.returncode == 0, r.stderr[-1500:]
    return r.stdout.strip().splitlines()[-1].split("|")


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="the switches are x86-64's")
def test_isa_avx2_runs_avx2_code_and_files_its_results_apart(tmp_path):
    capability, folder, asked = _run(tmp_path, "--isa", "avx2")
    assert capability == "AVX2" and folder.endswith("-as-avx2")
    assert asked == "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ANYFORMER_ISA=avx2"
    plain_capability, plain_folder, plain_asked = _run(tmp_path)
    assert plain_folder == folder.removesuffix("-as-avx2") and plain_asked == ""


def test_an_unknown_isa_is_refused_in_one_line(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT.format(bench=str(REPO / "benchmarks")))
    r = subprocess.run([sys.executable, str(script), "--isa", "sse9"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == "--isa sse9: expected one of avx2"


def test_the_switches_are_part_of_the_machine_key(monkeypatch):
    for k in host.ISA_SWITCHES:
        monkeypatch.delenv(k, raising=False)
    plain = host.machine(threads=1)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ANYFORMER_ISA", "avx2")
    switched = host.machine(threads=1)
    assert switched["isa"] == "ATEN_CPU_CAPABILITY=avx2 ANYFORMER_ISA=avx2" and switched["key"] != plain["key"]


CHILD = """
import os, subprocess, sys
sys.path.insert(0, {bench!r})
from bench_common import on_all_cores, setup_env
setup_env()
import torch  # with BENCH_ENV's OMP_PROC_BIND=close this binds the main thread to the first core
ask = [sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"]
bound = subprocess.run(ask, capture_output=True, text=True).stdout.strip()
freed = subprocess.run(ask, capture_output=True, text=True, preexec_fn=on_all_cores).stdout.strip()
print(len(os.sched_getaffinity(0)), bound, freed, sep="|")
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="binding to one core is seen only with two or more")
def test_a_contestants_process_gets_every_core_back_after_torch_bound_the_benchmark(tmp_path):
    # A benchmark that runs its contestants as processes (bench_nanogpt_recipe.py) had them all on one
    # core: importing torch under OMP_PROC_BIND=close binds the main thread, and children inherit it.
    script = tmp_path / "children.py"
    script.write_text(CHILD.format(bench=str(REPO / "benchmarks")))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert r.returncode == 0, r.stderr[-1500:]
    here, bound, freed = r.stdout.strip().splitlines()[-1].split("|")
    # (here and bound: 1 with torch 2.13's libgomp; what must hold is that the contestant has every core.)
    assert freed == str(len(os.sched_getaffinity(0))), (here, bound, freed)
