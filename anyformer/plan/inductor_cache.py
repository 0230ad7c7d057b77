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

torch writes its default folder into TORCHINDUCTOR_CACHE_DIR itself the first time anything asks for it, and
importing torch._dynamo asks (torch 2.13's torch/_dynamo/package.py, at import): the plan's measurements and
Hugging Face's `generate` import it long before a compile. That value is torch's, not a user's choice. Taken
for one (before 2026-12-04), every process that had planned before its first compile compiled into the shared
folder, AVX2-held ones too, and `bench_generate.py` on a 2-core Zen 4 aborted with heap corruption in its
compiled decode step in 12 of 20 such runs; of 8 runs started with a folder of their own, none did.
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
    it, and return it (None where the user's folder is kept). Inductor reads the variable whenever it looks
    for its folder, so this is called before anyformer's first torch.compile (plan/compiled.py). Not a
    user's folder: torch's own default, which importing torch._dynamo writes into the variable, and a
    folder of ours for another instruction set (a parent process's, inherited by a child held to AVX2)."""
    chosen, key = os.environ.get(ENV), isa_key()
    if chosen and not _torch_default(chosen) and not _another_isas(chosen, key):
        return None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's): one folder for all of them
        user = "unknown"
    base = Path(tempfile.gettempdir()) / f"torchinductor_{re.sub(r'[^a-zA-Z0-9]', '_', user)}"
    path = base / f"anyformer-{key}"
    os.environ[ENV] = str(path)
    return path


def _torch_default(folder: str) -> bool:
    """Whether `folder` is the one torch falls back to (and writes into the variable on first use)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: its folder cannot be told apart, so it is kept
        return False
    return os.path.abspath(folder) == os.path.abspath(default_cache_dir())


def _another_isas(folder: str, key: str) -> bool:
    """Whether `folder` is one keep_apart made for another processor or instruction set than `key`'s."""
    name = Path(folder).name
    return name.startswith("anyformer-") and name != f"anyformer-{key}"
