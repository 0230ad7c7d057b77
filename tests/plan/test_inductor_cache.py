"""torch.compile's cache is kept apart per processor and instruction set (anyformer/plan/inductor_cache.py):
a process held to AVX2 and one running the processor's own instruction set never share compiled code."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyformer.plan import inductor_cache
from anyformer.plan.inductor_cache import ENV, isa_key, keep_apart

REPO = Path(__file__).resolve().parents[2]


def test_the_cache_folder_is_keyed_by_the_instruction_set_and_a_users_own_is_kept(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setattr(inductor_cache.tempfile, "gettempdir", lambda: str(tmp_path))
    own = keep_apart()
    assert own is not None and os.environ[ENV] == str(own) and own.parent.parent == tmp_path
    assert own.name == f"anyformer-{isa_key()}"
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # what `--isa avx2` sets
    held = keep_apart()
    assert held is not None and held != own and held.parent == own.parent
    monkeypatch.setenv(ENV, str(tmp_path / "mine"))
    assert keep_apart() is None and os.environ[ENV] == str(tmp_path / "mine")
    monkeypatch.setenv(ENV, str(own))  # a parent's folder, inherited by a child held to AVX2
    assert keep_apart() == held and os.environ[ENV] == str(held)


def test_torchs_own_default_in_the_variable_is_not_taken_for_a_users_folder(monkeypatch, tmp_path):
    """Importing torch._dynamo writes torch's default folder into the variable (the plan's measurements and
    Hugging Face import it before any compile): that value is kept apart as if unset."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir
    monkeypatch.setattr(inductor_cache.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # torch's default is under the temporary folder too
    monkeypatch.setattr("tempfile.tempdir", None)
    cache_dir()  # what the import does
    assert os.environ[ENV] == os.path.abspath(default_cache_dir())
    own = keep_apart()
    assert own is not None and own.name == f"anyformer-{isa_key()}" and os.environ[ENV] == str(own)
    assert cache_dir() == str(own)  # inductor now compiles there


STEP = """
import torch, torch.nn as nn, torch.nn.functional as F
import torch._dynamo  # as the plan's measurements and Hugging Face import it: it sets the folder variable
from anyformer.plan.compiled import _compile
torch.manual_seed(0)
m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 10))
x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
compiled = _compile(m)
for _ in range(3):
    loss = F.cross_entropy(compiled(x), y)
    loss.backward()
print(f"{float(loss):.6f}")
"""


@pytest.mark.slow
def test_a_step_compiled_under_avx2_and_then_under_the_processors_own_code_both_run(tmp_path):
    # With one shared cache folder, torch 2.13 on an AVX-512 processor read the AVX2 process's entries in the
    # second process and corrupted its heap (an abort); each process now compiles into its own folder.
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "ATEN_CPU_CAPABILITY")}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))
    losses = []
    for extra in ({"ATEN_CPU_CAPABILITY": "avx2"}, {}):
        r = subprocess.run([sys.executable, "-c", STEP], env={**env, **extra}, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, (extra, r.returncode, r.stderr[-2000:])
        losses.append(float(r.stdout.split()[-1]))
    assert abs(losses[0] - losses[1]) < 1e-4, losses
    assert len(list((tmp_path / next(p.name for p in tmp_path.iterdir() if p.name.startswith("torchinductor_")))
                    .glob("anyformer-*"))) == 2
