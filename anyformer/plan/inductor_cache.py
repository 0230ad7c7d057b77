"""torch.compile's cache on disk, kept apart for each processor and instruction set.

Inductor keeps the graphs and kernels it compiles in one folder per user (TORCHINDUCTOR_CACHE_DIR, by
default <tmp>/torchinductor_<user>), and its keys do not tell a process held to AVX2 (ATEN_CPU_CAPABILITY=avx2,
what the benchmarks' `--isa avx2` sets) from one that runs the processor's AVX-512. Measured with torch 2.13 on
an AMD EPYC Zen 5: a two-layer MLP's training step compiled under ATEN_CPU_CAPABILITY=avx2, then compiled again
without it, read the first process's entries and corrupted the heap (glibc: "corrupted size vs. prev_size"), and
the ViT benchmark aborted the same way after an `--isa avx2` run; with a fresh folder each ran clean. A /tmp that
outlives a change of processor (a machine image moved to another host) would hand one CPU's kernels to another
in the same way. So before anyformer's first compile the cache is pointed at a folder of this processor's and
instruction set's own, unless the user chose one: no process reads what another instruction set compiled.
"""
from __future__ import annotations

import getpass
import hashlib
import os
import re
import tempfile
from pathlib import Path

import torch

from .host import _cpu_capability, asked_isa, cpu_info

ENV = "TORCHINDUCTOR_CACHE_DIR"


def isa_key() -> str:
    """A short hash of what compiled CPU code depends on here: the processor, its flags, the instruction set
    ATen runs (which ATEN_CPU_CAPABILITY can lower), the other switches that lower it, and torch's version."""
    cpu = cpu_info()
    fields = [cpu["model"], " ".join(sorted(cpu["flags"])), _cpu_capability(), asked_isa(), torch.__version__]
    return hashlib.sha256("\0".join(fields).encode()).hexdigest()[:12]


def keep_apart() -> Path | None:
    """Set TORCHINDUCTOR_CACHE_DIR to <tmp>/torchinductor_<user>/anyformer-<isa_key> where the user has not set
    it, and return it (None where the user's folder is kept). Inductor reads the variable at its first compile,
    so this is called before anyformer's first torch.compile (plan/compiled.py)."""
    if os.environ.get(ENV):
        return None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's): one folder for all of them
        user = "unknown"
    base = Path(tempfile.gettempdir()) / f"torchinductor_{re.sub(r'[^a-zA-Z0-9]', '_', user)}"
    path = base / f"anyformer-{isa_key()}"
    os.environ[ENV] = str(path)
    return path
