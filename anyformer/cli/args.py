"""What every command's parser shares: one-line errors, KEY=VALUE and duration arguments."""
from __future__ import annotations

import argparse
import json
import re
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, like every other user error; the usage is in --help
        self.exit(2, f"anyformer: error: {message} (see `{self.prog} --help`)\n")


def key_value(text: str) -> tuple[str, Any]:
    """'depth=4' -> ('depth', 4): the value is read as JSON where it is JSON, else kept as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def duration(text: str) -> float:
    """'540' or '540s', '9m', '1h30m', '2h' -> seconds; 'none' (or 0) -> 0: no budget."""
    if text.strip().lower() in ("none", "off", "0"):
        return 0.0
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not m or not any(m.groups()) or not (seconds := 3600 * float(m[1] or 0) + 60 * float(m[2] or 0)
                                            + float(m[3] or 0)) > 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration such as 540, 90s, 9m or 1h30m "
                                         f"(or none), got {text!r}")
    return seconds


def image_size(text: str) -> int | list[int]:
    """'64' -> 64 (64 x 64); '48x64' or '48,64' -> [48, 64] (height, width)."""
    parts = re.split(r"[x,]", text.strip().lower())
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) not in (1, 2) or min(sizes, default=0) < 1:
        raise argparse.ArgumentTypeError(f"expected a size N or HxW such as 64 or 48x64, got {text!r}")
    return sizes[0] if len(sizes) == 1 else sizes


def one_line(e: BaseException) -> str:
    """An exception as the one line a user sees."""
    if isinstance(e, FileNotFoundError) and e.filename and not e.args[1:]:
        return f"no such file: {e.filename}"
    text = str(e) if str(e) else type(e).__name__
    return " ".join(text.split())
