"""Process settings that make CPU training fast and steady (measured in benchmarks/).

glibc maps and unmaps large activation buffers on every step unless its thresholds are raised,
and unpinned OpenMP threads wander between cores: together they made the same benchmark's
median swing by up to 8x. We set what the user has not set. OpenMP reads its variables when
torch is first imported, so `configure()` must run before that (the CLI calls it first).

Pinning binds the main thread to core 0 when torch loads OpenMP, and a thread's children inherit its
cores: a compiler started from it, or torch.compile's worker pool, would run on core 0 alone (and inductor,
counting the cores it may use, compiles in one thread). `unpinned()` gives the main thread back the cores
the process had before, for the moment such children are started.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_DONE = False
_ALLOWED: frozenset[int] | None = None  # the cores the process could run on before OpenMP pinned it


def configure(threads: int | None = None) -> None:
    """`threads`: the CPU threads the process will use (None: all it may run on)."""
    global _DONE, _ALLOWED
    if _DONE:
        return
    _DONE = True
    mine = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if "torch" not in sys.modules:  # before torch, no OpenMP has pinned this thread yet
        _ALLOWED = mine
    single_process = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    cores = core_count()
    if threads is not None and "torch" not in sys.modules:
        # Every thread's OpenMP default, not only the main thread's (torch.set_num_threads sets the
        # calling thread's): code that opens its own parallel regions in another thread, as an
        # inductor-compiled kernel does in `serve`'s worker threads, otherwise runs on every core.
        # Measured: 1,000 tokens through `serve --threads 1` took 4.8-6.3 s, with this 2.5-3.0 s.
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if single_process and (threads is None or threads >= cores) and "torch" not in sys.modules:
        # Pinning is right only for a process that owns every core: "close" binds thread i to core i,
        # so two single-thread processes (or torchrun's ranks) would both land on core 0.
        os.environ.setdefault("OMP_PROC_BIND", "close")
        os.environ.setdefault("OMP_PLACES", "cores")
    if sys.platform.startswith("linux") and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)   # keep buffers up to 32 MiB in the heap
            libc.mallopt(_M_TRIM_THRESHOLD, 1024 * 1024 * 1024)  # and do not hand freed memory straight back
        except (OSError, AttributeError):  # not glibc: nothing to tune
            pass


def core_count() -> int:
    """The cores the calling thread may run on, at least 1: the process's, before torch has pinned the main thread."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def allowed_cpus() -> frozenset[int] | None:
    """The cores this process could run on when `configure()` ran, before OpenMP pinned its main thread;
    None where configure did not run first (a library user's process: any pinning is theirs)."""
    return _ALLOWED


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """The calling thread on every core of `allowed_cpus()` inside the block, then back on its own: for
    starting processes (a compiler, a worker pool) that should use every core, not inherit core 0 alone.
    Nothing changes where the thread is not narrower than that, or the system refuses."""
    allowed = _ALLOWED
    own = os.sched_getaffinity(0) if allowed and hasattr(os, "sched_setaffinity") else None
    widened = False
    if own is not None and not own >= allowed:
        try:
            os.sched_setaffinity(0, allowed)
            widened = True
        except OSError:  # a cpuset narrowed since: leave the thread as it is
            pass
    try:
        yield
    finally:
        if widened:
            os.sched_setaffinity(0, own)
