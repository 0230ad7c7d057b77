"""anyformer's own fp32 CPU kernels (native/kernels.cpp), compiled on the machine that runs it:
attention over a packed q/k/v projection, and GELU (exact and tanh) forward and backward.

`attention_packed(qkv, causal)` takes a self-attention layer's packed projection, viewed as
(B, N, 3, H, D_h), and returns softmax(Q K^T / sqrt(D_h)) V with the heads already concatenated,
(B, N, H*D_h): no copy of q, k or v on the way in, none of the output on the way out, and a backward
that writes the gradient of the packed projection directly. Under torch.compile, tracers, transforms
and dispatch modes it is a torch custom op (`anyformer::attention`), which a compiled block calls as one
opaque node; a plain eager call runs the same kernels through a bare autograd.Function, which skips the
custom op's Python dispatch (about 150 us a layer's forward and backward on a 2-core Xeon: 4% of a small
char GPT's step). `gelu(x,
approximate)` is F.gelu (`anyformer::gelu`) with its own vectorized exp, which runs at more than
twice the rate of ATen's tanh GELU (measured: docs/results.md, 'Measurements behind the code's
choices').

The library is built once per machine with the system's C++ compiler (`$CXX`, else g++) into
`$ANYFORMER_NATIVE_DIR`, else `$ANYFORMER_CACHE/native/`, named by a hash of the source, the
compiler and the CPU, and written atomically (a build takes seconds of g++, too long to pay in
every process: a folder that many processes share, like torch's TORCH_EXTENSIONS_DIR, is built
once for all; measured: docs/results.md, 'Measurements behind the code's choices'). Where there is
no compiler, the build fails or the CPU is not x86-64, `library()` is None and the speed plan
never offers the kernel (`why_unavailable()` says why). Where it is built,
the plan still uses it only for shapes where it measured faster than SDPA and matched it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from ..files import atomic_path
from ..runtime import unpinned
from . import host
from .store import cache_root

SOURCES = tuple(Path(__file__).with_name("native") / f for f in ("kernels.cpp", "decode.cpp"))
HEADERS = (Path(__file__).with_name("native") / "simd.h",)
FLAGS = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=c++17")
# ANYFORMER_ISA=avx2 builds for AVX2 and FMA alone (x86-64-v3), the code a processor without AVX-512 runs,
# so that such a host's case can be measured on any x86-64 machine (with ATen's, oneDNN's and MKL's own
# switches: benchmarks/bench_common.py --isa avx2). Unset: every instruction this CPU has.
ENV_ISA = "ANYFORMER_ISA"
MARCH = {"native": "-march=native", "avx2": "-march=x86-64-v3"}
BUILD_TIMEOUT_S = 180
HEAD_DIMS = (16, 32, 48, 64)  # what the kernel takes (blocks of 16 floats, up to four)

ENV_NATIVE_DIR = "ANYFORMER_NATIVE_DIR"


def build_flags() -> tuple[str, ...]:
    """The compiler's flags: FLAGS and the instruction set ANYFORMER_ISA names (default: this CPU's)."""
    isa = os.environ.get(ENV_ISA, "").strip().lower() or "native"
    if isa not in MARCH:
        raise ValueError(f"{ENV_ISA}={isa!r}: expected one of {', '.join(MARCH)}")
    return (*FLAGS, MARCH[isa])

_lock = threading.Lock()
_why_not: list[str] = []


def _cpu_flags_line() -> str:
    """-march=native compiles for every flag of this CPU: the whole flags line goes into the name (and with
    -march=x86-64-v3 too: the same name on every host would be a build from another machine)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() in ("flags", "Features"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _compiler() -> list[str] | None:
    """The compiler command ($CXX may carry arguments, e.g. "ccache g++"), or None if not found."""
    words = shlex.split(os.environ.get("CXX") or "g++")
    found = shutil.which(words[0]) if words else None
    return [found, *words[1:]] if found else None


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL | None:
    """The kernel library, built on first use; None where it cannot be (see `why_unavailable`)."""
    with _lock:
        try:
            lib = _load()
            if lib is not None:
                _why_not.clear()
            return lib
        except Exception as e:  # noqa: BLE001 - no kernel is a fallback, never an error
            _why_not.append(f"{type(e).__name__}: {e}"[:300])
            return None


def why_unavailable() -> str | None:
    """Why `library()` is None (after it was asked), else None."""
    return _why_not[-1] if _why_not else None


def _unbuildable() -> str | None:
    """Why the kernel cannot be built here, or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"built only for x86-64 (this is {platform.machine()})"
    if not torch.backends.openmp.is_available():
        return "this torch build has no OpenMP runtime to share"
    if _compiler() is None:
        return f"no C++ compiler ({os.environ.get('CXX') or 'g++'} not found)"
    return None


def library_path() -> Path:
    """Where this machine's build of the kernel is (or would be) kept: named by a hash of the source,
    the compiler's version, the flags and the CPU's flags. Needs a compiler (`_unbuildable`)."""
    parts = [*(f.read_bytes() for f in (*SOURCES, *HEADERS)), host.compiler().encode(), " ".join(build_flags()).encode(),
             _cpu_flags_line().encode()]
    digest = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    return native_dir() / f"kernels-{digest}.so"


def native_dir() -> Path:
    """The folder of this machine's builds: `$ANYFORMER_NATIVE_DIR`, else the cache's native/."""
    folder = os.environ.get(ENV_NATIVE_DIR)
    return Path(folder).expanduser() if folder else cache_root() / "native"


def status() -> str:
    """One line for `anyformer doctor`: built (where), to be built on first use, or why not. Builds nothing."""
    why = why_unavailable() or _unbuildable()
    if why is not None:
        return f"not available: {why}"
    path = library_path()
    return f"built: {path}" if path.exists() else f"built on first use into {path.parent}"


def _load() -> ctypes.CDLL | None:
    why = _unbuildable()
    if why is not None:
        _why_not.append(why)
        return None
    path = library_path()
    if not path.exists():
        _build(path)
    # torch has loaded its OpenMP runtime (libgomp.so.1) already; the loader resolves the library's
    # libgomp.so.1 to that one, so both share one thread pool instead of two competing for the cores.
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:  # a damaged file (a disk filled up, a copy cut short): built once more
        path.unlink(missing_ok=True)
        _build(path)
        lib = ctypes.CDLL(str(path))
    P, L, F, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_int
    lib.attn_fwd.argtypes = [P] * 5 + [L] * 5 + [L] * 12 + [F, I, I]
    lib.attn_fwd.restype = I
    lib.attn_bwd.argtypes = [P] * 9 + [L] * 5 + [L] * 24 + [F, I, I]
    lib.attn_bwd.restype = I
    lib.gelu_fwd.argtypes = [P, P, L, I, I]
    lib.gelu_fwd.restype = I
    lib.gelu_bwd.argtypes = [P, P, P, L, I, I]
    lib.gelu_bwd.restype = I
    lib.linear_rows.argtypes = [P] * 4 + [L] * 5 + [I]
    lib.linear_rows.restype = I
    lib.transpose_rows.argtypes = [P, P, L, L, L, I]
    lib.transpose_rows.restype = I
    lib.gpt_decode_blocks.argtypes = [P] + [L] * 5 + [P, L, L, F, I, P, I]
    lib.gpt_decode_blocks.restype = I
    return lib


def _build(path: Path) -> None:
    """Each source compiled in its own g++ at once, then linked: a first run on a 2-core machine waited 2.7 s
    for one g++ to compile both in turn, 1.8 s for the larger alone (docs/results.md)."""
    cxx, flags = _compiler(), build_flags()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="anyformer-build-") as work, atomic_path(path, suffix=".so") as tmp:
        objects = [Path(work) / f"{source.stem}.o" for source in SOURCES]
        compile_only = [f for f in flags if f != "-shared"]
        _run_together([[*cxx, *compile_only, "-c", str(source), "-o", str(obj)]
                       for source, obj in zip(SOURCES, objects)], Path(work))
        _run_together([[*cxx, *flags, *map(str, objects), "-o", tmp]], Path(work))


def _run_together(commands: list[list[str]], work: Path) -> None:
    """Run the compiler `commands` side by side, within BUILD_TIMEOUT_S in all; RuntimeError with the first
    failure's last words. Their output goes to files, not pipes: a pipe left unread while another command
    is waited for could fill up and stall its compiler."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    logs = [work / f"cc{i}.log" for i in range(len(commands))]
    running = []
    try:
        with unpinned():  # started from a thread OpenMP pinned, both would share its one core
            for command, log in zip(commands, logs):
                with open(log, "w") as out:
                    running.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        for command, proc, log in zip(commands, running, logs):
            if proc.wait(timeout=max(0.0, deadline - time.monotonic())) != 0:
                words = log.read_text(errors="replace").strip()[-240:]
                raise RuntimeError(f"{Path(command[0]).name} failed: {words}")
    finally:
        for proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def supports(dtype: torch.dtype, head_dim: int, device: torch.device | str = "cpu") -> bool:
    """Whether the kernel takes these heads (fp32 on the CPU, D_h in HEAD_DIMS); it does not build it."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and head_dim in HEAD_DIMS


def takes_packed(dtype: torch.dtype, head_dim: int, device: torch.device | str = "cpu") -> bool:
    """Whether `attention_packed` takes a packed projection of this precision: fp32, or bf16 (an autocast
    step's projection), which it computes in fp32 and hands back in bf16. Under autocast the softmax and
    the products in bf16 ran slower than the casts and the fp32 kernel together (plan/decisions/attention.py
    times both where it decides)."""
    return dtype in (torch.float32, torch.bfloat16) and supports(torch.float32, head_dim, device)


def _strides(t: Tensor) -> tuple[int, int, int]:
    """Strides of a (B, H, N, D) view over batch, head and position (its D must be contiguous)."""
    return t.stride(0), t.stride(1), t.stride(2)


def _views(packed: Tensor) -> list[Tensor]:
    """q, k, v as (B, H, N, D_h) views of a (B, N, 3, H, D_h) tensor."""
    return [u.transpose(1, 2) for u in packed.unbind(2)]


_REFUSALS = {1: "a head size it does not take", 2: "a causal call with fewer keys than queries",
             3: "no memory for its buffers"}


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"anyformer native {what}: the kernel refused the call ({_REFUSALS.get(rc, f'code {rc}')})")


def _attention_kernel(qkv: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """(heads (B, N, H, D_h), log-sum-exp (B, H, N)) of the packed projection, from the native forward."""
    B, N, _, H, D = qkv.shape
    qkv = qkv if qkv.stride(-1) == 1 else qkv.contiguous()
    out = qkv.new_empty(B, N, H, D)
    lse = qkv.new_empty(B, H, N)
    q, k, v = _views(qkv)
    o = out.transpose(1, 2)
    _check(library().attn_fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                              B, H, N, N, D, *_strides(q), *_strides(k), *_strides(v),
                              *_strides(o), 1.0 / math.sqrt(D), int(causal), torch.get_num_threads()),
           "attention forward")
    return out, lse


@torch.library.custom_op("anyformer::attention", mutates_args=())
def _attention(qkv: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    return _attention_kernel(qkv, causal)


@_attention.register_fake
def _(qkv: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    B, N, _, H, D = qkv.shape
    return qkv.new_empty(B, N, H, D), qkv.new_empty(B, H, N)


def _attention_backward_kernel(qkv: Tensor, out: Tensor, lse: Tensor, grad: Tensor, causal: bool) -> Tensor:
    """The gradient of the packed projection (B, N, 3, H, D_h), from the native backward."""
    B, N, _, H, D = qkv.shape
    qkv = qkv if qkv.stride(-1) == 1 else qkv.contiguous()
    out = out if out.stride(-1) == 1 else out.contiguous()
    lse = lse.contiguous()
    grad = grad if grad.stride(-1) == 1 else grad.contiguous()
    dqkv = qkv.new_empty(B, N, 3, H, D)
    q, k, v = _views(qkv)
    dq, dk, dv = _views(dqkv)
    o, g = out.transpose(1, 2), grad.transpose(1, 2)
    _check(library().attn_bwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), g.data_ptr(),
                              lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), B, H, N, N, D,
                              *_strides(q), *_strides(k), *_strides(v), *_strides(o),
                              *_strides(g), *_strides(dq), *_strides(dk), *_strides(dv),
                              1.0 / math.sqrt(D), int(causal), torch.get_num_threads()),
           "attention backward")
    return dqkv


@torch.library.custom_op("anyformer::attention_backward", mutates_args=())
def _attention_backward(qkv: Tensor, out: Tensor, lse: Tensor, grad: Tensor, causal: bool) -> Tensor:
    return _attention_backward_kernel(qkv, out, lse, grad, causal)


@_attention_backward.register_fake
def _(qkv: Tensor, out: Tensor, lse: Tensor, grad: Tensor, causal: bool) -> Tensor:
    return torch.empty_like(qkv, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output) -> None:
    qkv, causal = inputs
    ctx.save_for_backward(qkv, output[0], output[1])
    ctx.causal = causal


def _packed_grad(ctx, grad_out: Tensor, backward: Callable[..., Tensor]) -> Tensor:
    """The gradient of the packed projection from the saved forward, by `backward` (the custom op or its bare
    kernel), or by torch's maths where the backward records a graph (create_graph=True: see
    _attention_grad_by_torch)."""
    qkv, out, lse = ctx.saved_tensors
    if torch.is_grad_enabled():
        return _attention_grad_by_torch(qkv, grad_out, ctx.causal)
    return backward(qkv, out, lse, grad_out, ctx.causal)


def _backward(ctx, grad_out: Tensor, grad_lse: Tensor | None):
    return _packed_grad(ctx, grad_out, _attention_backward), None


def _attention_grad_by_torch(qkv: Tensor, grad: Tensor, causal: bool) -> Tensor:
    """The gradient of the packed projection through torch's own products and softmax, which have
    derivatives: for a backward that records a graph of the gradient (create_graph=True: a gradient
    penalty, a Hessian-vector product), where the native backward would end the graph. The same maths;
    the summation order differs."""
    q, k, v = _views(qkv)
    scores = q @ k.transpose(-2, -1) / math.sqrt(qkv.shape[-1])
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=qkv.device).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2)  # (B, N, H, D_h), as the kernel writes it
    return torch.autograd.grad(out, qkv, grad, create_graph=True)[0]


_attention.register_autograd(_backward, setup_context=_setup)


class _EagerAttention(torch.autograd.Function):
    """The custom op's forward and backward kernels for a plain eager call, without its dispatch."""

    @staticmethod
    def forward(ctx, qkv: Tensor, causal: bool) -> Tensor:
        out, lse = _attention_kernel(qkv, causal)
        ctx.save_for_backward(qkv, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        return _packed_grad(ctx, grad_out, _attention_backward_kernel), None


def _plain_eager(t: Tensor) -> bool:
    """A plain tensor outside torch.compile, jit tracing, torch.func transforms and dispatch modes (a
    FakeTensor's, a FLOP counter's): where the kernels may be called bare, with no custom op to be seen.
    layers.plain_eager(t, autocast_ok=True) asks the same, but layers imports this module (and its tests
    stand in for torch.compile by patching its own names), so this public function asks for itself."""
    return type(t) is Tensor and not (torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None
                                      or torch._C._are_functorch_transforms_active()
                                      or torch._C._len_torch_dispatch_stack())


def attention_packed(qkv: Tensor, causal: bool = False) -> Tensor:
    """softmax(Q K^T / sqrt(D_h)) V over a packed projection qkv (B, N, 3, H, D_h), each D_h row
    contiguous; `causal`: position i attends to positions <= i. Returns (B, N, H*D_h). fp32 CPU
    tensors with D_h in HEAD_DIMS only (`supports`), and only where `library()` is not None; bf16 ones
    are computed in fp32 and the heads returned in bf16 (`takes_packed`)."""
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"attention_packed: expected qkv of shape (B, N, 3, H, D_h), got {tuple(qkv.shape)}")
    B, N, _, H, D = qkv.shape
    if not takes_packed(qkv.dtype, D, qkv.device):
        raise ValueError(f"attention_packed: takes float32 (or bfloat16) CPU tensors with D_h in {HEAD_DIMS}, "
                         f"got {qkv.dtype} on {qkv.device} with D_h={D}")
    if not torch.compiler.is_compiling() and library() is None:  # a traced call was checked eagerly
        raise RuntimeError(f"attention_packed: the native kernel is not available here ({why_unavailable()})")
    low = qkv.dtype == torch.bfloat16
    if low:
        qkv = qkv.float()
    elif qkv.stride(-1) != 1:
        qkv = qkv.contiguous()
    heads = (_EagerAttention.apply(qkv, bool(causal)) if _plain_eager(qkv)
             else _attention(qkv, bool(causal))[0]).view(B, N, H * D)
    return heads.to(torch.bfloat16) if low else heads


# --- GELU ----------------------------------------------------------------------------------------
GELU_APPROXIMATIONS = ("none", "tanh")


@torch.library.custom_op("anyformer::gelu", mutates_args=())
def _gelu(x: Tensor, approximate: str) -> Tensor:
    _gelu_input("gelu", x, approximate)
    x = x.contiguous()
    y = torch.empty_like(x)
    _check(library().gelu_fwd(x.data_ptr(), y.data_ptr(), x.numel(), int(approximate == "tanh"),
                              torch.get_num_threads()), "GELU")
    return y


@_gelu.register_fake
def _(x: Tensor, approximate: str) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("anyformer::gelu_backward", mutates_args=())
def _gelu_backward(grad: Tensor, x: Tensor, approximate: str) -> Tensor:
    _gelu_input("gelu_backward", x, approximate)
    if grad.shape != x.shape or grad.dtype != x.dtype or grad.device != x.device:
        raise ValueError(f"gelu_backward: grad must match x ({tuple(x.shape)}, {x.dtype}), "
                         f"got {tuple(grad.shape)}, {grad.dtype} on {grad.device}")
    x, grad = x.contiguous(), grad.contiguous()
    dx = torch.empty_like(x)
    _check(library().gelu_bwd(x.data_ptr(), grad.data_ptr(), dx.data_ptr(), x.numel(), int(approximate == "tanh"),
                              torch.get_num_threads()), "GELU backward")
    return dx


@_gelu_backward.register_fake
def _(grad: Tensor, x: Tensor, approximate: str) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _gelu_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _gelu_grad(ctx, grad: Tensor):
    (x,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: ATen's backward has a derivative, the native one none
        return torch.ops.aten.gelu_backward(grad, x, approximate=ctx.approximate), None
    return _gelu_backward(grad, x, ctx.approximate), None


_gelu.register_autograd(_gelu_grad, setup_context=_gelu_setup)


def _gelu_input(where: str, x: Tensor, approximate: str) -> None:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"{where}: approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    if x.device.type != "cpu" or x.dtype != torch.float32:
        raise ValueError(f"{where}: takes float32 CPU tensors, got {x.dtype} on {x.device}")


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """F.gelu(x, approximate=...) on the native kernel: float32 CPU tensors only, where `library()`
    is not None; the result is contiguous."""
    _gelu_input("gelu", x, approximate)
    if not torch.compiler.is_compiling() and library() is None:
        raise RuntimeError(f"gelu: the native kernel is not available here ({why_unavailable()})")
    return _gelu(x, approximate)


# --- a few rows through a linear layer -----------------------------------------------------------
ROWS_MAX = 4  # what `linear_rows` is for: a generation step's rows (more take a GEMM library)


def linear_rows(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b for at most ROWS_MAX rows x (..., in) of float32 CPU tensors, without gradients, in one
    pass over W: a generation step's products, bound by reading the weights (IEEE products; only the
    summation order differs from F.linear's). Where `library()` is not None; eager calls only."""
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.device.type != "cpu" or weight.device.type != "cpu":
        raise ValueError(f"linear_rows: takes float32 CPU tensors, got {x.dtype} and {weight.dtype} on {x.device}")
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    if x.shape[-1] != in_features or not 0 < rows <= ROWS_MAX:
        raise ValueError(f"linear_rows: expected 1 to {ROWS_MAX} rows of {in_features} features, got {tuple(x.shape)}")
    lib = library()
    if lib is None:
        raise RuntimeError(f"linear_rows: the native kernel is not available here ({why_unavailable()})")
    x2 = x.reshape(rows, in_features)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = weight if weight.is_contiguous() else weight.contiguous()
    b = None if bias is None else bias.contiguous()
    y = torch.empty(rows, out_features, dtype=x.dtype)
    _check(lib.linear_rows(x2.data_ptr(), w.data_ptr(), None if b is None else b.data_ptr(), y.data_ptr(), rows,
                           in_features, out_features, x2.stride(0), out_features, torch.get_num_threads()),
           "linear_rows")
    return y.view(*x.shape[:-1], out_features)


# --- transpose -----------------------------------------------------------------------------------
def transposed_rows(x: Tensor) -> Tensor:
    """x (M, N) as the rows of its transpose, (N, M) contiguous: the same values as x.t().contiguous(),
    copied in tiles (kernels.cpp's transpose_rows; three times ATen's strided copy on the weight
    gradient's shapes). ATen's copy where the kernel is not there, under torch.compile (a traced graph
    cannot call into ctypes), or for what it does not take (not 2-D float32 on the CPU with unit column
    stride)."""
    lib = library() if not torch.compiler.is_compiling() else None
    if (lib is None or x.dim() != 2 or x.dtype != torch.float32 or x.device.type != "cpu" or x.stride(1) != 1
            or x.numel() == 0):
        return x.t().contiguous()
    rows, cols = x.shape
    out = torch.empty(cols, rows, dtype=x.dtype)
    _check(lib.transpose_rows(x.data_ptr(), out.data_ptr(), rows, cols, x.stride(0), torch.get_num_threads()),
           "transpose")
    return out
