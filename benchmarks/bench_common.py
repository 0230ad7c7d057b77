"""Shared machinery of the side-by-side CPU benchmarks (bench_vit_cpu.py, bench_gpt_cpu.py,
bench_attention_kernels.py): process environment, alternated timing, the plain-matmul baseline of
the same shapes, peak memory in a fresh subprocess, and the facts a results file records.

Why each piece is there:
- glibc's allocator hands large activation buffers back to the kernel after every step, and
  unpinned OpenMP threads wander between cores; together they made medians swing up to 8x on this
  2-core machine. `setup_env()` sets the allocator thresholds and thread pinning for the whole
  benchmark process by re-executing it before torch is imported, so every contestant runs under
  the same settings (the ones `anyformer` applies for its own CLI, see anyformer/runtime.py).
- Contestants are timed in alternating rounds inside one process (the starting contestant
  rotates), so a burst of load from another process lands on all of them and the ratios hold
  even when absolute numbers drift.
- The matmul baseline runs the model's own matrix products (forward and, for training, both
  backward products of every linear layer, and the attention products) as bare `torch.matmul`
  calls on preallocated tensors. It is timed as one more contestant in the same rounds. Achieved
  GFLOP/s of a model over this rate says how much of the step is overhead outside the matmuls.
"""
from __future__ import annotations

import datetime as dt
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

# The settings of anyformer/runtime.py, as environment variables so that they hold from the first
# allocation of the process on and for every contestant alike.
BENCH_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "OMP_PROC_BIND": "close",
    "OMP_PLACES": "cores",
}


# `--isa avx2`: torch's own kernels (ATen), oneDNN, MKL and anyformer's native kernels run their AVX2 code
# on a processor that has AVX-512 too, so that the case of a host without it (an AMD Zen 3, an older Xeon)
# is measured on any x86-64 machine. The results go to their own folder (`processor_folder`).
ISA_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ANYFORMER_ISA": "avx2"}}


def add_isa_argument(ap) -> None:
    """The scripts' --isa flag; setup_env() reads it from the command line before torch is imported."""
    ap.add_argument("--isa", choices=sorted(ISA_ENV), help="run the kernels' code for this instruction set only "
                    "(e.g. avx2 on an AVX-512 processor); results go to results/<processor>-as-<isa>/")


def add_bf16_argument(ap, emulated: str) -> None:
    """The scripts' --bf16 flag: whether the bf16 rows are timed; `emulated` says what an emulated step cost."""
    ap.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                    help=f"time the bf16 rows: auto does where the CPU computes bf16 natively (emulated, {emulated})")


def with_bf16(asked: str) -> bool:
    """--bf16's answer: on, or auto where the CPU computes bf16 natively (not under --isa avx2, whose stand-in
    host has no bf16 instructions)."""
    from anyformer.plan import native_bf16
    return asked == "on" or (asked == "auto" and native_bf16())


BF16_NOT_TIMED = "Not timed (--bf16 off, or auto on a CPU without native bf16, where bf16 is emulated through fp32)."


def _asked_isa(argv: list[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--isa" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--isa="):
            return a.split("=", 1)[1]
    return None


def setup_env() -> None:
    """Re-execute this script with BENCH_ENV (and --isa's switches) set (once), before torch is imported."""
    isa = _asked_isa(sys.argv)
    if isa is not None and isa not in ISA_ENV:
        raise SystemExit(f"--isa {isa}: expected one of {', '.join(sorted(ISA_ENV))}")
    wanted = {**BENCH_ENV, **ISA_ENV.get(isa, {})}
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    if "torch" in sys.modules:
        raise RuntimeError("setup_env() must run before torch is imported")
    if os.environ.get("_ANYFORMER_BENCH_REEXEC"):
        raise RuntimeError("re-executed with the benchmark environment, yet it is not set")
    env = {**os.environ, **wanted, "_ANYFORMER_BENCH_REEXEC": "1"}
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


# ---------------------------------------------------------------------------------------------
# Facts about the run


# The cores this process may run on, read before torch is imported: with BENCH_ENV's OMP_PROC_BIND=close,
# importing torch binds the main thread to the first core, and a child process inherits that binding (torch
# in it then takes one thread). Children that are contestants get every core back (`on_all_cores`).
CORES = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def on_all_cores() -> None:
    """A `preexec_fn` for a contestant's process: the cores this process had before torch bound it."""
    if CORES:
        os.sched_setaffinity(0, CORES)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def wait_for_quiet(max_load: float = 2.5, max_wait_s: float = 900, poll_s: float = 30) -> str:
    """Wait (up to max_wait_s) until the 1-minute load is at most max_load; returns the load seen."""
    start = time.time()
    while os.getloadavg()[0] > max_load and time.time() - start < max_wait_s:
        print(f"load {load_average()} above {max_load}: waiting {poll_s:.0f} s", flush=True)
        time.sleep(poll_s)
    return load_average()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def cpu_words() -> str:
    """The processor as lscpu names it, with its family and model: AMD's name ("AMD EPYC") says no generation."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fact = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    return f"{fact.get('Model name', _cpu_model())} (family {fact.get('CPU family', '?')}, model {fact.get('Model', '?')})"


def _cpu_flags() -> list[str]:
    """The instruction-set flags that decide kernel speed (AVX-512, native bf16, AMX)."""
    from anyformer.plan.host import cpu_info
    return cpu_info()["flags"]


def processor_folder() -> str:
    """results/<processor>/: one folder per CPU model, so that figures from different processors
    sit side by side and none overwrites another's (e.g. "amd-epyc", "intel-xeon-...-2-80ghz")."""
    import re
    folder = re.sub(r"[^a-z0-9]+", "-", _cpu_model().lower()).strip("-") or "unknown-cpu"
    isa = os.environ.get("ANYFORMER_ISA")
    return f"{folder}-as-{isa}" if isa else folder


def _version(module: str) -> str:
    try:
        if module == "timm":
            from anyformer.interop._torchvision_compat import ensure_torchvision_importable
            ensure_torchvision_importable()
        mod = __import__(module)
        return getattr(mod, "__version__", "?")
    except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
        return f"not importable ({type(e).__name__})"


def machine() -> dict[str, str]:
    import torch

    from anyformer.plan.host import asked_isa  # the switches' names are the speed plan's, listed once there
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cpu flags": " ".join(_cpu_flags()),
        "cores": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": _version("timm"),
        "transformers": _version("transformers"),
        "env": " ".join(f"{k}={os.environ.get(k, '')}" for k in BENCH_ENV),
        "instruction sets": ", ".join(filter(None, [f"ATen {torch.backends.cpu.get_cpu_capability()}",
                                                    *asked_isa().split()])),
    }


# ---------------------------------------------------------------------------------------------
# Alternated timing


@dataclass
class Contestant:
    """`step()` runs one timed unit (a training step, or one inference batch); `items` is how
    many images or tokens one step processes, `flops` the model FLOPs it counts."""
    name: str
    step: Callable[[], object]
    items: int
    flops: float
    note: str = ""
    times: list[float] = field(default_factory=list)  # seconds per step, one entry per round

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median over the rounds."""
        return (max(self.times) - min(self.times)) / self.median if len(self.times) > 1 else 0.0


def alternate(contestants: list[Contestant], *, rounds: int, steps: int, warmup: int = 1,
              verbose: bool = True) -> None:
    """Time `steps` steps of each contestant per round, rounds alternating between contestants.

    The first contestant of a round rotates, so none always follows the same neighbour. The
    garbage collector runs between timings, never inside one.
    """
    for c in contestants:
        for _ in range(warmup):
            c.step()
    n = len(contestants)
    for r in range(rounds):
        for j in range(n):
            c = contestants[(r + j) % n]
            gc.collect()
            t = time.perf_counter()
            for _ in range(steps):
                c.step()
            c.times.append((time.perf_counter() - t) / steps)
        if verbose:
            print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{c.name} {c.times[-1] * 1e3:.0f} ms"
                                                         for c in contestants), flush=True)


# ---------------------------------------------------------------------------------------------
# The timed units: one training step, one inference batch


def train_step(module, forward, x, y, *, lr: float, weight_decay: float, bf16: bool = False):
    """One AdamW (foreach) step on cross-entropy, the same for every contestant; (B, [T,] C) logits."""
    import torch
    import torch.nn.functional as F
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
    module.train()

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = forward(x)
            loss = F.cross_entropy(logits.flatten(0, -2).float(), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _loss(x, y):
    import torch.nn.functional as F
    return lambda m: F.cross_entropy(m(x).flatten(0, -2).float(), y.flatten())


def prepared(module, x, y=None, *, bf16: bool = False, forced: str | None = None):
    """anyformer's `module` prepared by the speed plan (`plan.prepare`, the one door) for this
    benchmark's step, as its trainer prepares a model (a training forward of the step's loss, `y`
    given) or a command its model for passes without gradients (`y` None: an inference pass, the
    module in eval mode); under bf16 autocast with `bf16`, with the plan forced to `forced` if given."""
    import contextlib

    import torch
    from anyformer import plan

    def example(m):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return m(x) if y is None else _loss(x, y)(m)
    if y is None:
        module.eval()
    own_planning_budget()
    with plan.forcing(forced) if forced else contextlib.nullcontext():
        return plan.prepare(module, example)


def own_planning_budget() -> None:
    """A whole process's planning budget from here on, as each contestant's own run of the trainer would
    have. Without it a row prepared after others' planning (a compile decision alone took 79 s on an Intel
    Xeon) found the budget spent and ran the stock kernels unmeasured: the bf16 row's attention went to
    SDPA's bf16 flash backward, 10x the plan's choice a layer, and the row read 3.8x slower than fp32
    where the trainer's own bf16 step was faster."""
    from anyformer import plan
    p = plan.planner()
    plan.configure(total_budget_s=p.planning_s + plan.Planner().total_budget_s)


def planned_linears(key: str, module, x, y) -> str:
    """The kernel the speed plan measured fastest for all of `module`'s linear layers in this
    training step (anyformer.plan.linears: each as planned, all oneDNN, or all mixed), as its trainer
    settles it once the model is prepared (`prepared`); applied to `module`'s layers, and returned."""
    from anyformer.plan import linears_for_training, set_training_kernel
    prepared(module, x, y)
    return linears_for_training(module, lambda kernel: set_training_kernel(module, kernel), _loss(x, y),
                                fields=_fields(key, x)).choice


def planned_forward(key: str, module, x, y):
    """(forward, note): anyformer's training forward as its trainer runs it: its linear layers on the
    kernel the speed plan measured fastest for the whole step (`planned_linears`), then under
    torch.compile where the plan measured a compiled training step (forward and backward of this
    cross-entropy) faster on this machine (anyformer.plan.compiled), else the module itself. A first
    run measures, its compile time included; later runs read the plan's cache. `note` says what
    was chosen and why, for the results' header."""
    from anyformer.plan import compile_for_training
    # Each contestant is planned with a whole process's planning budget (`prepared`, inside
    # planned_linears, gives it), as its own run of the trainer would be.
    linears = planned_linears(key, module, x, y)
    return _planned(key, x, lambda fields: compile_for_training(module, _loss(x, y), fields=fields),
                    settled=f"linears={linears}")


def planned_inference(key: str, module, x):
    """(forward, note): anyformer's inference forward under torch.compile where the speed plan
    measured compiled passes faster on this machine (anyformer.plan.compile_for_inference), else the
    module itself. No compile-time accounting (calls=None): these rows stand for a process that
    serves many batches. `module` is put in eval mode first, as infer_step runs it."""
    from anyformer.plan import compile_for_inference
    prepared(module, x)
    return _planned(key, x, lambda fields: compile_for_inference(module, lambda m: m(x), fields=fields))


def _planned(key: str, x, decide: Callable, settled: str = ""):
    """(module, note): `decide(fields)`'s compile plan for input `x`, and one line saying what it chose
    (after `settled`, what was chosen before it)."""
    t0 = time.perf_counter()
    chosen = decide(_fields(key, x))
    note = (f"{key}: {settled + ', ' if settled else ''}compile={chosen.choice} ({chosen.why}; decided in "
            f"{time.perf_counter() - t0:.1f} s)")
    print(note, flush=True)
    return chosen.module, note


def _fields(key: str, x) -> dict:
    """The plan file's key for a benchmark's step on input `x`."""
    return {"model": f"bench-{key}", "batch": "x".join(map(str, x.shape)), "amp": "none", "device": "cpu"}


def infer_step(module, forward, x, bf16: bool = False):
    """One forward pass in eval mode under inference_mode."""
    import torch

    def step():
        module.eval()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            forward(x)
    return step


# ---------------------------------------------------------------------------------------------
# Matmul shapes and the plain-matmul baseline

# A matrix product: `batch` independent (m x k) @ (k x n) products; `count` of them per step.
Matmul = tuple[int, int, int, int, int]  # (batch, m, k, n, count)


def linear_matmuls(tokens: int, fan_in: int, fan_out: int, *, train: bool, count: int = 1,
                   grad_input: bool = True) -> list[Matmul]:
    """A linear layer over `tokens` rows: forward y = x W^T; backward dx = dy W and dW = dy^T x."""
    out = [(1, tokens, fan_in, fan_out, count)]
    if train:
        out.append((1, fan_out, tokens, fan_in, count))          # dW
        if grad_input:
            out.append((1, tokens, fan_out, fan_in, count))      # dx
    return out


def attention_matmuls(batch: int, heads: int, nq: int, nk: int, head_dim: int, *, train: bool,
                      count: int = 1) -> list[Matmul]:
    """S = Q K^T and O = P V per head (causal attention counted in full, as nanoGPT and PaLM do)."""
    bh = batch * heads
    out = [(bh, nq, head_dim, nk, count), (bh, nq, nk, head_dim, count)]
    if train:  # dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
        out += [(bh, nq, head_dim, nk, count), (bh, nk, nq, head_dim, count),
                (bh, nq, nk, head_dim, count), (bh, nk, nq, head_dim, count)]
    return out


def matmul_flops(shapes: Iterable[Matmul]) -> float:
    return float(sum(2 * b * m * k * n * c for b, m, k, n, c in shapes))


def matmul_baseline(shapes: list[Matmul], dtype=None, backend: str = "torch") -> Callable[[], None]:
    """A step that runs every product of `shapes` once (times its count) on preallocated operands.

    backend "torch": torch.matmul, i.e. what nn.Linear and the peers use (MKL sgemm for fp32 on
    CPU). "onednn": the 2-D products through oneDNN, as anyformer.plan.layers does; batched
    (attention) products stay on torch.matmul, as anyformer's attention does.
    """
    import torch
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(0)
    ops = []
    for b, m, k, n, c in shapes:
        if b == 1 and backend == "onednn":
            a, w = torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
            ops.append((lambda a=a, w=w: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], ""), c))
            continue
        shape_a, shape_b, shape_o = ((m, k), (k, n), (m, n)) if b == 1 else ((b, m, k), (b, k, n), (b, m, n))
        a = torch.randn(shape_a, generator=g).to(dtype)
        w = torch.randn(shape_b, generator=g).to(dtype)
        o = torch.empty(shape_o, dtype=dtype)
        ops.append((lambda a=a, w=w, o=o: torch.matmul(a, w, out=o), c))

    def step() -> None:
        for op, c in ops:
            for _ in range(c):
                op()
    return step


def matmul_baselines(shapes: list[Matmul], items: int, flops: float) -> list[Contestant]:
    """The three bare-matmul rows timed beside the contestants: torch (MKL), oneDNN and bf16."""
    import torch
    return [Contestant("matmul torch", matmul_baseline(shapes), items, flops, "MKL, as nn.Linear"),
            Contestant("matmul oneDNN", matmul_baseline(shapes, backend="onednn"), items, flops,
                       "2-D products on oneDNN, as anyformer.plan.layers"),
            Contestant("matmul bf16", matmul_baseline(shapes, dtype=torch.bfloat16), items, flops)]


# ---------------------------------------------------------------------------------------------
# Peak memory in a fresh subprocess

def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def rss_mib(kind: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(kind + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_memory_here(build: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
                        steps: int = 3) -> dict[str, float]:
    """In this (fresh) process: build a contestant, then the peak RSS of `steps` inference batches
    and, after resetting the high-water mark, of `steps` training steps. In MiB."""
    infer, train = build()
    gc.collect()
    rest = rss_mib()
    _reset_peak_rss()
    for _ in range(steps):
        infer()
    infer_peak = rss_mib("VmHWM")
    gc.collect()
    _reset_peak_rss()
    before_train = rss_mib()
    for _ in range(steps):
        train()
    return {"rest": rest, "infer_peak": infer_peak, "train_peak": rss_mib("VmHWM"),
            "train_start": before_train}


def memory_in_subprocess(script: str, args: list[str], timeout: float = 300) -> dict[str, float] | None:
    """Run `python script args` (which prints one JSON line prefixed MEMORY:) in a fresh process."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **BENCH_ENV})
    for line in proc.stdout.splitlines():
        if line.startswith("MEMORY:"):
            return json.loads(line[len("MEMORY:"):])
    print(f"memory child {args} failed:\n{proc.stderr[-2000:]}", flush=True)
    return None


# ---------------------------------------------------------------------------------------------
# Tables


def memory_section(script: str, children: list[tuple[str, list[str]]]) -> str:
    """The peak-memory table: each (name, child args) measured by `script` in a fresh process."""
    rows = []
    for name, args in children:
        mem = memory_in_subprocess(script, ["--memory-child", *args])
        if mem:
            rows.append([name, f"{mem['rest']:.0f}", f"{mem['infer_peak']:.0f}", f"{mem['train_peak']:.0f}",
                         f"{mem['train_peak'] - mem['train_start']:.0f}"])
            print("memory", rows[-1], flush=True)
    return table(["contestant", "RSS at rest (MiB)", "peak, inference", "peak, training",
                  "training peak over its start"], rows)


@functools.cache
def host_peak(dtype: str = "fp32") -> float | None:
    """The host's sustained matrix-product rate in FLOP/s (anyformer.limits: the best of 1024 and 2048
    products on torch.mm and on oneDNN, on all of torch's threads), measured once a process: what a CPU MFU divides by. bf16: None
    where the CPU has no bf16 arithmetic (its products then run converted, and no peak says much)."""
    import torch

    from anyformer.limits import matmul_rate
    from anyformer.plan import host
    if dtype == "bf16" and not host.native_bf16():
        return None
    return matmul_rate(torch.bfloat16 if dtype == "bf16" else torch.float32).flops


def peak_facts() -> dict[str, str]:
    """The peaks a results file's CPU MFU column reads against, for its facts list."""
    fp32, bf16 = host_peak("fp32"), host_peak("bf16")
    return {"CPU MFU against": f"fp32 matrix products at {fp32 / 1e9:.1f} GFLOP/s"
                               + (f", bf16 at {bf16 / 1e9:.1f}" if bf16 else "")
                               + " (anyformer.limits, `anyformer doctor --limits`: the best of 1024 and 2048 "
                                 "products on torch.mm and on oneDNN, measured in this process before the rounds)"}


def table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---" if i == 0 else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def speed_table(contestants: list[Contestant], reference: str, baselines: list[Contestant], unit: str,
                peak: float | None = None) -> str:
    """One row per contestant: median and best time, throughput, GFLOP/s, its CPU MFU (the GFLOP/s over
    the host's `peak` matrix-product rate, `host_peak`), share of each baseline's matmul rate, and the
    contestant's median time over the reference's (above 1: reference faster); then one row per baseline."""
    ref = next(c for c in contestants if c.name == reference)
    rates = [b.flops / b.median for b in baselines]
    mfu = [] if peak is None else ["CPU MFU"]
    header = ["contestant", "ms/step median", "best", "spread", f"{unit}/s", "GFLOP/s", *mfu,
              *[f"of {b.name}" for b in baselines], f"time / {reference} time"]

    def share(rate: float) -> list[str]:
        return [] if peak is None else [f"{rate / peak * 100:.0f}%"]
    rows = []
    for c in contestants:
        rate = c.flops / c.median
        rows.append([c.name + (f" ({c.note})" if c.note else ""), f"{c.median * 1e3:.0f}", f"{min(c.times) * 1e3:.0f}",
                     f"{c.spread * 100:.0f}%", f"{c.items / c.median:,.0f}", f"{rate / 1e9:.1f}", *share(rate),
                     *[f"{rate / r * 100:.0f}%" for r in rates], f"{c.median / ref.median:.2f}x"])
    for b, r in zip(baselines, rates):
        rows.append([b.name + (f" ({b.note})" if b.note else ""), f"{b.median * 1e3:.0f}", f"{min(b.times) * 1e3:.0f}",
                     f"{b.spread * 100:.0f}%", "-", f"{r / 1e9:.1f}", *share(r),
                     *[f"{r / r2 * 100:.0f}%" for r2 in rates], "-"])
    return table(header, rows)


def write_results(path: Path, title: str, intro: str, facts: dict[str, str], sections: list[tuple[str, str]],
                  folder: str | None = None) -> None:
    """Write results/<processor>/<name>: `path` names the file; the processor folder (the CPU's,
    unless `folder` names another, e.g. a GPU's) is added here."""
    path = path.parent / (folder or processor_folder()) / path.name
    body = [f"# {title}", "", intro, ""]
    body += [f"- {k}: {v}" for k, v in facts.items()]
    for heading, text in sections:
        body += ["", f"## {heading}", "", text]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(body) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")
