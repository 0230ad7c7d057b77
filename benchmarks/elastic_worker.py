"""`anyformer ARGS` as a torchrun worker, with one checkpoint's write slowed so that a kill can land
inside it (benchmarks/elastic_restart.py, tests/train/test_elastic.py).

ANYFORMER_SLOW_WRITE=STEP:SECONDS:FLAG: the checkpoint of step STEP is written half, flushed to
disk, FLAG is created, the writer sleeps SECONDS, then writes the rest. Once only: where FLAG
exists (a later start of the workers, after a kill), the checkpoint is written as anyformer writes
it. Nothing else changes: what the run computes is anyformer's, bit for bit.
"""
from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable


def slowed(write_temp: Callable[..., str], step: int, seconds: float, flag: Path) -> Callable[..., str]:
    def write(path: Any, writer: Callable[[IO[bytes]], Any]) -> str:
        if Path(path).name != f"step-{step:09d}.pt" or flag.exists():
            return write_temp(path, writer)

        def halves(f: IO[bytes]) -> None:
            buf = io.BytesIO()
            writer(buf)
            data = buf.getvalue()
            f.write(data[:len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            flag.write_text(str(os.getpid()))
            time.sleep(seconds)
            f.write(data[len(data) // 2:])
        return write_temp(path, halves)
    return write


def main() -> int:
    spec = os.environ.get("ANYFORMER_SLOW_WRITE")
    if spec:
        from anyformer.train import checkpoint
        step, seconds, flag = spec.split(":", 2)
        checkpoint.write_temp = slowed(checkpoint.write_temp, int(step), float(seconds), Path(flag))
    from anyformer.cli import main as anyformer
    return anyformer(sys.argv[1:])


if __name__ == "__main__":
    from anyformer.cli import exit_process
    exit_process(main())
