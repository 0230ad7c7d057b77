"""anyformer.runtime: what the CLI sets before torch loads."""
import os
import subprocess
import sys

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
