"""Files answered one line each by a classifier (`anyformer predict` on images or series): the top
classes, best first; a file that cannot be read named on stderr while the rest go on."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .args import one_line


def answer_each(paths: list[str], classes: list[str], top: int,
                probabilities: Callable[[str], tuple[Any, str | None]]) -> int:
    """One line a file, its `top` classes best first (`probabilities(path)`: the model's, and a warning or
    None); a file that cannot be read is named on stderr and the rest go on. The exit status: 2 where any
    could not be read."""
    unread = 0
    for path in paths:
        try:
            probs, warning = probabilities(path)
        except (ValueError, OSError) as e:
            msg = one_line(e)  # the data errors may name the file already
            print(f"anyformer: error: {msg if msg.startswith(path) else f'{path}: {msg}'}", file=sys.stderr)
            unread += 1
            continue
        best = probs.topk(min(top, probs.numel()))
        shown = ", ".join(f"{classes[i]} {p:.3f}" for p, i in zip(best.values.tolist(), best.indices.tolist()))
        print(f"{path}: {shown}")
        if warning:  # beside the answer, on stderr, so that stdout stays one line per file
            print(f"anyformer: warning: {path}: {warning}", file=sys.stderr)
    if unread and len(paths) > 1:
        print(f"anyformer: {unread} of {len(paths)} files could not be read", file=sys.stderr)
    return 2 if unread else 0
