"""Run named mutants again against chosen test files, in one process: for each name, mutmut's own
switch (`MUTANT_UNDER_TEST`, which its trampolines read at every call) selects the mutant and pytest
runs the files with `-x`. A mutant is killed when a test fails, survives when all pass; one that runs
past `--timeout` seconds is a timeout. mutmut re-runs a whole function's tests for each mutant and
takes minutes for a trainer's; this answers "does this new test file kill these mutants" in seconds.

    cd mutants && python ../scripts/mutation_recheck.py tests/train/test_x.py < names.txt > results.txt

Run it in mutmut's mutants/ folder (with the test files copied in), after `mutmut run` has made it.
Prints "<status> <name>" per line, and the counts on stderr. A mutant that is killed here is killed:
the test that fails is in the suite."""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import signal
import sys


class _TooLong(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _TooLong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="test files (paths in mutants/)")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: only the tests that reach these mutants")
    parser.add_argument("-m", dest="marks", default="not slow",
                        help="pytest's -m; mutmut's own runs use the default, the fast tests")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per mutant")
    args = parser.parse_args()
    if not os.path.isdir("anyformer") or not os.path.isfile("mutmut-stats.json"):
        sys.exit("run this in mutmut's mutants/ folder (after `mutmut run`), with the test files copied in")
    sys.path.insert(0, os.getcwd())
    import pytest

    counts: collections.Counter[str] = collections.Counter()
    signal.signal(signal.SIGALRM, _alarm)
    names = [line.strip() for line in sys.stdin if line.strip()]
    select = ["-m", args.marks] + (["-k", args.keyword] if args.keyword else [])
    verdicts = {pytest.ExitCode.OK: "survived", pytest.ExitCode.TESTS_FAILED: "killed"}
    for name in ["", *names]:  # first no mutant: the files must pass on the real code
        os.environ["MUTANT_UNDER_TEST"] = name
        signal.alarm(args.timeout)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = pytest.main(["-q", "-x", "-p", "no:cacheprovider", *select, *args.tests])
            status = verdicts.get(code, f"error({int(code)})")
        except _TooLong:
            status = "timeout"
        finally:
            signal.alarm(0)
        if not name:
            if status != "survived":
                sys.exit(f"the test files do not pass without a mutant ({status}): fix them first")
            continue
        counts[status] += 1
        print(status, name, flush=True)
    print(dict(counts), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
