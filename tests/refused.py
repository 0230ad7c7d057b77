"""`refused(exc, message, call)`: the refusal word for word."""
from __future__ import annotations

from typing import Any, Callable

import pytest


def refused(exc: type[Exception], message: str, call: Callable[[], Any]) -> None:
    """`call()` raises `exc` with exactly `message` (pytest's `match` searches, so it would also take a
    message with text around it, as a mutant's "XX...XX" does)."""
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message
