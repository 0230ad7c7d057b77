"""`anyformer ARGS` as the tests run it: in this process (the parser and the command's own code,
exactly what the console script calls), with stdout, stderr and the exit code captured as a
subprocess would give them, without importing torch a second time (about 2.7 s a call on 2 cores).

What only a separate process proves (the `python -m anyformer` entry point, a kill, a signal,
torchrun) is tested with real subprocesses elsewhere (tests/cli/test_cli.py's entry-point test,
tests/train/test_kill_resume.py, tests/train/test_distributed.py)."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from typing import Iterator, Mapping

import torch

from tests.conftest import REPO, SHARED_DATA


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """The process environment with `extra` set and ANYFORMER_DEBUG unset, restored afterwards,
    as is the working directory (a subprocess would have run in REPO)."""
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.update(extra)
    os.environ.pop("ANYFORMER_DEBUG", None)
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


def run(*args: str, env_extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """`anyformer *args` in this process: a CompletedProcess with the return code, stdout and stderr.
    A bug (an exception the command does not turn into one line) propagates, failing the test with
    its traceback. The speed plan and the thread count are read afresh before and after, since the
    environment (ANYFORMER_PLAN, ANYFORMER_CACHE) and `--threads` may differ from the test's."""
    from anyformer import cli, plan
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    with _environment({"ANYFORMER_DATA": str(SHARED_DATA), **(env_extra or {})}):
        plan.reset()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = cli.main(list(args))
                except SystemExit as e:  # argparse's usage errors, and any command that exits
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            plan.reset()
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["anyformer", *args], code or 0, out.getvalue(), err.getvalue())
