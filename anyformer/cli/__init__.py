"""The `anyformer` command: one module per command, each holding its parsing and printing only;
the work is the library's. User errors end with one line on stderr and exit code 2.

Set ANYFORMER_DEBUG=1 to see the full traceback instead.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .. import doctor, runtime
from . import attention, evaluate, export, generate, predict, probe, sample, serve, train
from .args import Parser, one_line

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand's parser sets `handler`, the function that runs it."""
    p = Parser(prog="anyformer", description="Train, evaluate and inspect transformers.")
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    runtime.configure(threads=getattr(args, "threads", None))  # before torch is imported
    try:
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
        print(f"anyformer: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
