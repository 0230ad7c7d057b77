"""The ASGI app for one run: the page at /, its scripts under /static, /api/info, /healthz,
/metrics, and the section's API (/api/predict, /api/generate or /api/sample), every request inside
the guard (guard.py: deadline, shutdown, metrics) and, where a token is asked for, the gate (access.py)."""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import AsyncIterator

import torch
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..runs import open_run
from .context import Context
from .access import TokenGate
from .guard import REFUSAL, Guard, GuardMiddleware
from .limits import HEAVY_SHARE, ApiError, Limits
from .sections import section_for
from .worker import ClientGone, ModelWorker, turns_at_blocks

STATIC = Path(str(resources.files(__package__) / "static"))
# Scripts only from this server, pictures also as data URLs (the heat maps); nothing else runs.
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
                                               "style-src 'self' 'unsafe-inline'; object-src 'none'",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
log = logging.getLogger("anyformer.serve")


def create_app(run_dir: str, limits: Limits | None = None, token: str | None = None) -> Starlette:
    """The app for the run in `run_dir` (loaded now, so a bad run fails before the server starts);
    with a `token`, every route but /healthz asks for it (access.py)."""
    limits = limits or Limits()
    run = open_run(run_dir, prepared=True)  # the server's passes on the plan's choices for one request
    model, meta = run.model, run.meta
    section = section_for(model.family)
    if limits.heavy_share is None:  # the section's own share: how far its heavy requests may stretch
        limits = dataclasses.replace(limits, heavy_share=getattr(section, "HEAVY_SHARE", HEAVY_SHARE))
    ctx = Context(run_dir=str(run_dir), model=model, meta=meta, limits=limits,
                  worker=ModelWorker(limits.concurrency, limits.queue, heavy_share=limits.heavy_share))
    # Warm-up before the server exists: the speed plan measures (and any compile happens) now, no
    # request waits for it, and the section times its unit of work for the cost budget.
    started = time.perf_counter()
    turns_at_blocks(model)  # heavy calls take turns between the blocks too; before any compile, which traces the hooks
    section.warm_up(ctx)
    health = {"ready": True, "family": model.family, "warm_up_seconds": round(time.perf_counter() - started, 3)}
    run_info = {"run": Path(run_dir).resolve().name, "family": model.family, **section.info(ctx),
                "limits": dataclasses.asdict(limits), "measured_seconds": {k: round(v, 6) for k, v in ctx.costs.items()},
                "threads": torch.get_num_threads()}  # each model call's (`serve --threads`); the figures' too
    page = _page(run_info, section.FRAGMENT, section.__name__.rsplit(".", 1)[-1])

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    async def api_info(request: Request) -> JSONResponse:
        return JSONResponse(run_info)

    async def healthz(request: Request) -> JSONResponse:
        if guard.draining:
            return JSONResponse({**health, "ready": False, "shutting_down": True}, status_code=503)
        return JSONResponse(health)

    async def metrics(request: Request) -> PlainTextResponse:
        return PlainTextResponse(guard.metrics.render(ctx.worker.depth(), ready=not guard.draining),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        request.scope[REFUSAL] = exc.reason
        return exc.response()

    async def client_gone(request: Request, exc: Exception) -> Response:
        # Nobody reads this answer; its status tells the log and /metrics the work was stopped.
        return Response(status_code=499)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Routing's own refusals (404 no such route, 405 wrong method) answer as every refusal does.
        assert isinstance(exc, HTTPException)
        allowed = (exc.headers or {}).get("Allow")
        what = {404: f"no such route: {request.url.path}; the API is under /api (GET /api/info lists it)",
                405: f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}"}
        return JSONResponse({"error": what.get(exc.status_code, exc.detail)}, status_code=exc.status_code,
                            headers=exc.headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        # A bug, not the user's fault: logged with its traceback, answered with one line, and the
        # server goes on serving the next request.
        log.exception("error serving %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

    routes = [Route("/", index), Route("/api/info", api_info), Route("/healthz", healthz), Route("/metrics", metrics),
              *section.routes(ctx), Mount("/static", StaticFiles(directory=STATIC), name="static")]
    guard = Guard(limits.deadline_seconds, {r.path for r in routes if isinstance(r, Route)})
    # The gate inside the guard: a refused request still gets its line in /metrics.
    middleware = [Middleware(GuardMiddleware, guard=guard), Middleware(TokenGate, token=token)]
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The section's helpers (a decoding process) start with the server, not inside a first request;
        # where no server runs the lifespan (a test's client), they start on first use.
        for helper in ctx.background:
            helper.start()
        try:
            yield
        finally:
            for helper in ctx.background:
                helper.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={ApiError: api_error, ClientGone: client_gone, HTTPException: http_error,
                                        Exception: server_error})
    app.state.context, app.state.guard = ctx, guard
    return app


def _page(run_info: dict, fragment: str, script: str) -> str:
    # The run's facts ride in a JSON block that is data, not code; "<" is escaped so no text in
    # them (a class name, a run name) can close the block.
    info_json = json.dumps(run_info).replace("<", "\\u003c")
    return ((STATIC / "index.html").read_text()
            .replace("<!--TITLE-->", f"anyformer · {_html(run_info['run'])}")
            .replace("<!--INFO-->", info_json)
            .replace("<!--SECTION-->", (STATIC / fragment).read_text())
            .replace("<!--SCRIPT-->", f'<script src="/static/{script}.js"></script>'))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
