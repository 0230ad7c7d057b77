"""`anyformer serve`: the app on uvicorn, bound to this machine only unless told otherwise.

On SIGTERM (or Ctrl-C) the server drains: it stops accepting connections, every request in flight
is cancelled at its next step and answered 503 with Retry-After (a stream is ended cleanly), new
requests on open connections get the same, and the process exits 0 once all are answered.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
from types import FrameType
from typing import Callable, Iterator

import uvicorn

from .access import server_token, with_token
from .app import create_app
from .guard import Guard
from .limits import Limits

log = logging.getLogger("anyformer.serve")
SHUTDOWN_GRACE_SECONDS = 10  # after a drain's cancellations every request ends within a step or two
# How long an idle connection is kept open. uvicorn's 5 s is httpx's pool expiry too, and a client that came
# back after about that long (as Retry-After asked: 5 s) sent its request on the connection the server was
# closing and got no answer: 3 of 240 requests of clients waiting 4.99-5.01 s, none at 3 s (docs/results.md).
# nginx's 75 s, and at least twice the deadline: a client told to retry within that finds its connection open.
KEEP_ALIVE_SECONDS = 75


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on a signal first drains the app's guard (anyformer/serve/guard.py)."""

    def __init__(self, config: uvicorn.Config, guard: Guard,
                 on_ready: Callable[[int], None] | None = None) -> None:
        super().__init__(config)
        self.guard = guard
        self.on_ready = on_ready
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Listening now: a connection made from here on is accepted (the loop runs it next turn).
        if self.started and not self.should_exit and self.on_ready is not None:
            self.on_ready(self.servers[0].sockets[0].getsockname()[1])

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of whatever the loop was doing: cancel the
        # requests' scopes from the loop itself, at its next turn.
        if self.loop is not None and not self.guard.draining:
            log.info("signal %s: draining the requests in flight", signal.Signals(sig).name)
            self.loop.call_soon_threadsafe(self.guard.drain)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own re-raises the signal once shut down, so a SIGTERM'd server would die of it
        # (exit 143) after draining; a drained server has done what SIGTERM asks and exits 0.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def serve(run_dir: str, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
          token: str | None = None) -> None:
    """Serve the run in `run_dir` until SIGTERM or Ctrl-C. `serving RUN at URL` is printed once the
    model is loaded and warmed up and the socket listens, so a client that waits for the line is
    answered; port 0 picks a free port, which the line names. Bound beyond this machine, or with a
    `token`, every route but /healthz asks for the token, and the URL carries it (access.py)."""
    token = server_token(host, token)  # before the model loads: a bad token fails at once
    app = create_app(run_dir, limits, token=token)

    def announce(bound_port: int) -> None:
        url = f"http://{host if ':' not in host else f'[{host}]'}:{bound_port}/"
        print(f"serving {run_dir} at {with_token(url, token)}", flush=True)

    # The loaded, warmed-up process's objects (torch, the model, the app: hundreds of thousands) out of the cyclic
    # collector's reach: each full collection walked them all, stopping every thread for 70-80 ms, twice in a soak's
    # minute and a half, the light requests in flight with it (measured: docs/results.md). What is frozen stays (the
    # collection first drops what is already garbage).
    gc.collect()
    gc.freeze()
    deadline = (limits or Limits()).deadline_seconds
    config = uvicorn.Config(app, host=host, port=port, log_level="info",
                            timeout_keep_alive=max(KEEP_ALIVE_SECONDS, 2 * deadline),
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS)
    DrainingServer(config, app.state.guard, on_ready=announce).run()
