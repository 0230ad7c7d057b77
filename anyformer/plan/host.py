"""What a speed choice depends on: the CPU (model and the instruction sets that pick kernels),
the torch build and the thread count, the GPU and its driver, the C++ compiler of the native kernels,
and the plan's own code. Together they form the machine key that names a plan file.

A choice measured on one machine says nothing about another: oneDNN's fp32 Linear beat MKL by a
wide margin on one CPU and lost to it on another, and bf16, a gain where the CPU computes it
natively, ran slower than fp32 where the CPU emulates it (measured: docs/results.md, 'Measurements
behind the code's choices'). So every flag that can flip a kernel choice is in the key, and nothing
else (clock speed, microcode), so that the key stays stable on one host.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import torch

# The flags that decide which kernels oneDNN, MKL and ATen dispatch to. x86 names as /proc/cpuinfo
# spells them; the ARM ones come from its "Features" line.
RELEVANT_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm", "sme",
)
# Any of these computes bf16 products in hardware; without them bf16 is emulated through fp32.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16", "sme")


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The CPU model and its relevant flags from /proc/cpuinfo text (the first processor's)."""
    model, flags = "", set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "hardware", "cpu model") and not model:
            model = " ".join(value.split())
        elif name in ("flags", "features") and not flags:
            flags = set(value.split())
    return {"model": model, "flags": [f for f in RELEVANT_FLAGS if f in flags]}


@functools.lru_cache(maxsize=None)
def cpu_info() -> dict[str, Any]:
    """{"model", "flags"}; read once: the CPU does not change while the process runs."""
    try:
        with open("/proc/cpuinfo") as f:
            info = parse_cpuinfo(f.read())
    except OSError:  # not Linux: the model is what platform knows; flags unknown
        info = {"model": "", "flags": []}
    info["model"] = info["model"] or platform.processor() or platform.machine() or "unknown CPU"
    return info


def native_bf16(flags: list[str] | None = None) -> bool:
    """Whether bf16 products run in hardware: the CPU's flags (or `flags`; the plan measures the rest),
    unless $ONEDNN_MAX_CPU_ISA caps oneDNN below its bf16 instructions, as the AVX2 stand-in does
    (benchmarks' `--isa avx2`): there they run converted through fp32, 0.5 GFLOP/s on an Intel Xeon with
    AMX, and a bf16 limit or row would read against a rate no library reaches."""
    if flags is None and not onednn_isa_allows_bf16():
        return False
    return any(f in NATIVE_BF16_FLAGS for f in (cpu_info()["flags"] if flags is None else flags))


def onednn_isa_allows_bf16(cap: str | None = None) -> bool:
    """Whether oneDNN's instruction-set cap (`cap`, else $ONEDNN_MAX_CPU_ISA; unset or DEFAULT: none)
    leaves it the bf16 instructions: AVX512_CORE_BF16 and above (…_FP16, …_AMX, …_AMX_FP16)."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA", "") if cap is None else cap).strip().upper()
    return cap in ("", "ALL", "DEFAULT") or any(part in cap for part in ("BF16", "FP16", "AMX"))


def _cpu_capability() -> str:
    # ATen's vectorised kernels follow this, and ATEN_CPU_CAPABILITY can lower it: part of the key.
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


@functools.lru_cache(maxsize=None)
def code_hash() -> str:
    """A hash of the plan's own code: the candidates, how they are checked and timed, and the native
    kernels' source. Any change to it names another plan file, so that records measured by other
    code are measured again, with no revision number to remember to raise."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted([*root.rglob("*.py"), *root.glob("native/*.cpp"), *root.glob("native/*.h")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def compiler() -> str:
    """The C++ compiler the native kernels are built with, as its first --version line ("none")."""
    try:
        cmd = shlex.split(os.environ.get("CXX") or "g++")
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return "none"
    return out.splitlines()[0].strip() if out.strip() else "none"


def gpu_info() -> dict[str, Any]:
    """The GPU, its CUDA runtime and driver, where torch sees one: a timing on one card says nothing
    about another, nor about the same card under another driver."""
    if not torch.cuda.is_available():
        return {}
    try:
        driver = str(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError):
        driver = "unknown"
    return {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda, "driver": driver}


# The switches that make the libraries (and the native kernels) run less of the CPU's instruction set than it
# has, e.g. AVX2 code on an AVX-512 processor: a plan measured under them is another machine's.
ISA_SWITCHES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ANYFORMER_ISA")


def asked_isa() -> str:
    """The instruction-set switches set in this process's environment, "" where none is."""
    return " ".join(f"{k}={os.environ[k]}" for k in ISA_SWITCHES if os.environ.get(k))


def machine(threads: int | None = None) -> dict[str, Any]:
    """The machine key's fields and "key", a short hash of them."""
    cpu = cpu_info()
    fields = {
        "code": code_hash(), "compiler": compiler(),
        "cpu": cpu["model"], "arch": platform.machine(), "flags": list(cpu["flags"]),
        "torch": torch.__version__, "capability": _cpu_capability(),
        "onednn": bool(torch.backends.mkldnn.is_available()), "mkl": bool(torch.backends.mkl.is_available()),
        "threads": int(torch.get_num_threads() if threads is None else threads), **gpu_info(),
        "isa": asked_isa(),
    }
    blob = json.dumps(fields, sort_keys=True).encode()
    return {**fields, "key": hashlib.sha256(blob).hexdigest()[:12]}


def file_name(m: dict[str, Any]) -> str:
    """A readable name that is also unique: '<cpu model>-torch<version>-t<threads>-<hash>.json', the CPU's
    model name lower-cased with its runs of other characters made one '-'."""
    slug = re.sub(r"[^a-z0-9]+", "-", m["cpu"].lower()).strip("-")[:40] or "cpu"
    version = re.sub(r"[^A-Za-z0-9.]+", "_", m["torch"])
    return f"{slug}-torch{version}-t{m['threads']}-{m['key']}.json"
