"""Model work off the event loop, a bounded number of calls at a time.

A forward pass blocks for milliseconds to seconds; run on the event loop it would stall every
other connection. Each call goes to a worker thread (torch releases the GIL inside its kernels,
so threads do run in parallel), and a capacity limiter lets at most `concurrency` of them run at
once, the rest queueing in arrival order. Generation takes the limiter one token at a time, not
for the whole text, so a long generation and a burst of predictions interleave instead of one
waiting for the other to finish.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")
_DONE = object()


class ModelWorker:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._limiter: anyio.CapacityLimiter | None = None  # made inside the event loop that uses it

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        return self._limiter

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def iterate(self, items: Iterator[T]):
        """An async iterator over a blocking one, each `next` a separate bounded call. Closing it
        (a client that went away) closes `items` too, so a generation stops at the next token."""
        try:
            while (item := await self.call(next, items, _DONE)) is not _DONE:
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
