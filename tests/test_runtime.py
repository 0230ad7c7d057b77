"""anyformer.runtime: what the CLI sets before torch loads."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

CODE = ("import os, sys, anyformer.runtime as r; r.configure(threads={threads}); "
        "print(os.environ.get('OMP_NUM_THREADS', '-'), 'torch' in sys.modules)")


def _omp(threads, **env) -> list[str]:
    e = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", CODE.format(threads=threads)], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**e, **env}).stdout
    return out.split()


def test_threads_become_every_threads_openmp_default_unless_the_user_set_it():
    # torch.set_num_threads sets the calling thread's only; serve's worker threads run compiled kernels.
    assert _omp(1) == ["1", "False"]
    assert _omp(None) == ["-", "False"]
    assert _omp(1, OMP_NUM_THREADS="3") == ["3", "False"]


# A process as the CLI makes it: configure() before torch, OpenMP pinning its main thread when it starts.
PINNED = """
import json, os, subprocess, sys, threading
import anyformer.runtime as r
r.configure()
import torch
torch.ones(64, 64) @ torch.ones(64, 64)
def child():
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
seen = {"allowed": sorted(r.allowed_cpus()), "main": sorted(os.sched_getaffinity(0)), "child": child()}
with r.unpinned():
    seen["child inside"] = child()
seen["main after"] = sorted(os.sched_getaffinity(0))
"""


def _pinned_run(then: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "TORCHINDUCTOR_"))}
    code = PINNED + then + "\nprint(json.dumps(seen))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_unpinned_gives_children_the_cores_that_openmp_pinning_took():
    seen = _pinned_run()
    cores = sorted(os.sched_getaffinity(0))
    assert seen["allowed"] == cores
    if len(cores) > 1:  # on one core there is nothing to take or give back
        assert len(seen["main"]) == 1 and seen["child"] == seen["main"]  # a child inherits the pin
    assert seen["child inside"] == cores  # started inside the block: every core
    assert seen["main after"] == seen["main"]  # the main thread pinned again after it


@pytest.mark.slow
def test_a_compile_in_a_pinned_process_gets_a_compiler_thread_a_core():
    # inductor counts its compile threads from the pinned main thread (one); the plan's compile sets them to
    # the cores, and starts them from a widened thread so that they keep every core
    seen = _pinned_run("""
import torch._inductor.config as inductor_config
from anyformer.plan.compiled import _compile_on_every_core
_compile_on_every_core()
seen["compile threads"] = inductor_config.compile_threads
seen["compiler threads"] = sorted(sorted(os.sched_getaffinity(t.native_id)) for t in threading.enumerate()
                                  if t.name.startswith("ThreadPoolExecutor"))
seen["main at the end"] = sorted(os.sched_getaffinity(0))
x = torch.randn(64)
seen["compiled right"] = bool(torch.allclose(torch.compile(lambda t: t.sin() * 2 + 1)(x), x.sin() * 2 + 1))
""")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) == 1:  # inductor compiles in one thread there, as it would unpinned
        assert seen["compile threads"] == 1 and seen["compiler threads"] == []
    else:
        assert seen["compile threads"] == len(cores)
        assert seen["compiler threads"] == [cores] * len(cores)
    assert seen["main at the end"] == seen["main"]
    assert seen["compiled right"]  # and a compile through those threads works
