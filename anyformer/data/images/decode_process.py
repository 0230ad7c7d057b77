"""Pictures decoded in a process of their own, at the lowest CPU priority.

Decoding and framing a large upload (a 2400 x 2400 PNG: about 43 ms on one core) is most of the work of an
image classifier's heavy request; the model's pass on the small result is light work. Done in a thread of the
server it holds a core for its whole length, and holds the GIL for part of it. Done in a process at nice 19, it
shares no lock with the server and the kernel prefers light work over it (a weight of 15 against a nice-0
thread's 1,024). That alone is not isolation: on a 2-core VM (AMD EPYC Zen 5) a nice-19 process decoding in a
loop still raised light requests' p99 latency from 32 to 47 ms (docs/results.md, 'Measurements behind the code's
choices'), so the server also counts the child's CPU time in its heavy lane's turns (serve/worker.py `charge`),
which caps it while light requests are in.

The child runs on every core the server may use. Where the server's threads are all its cores, the CLI pins
OpenMP's threads (anyformer/runtime.py), which binds the server's main thread to core 0, and a child inherits that,
then pins itself to core 0 again when it imports torch: measured on a 2-core Intel Xeon, a server with `--threads 2`
answered 29-31 large uploads in a soak's minute where one with `--threads 1` (not pinned) answered 131-138, and
176-186 once the child took both cores (docs/results.md). So the child is given the cores the server had before the
pin, and takes them after torch has loaded.

A second gain: a file crafted to crash the decoder takes down only this process, which is started again
for the next picture; the caller sees a ValueError (a picture that cannot be read), as for any bad file.

The child runs `ImagePreprocess.load_checked`, the function `anyformer predict` uses, so a picture decoded
here gives the same pixels and warning as in the server's own process, bit for bit.
"""
from __future__ import annotations

import io
import multiprocessing as mp
import os
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch import Tensor

from ...runtime import allowed_cpus

NICE = 19  # the lowest priority `nice` gives: the decoder runs on time nothing else wants
EXIT_WAIT_S = 10.0  # how long a child that closed its pipe is given to exit before it is killed


class PictureDecoder:
    """`preprocess.load_checked` for picture bytes, computed in a low-priority child process (started on first
    use, or at once by `start()`), one picture at a time; safe to call from several threads."""

    def __init__(self, preprocess: Any, nice: int = NICE) -> None:
        self.preprocess, self.nice = preprocess, nice
        self._lock = threading.Lock()
        self._child: Any = None
        self._conn: Connection | None = None

    def start(self) -> None:
        """Launch the child now (it loads torch, about a second, in the background) unless it runs."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> Connection:
        if self._child is None or not self._child.is_alive():
            # spawn, not fork: the server has threads (torch's, the worker lanes), and a forked child
            # of a threaded process may inherit a lock held by a thread that does not exist in it.
            ctx = mp.get_context("spawn")
            ours, theirs = ctx.Pipe()
            self._child = ctx.Process(target=_serve, args=(theirs, self.preprocess, self.nice, allowed_cpus()),
                                      daemon=True, name="anyformer-decoder")
            self._child.start()
            theirs.close()
            self._conn = ours
        assert self._conn is not None
        return self._conn

    def decode(self, data: bytes) -> tuple[Tensor, str | None, float]:
        """(uint8 (C, H, W) pixels, a warning or None, the seconds of CPU the child spent on the picture) for a
        picture's bytes: `preprocess.load_checked`'s answer, and the time for the caller's accounts (serve's heavy
        lane counts it in its turns); ValueError for a picture that cannot be decoded, or whose decoding stopped
        the child."""
        with self._lock:
            conn = self._ensure()
            try:
                conn.send_bytes(data)
                status, *answer = conn.recv()
            except (EOFError, OSError):
                raise ValueError(f"the picture's decoder stopped while reading it ({self._ended()})") from None
        if status == "ok":
            pixels, warning, cpu = answer
            return torch.from_numpy(pixels), warning, cpu
        if status == "bad":
            raise ValueError(answer[0])
        raise RuntimeError(f"the picture's decoder failed: {answer[0]}")

    def _ended(self) -> str:
        """How the child that closed its pipe ended, once it has (its exit can take seconds on a busy machine:
        the interpreter unloads torch), said in a few words; the next picture starts a new child."""
        self._child.join(EXIT_WAIT_S)
        code = self._child.exitcode
        self._stop()
        return f"exit code {code}" if code is not None else f"it had not exited {EXIT_WAIT_S:g} s later and was killed"

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._child is not None and self._child.is_alive():
            self._child.kill()
            self._child.join(5.0)
        self._child = self._conn = None

    def close(self) -> None:
        """Stop the child (a picture it is decoding is dropped)."""
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._child.pid if self._child is not None and self._child.is_alive() else None


def _serve(conn: Connection, preprocess: Any, nice: int, cores: frozenset[int] | None) -> None:
    """The child: lower its priority, take `cores` (the server's before OpenMP pinned it; None: leave the
    inherited ones), then answer each picture's bytes until the parent goes away."""
    os.nice(nice)
    if cores:  # torch is loaded by now (this module imports it): its pin of this process is behind us
        try:
            os.sched_setaffinity(0, cores)
        except OSError:  # a cpuset narrowed since the server started: keep what was inherited
            pass
    torch.set_num_threads(1)  # one core's worth, and none when light work wants it
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):  # the parent closed its end or died: nothing left to serve
            return
        started = time.process_time()
        try:
            x, warning = preprocess.load_checked(io.BytesIO(data))
            answer: tuple = ("ok", x.numpy(), warning, time.process_time() - started)
        except ValueError as e:  # DataError and the like: the picture's fault, said in one line
            answer = ("bad", str(e))
        except Exception as e:  # noqa: BLE001 - a bug: told to the parent, which answers 500
            answer = ("bug", f"{type(e).__name__}: {e}")
        conn.send(answer)
