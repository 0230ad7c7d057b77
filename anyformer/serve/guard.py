"""Around every request: its deadline, the server's shutdown, and its line in /metrics.

An ASGI middleware, outside Starlette's routing, so it sees every request however it ends:
- a deadline (`--deadline-seconds`) from the first byte: past it the request's work is cancelled
  at its next step (model calls are short steps, see worker.py) and it is answered 504, or 408
  when the client had not even finished sending its body (a slow sender); the lanes see it too, and
  refuse at once (503) a request they could not finish by then;
- a shutdown (SIGTERM, server.py): requests in flight are cancelled at their next step and
  answered 503 with Retry-After, new ones too, so that no request goes unanswered;
- a stream cut short by either ends as a well-formed chunked body, not a broken connection;
- the route, status, refusal reason and latency of each request go to `Metrics`.
"""
from __future__ import annotations

import json
import time
from typing import Any, Awaitable, Callable

import anyio

from .limits import REASONS
from .metrics import Metrics
from .worker import DEADLINE_AT, ON_FINISH

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
REFUSAL = "anyformer.refusal"   # scope key: the reason an ApiError handler gave, for the metrics
ALWAYS_OPEN = ("/healthz", "/metrics")  # answered while shutting down: operators watch the drain


class Guard:
    """The state the middleware shares with the app: in-flight requests, shutting down or not."""

    def __init__(self, deadline_seconds: float, routes: set[str]) -> None:
        self.deadline_seconds, self.routes = deadline_seconds, routes
        self.metrics = Metrics()
        self.draining = False
        self._in_flight: set[anyio.CancelScope] = set()

    def drain(self) -> None:
        """Stop taking work: every request in flight is cancelled at its next step and answered 503.
        Call on the event loop's thread."""
        self.draining = True
        for scope in list(self._in_flight):
            scope.cancel()

    def route(self, path: str) -> str:
        """The metrics label: a known route, /static, or "other" (so stray paths add no labels)."""
        if path in self.routes:
            return path
        return "/static" if path.startswith("/static/") else "other"


class GuardMiddleware:
    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        guard, started = self.guard, time.perf_counter()
        seen = {"status": None, "ended": False, "body_read": False}

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                seen["ended"] = True
            await send(message)

        async def tracked_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                seen["body_read"] = True
            return message

        refusal = None
        try:
            if guard.draining and scope["path"] not in ALWAYS_OPEN:
                refusal = "shutting_down"
                return await refuse(tracked_send, 503, "the server is shutting down; retry shortly", retry=1)
            scope[DEADLINE_AT] = started + guard.deadline_seconds  # the lanes admit only what can finish by then
            with anyio.CancelScope(deadline=anyio.current_time() + guard.deadline_seconds) as cancel:
                guard._in_flight.add(cancel)
                try:
                    await self.app(scope, tracked_receive, tracked_send)
                finally:
                    guard._in_flight.discard(cancel)
            if cancel.cancelled_caught:
                refusal = "shutting_down" if guard.draining else "deadline" if seen["body_read"] else "slow_body"
                status, words = {
                    "shutting_down": (503, "the server is shutting down; the request's work was stopped; retry shortly"),
                    "deadline": (504, f"the request passed its deadline of {guard.deadline_seconds:g} s "
                                      f"(--deadline-seconds); its work was stopped"),
                    "slow_body": (408, f"the request's body did not arrive within {guard.deadline_seconds:g} s "
                                       f"(--deadline-seconds)")}[refusal]
                if seen["status"] is None:
                    await refuse(tracked_send, status, words, retry=1 if status == 503 else None)
                elif not seen["ended"]:  # a stream cut short: end its chunked body cleanly
                    await tracked_send({"type": "http.response.body", "body": b"", "more_body": False})
            elif seen["status"] is not None and not seen["ended"]:
                refusal = "client_gone"  # a stream whose client left: Starlette stopped it
            elif seen["status"] is not None and seen["status"] >= 400:
                refusal = scope.get(REFUSAL) or REASONS.get(seen["status"], str(seen["status"]))
        except Exception:
            seen["status"], refusal = seen["status"] or 500, "error"  # answered by Starlette's error handler
            raise
        finally:
            for finish in scope.pop(ON_FINISH, []):
                finish()
            guard.metrics.record(guard.route(scope["path"]), seen["status"] or 500,
                                 time.perf_counter() - started, refusal)


async def refuse(send: Send, status: int, message: str, retry: int | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """The house's refusal from a middleware, outside Starlette's handlers: `{"error": message}` as JSON."""
    extra = [*(headers or []), *([(b"retry-after", str(retry).encode())] if retry is not None else [])]
    body = json.dumps({"error": message}).encode()
    await answer(send, status, body, [(b"content-type", b"application/json"), *extra])


async def answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """A whole response sent from a middleware: its status, headers (Content-Length added) and body."""
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
