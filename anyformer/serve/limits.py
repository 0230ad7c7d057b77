"""What one request may ask of the server, and the one error type every route answers with.

Every limit is a number a user can change (`anyformer serve --help`); the defaults keep one
request from taking the machine: a body of 5 MB holds any reasonable photo, 40 megapixels any
phone camera's picture, while a decompression bomb (a tiny PNG that inflates to gigapixels) is
refused from its header before a single pixel is decoded. Cost is bounded as well as size: a
request's compute (samples x steps, new tokens), estimated from the model's own step time measured
at start-up, must fit `max_work_seconds`; waiting is bounded by `queue` and `deadline_seconds`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


@dataclasses.dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 5 * 1024 * 1024   # any request body
    max_pixels: int = 40_000_000            # width x height of an uploaded image, read from its header
    max_prompt_chars: int = 4000            # a prompt, before tokenising
    max_new_tokens: int = 1000              # tokens one generation may ask for (the context may allow fewer)
    concurrency: int = 2                    # light model calls running at once (heavy work has its own lane)
    queue: int = 16                         # requests waiting per lane; past it, 503 with Retry-After
    max_work_seconds: float = 5.0           # a request's estimated compute (steps x measured step time)
    deadline_seconds: float = 30.0          # from the request's first byte to its last: then 504 (or 408)
    # The heavy lane's most share of a core while light requests are in the server (worker.py); None: the
    # section's own (its module's HEAVY_SHARE, else HEAVY_SHARE here), set by how long a heavy request may
    # stretch: a picture's decoding takes tens of milliseconds, a long generation seconds.
    heavy_share: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "heavy_share" and value is None:
                continue
            kinds = (int, float) if f.type.startswith("float") else (int,)
            if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
                kind = "number" if f.type.startswith("float") else "int"
                raise ValueError(f"serve limit {f.name} must be a positive {kind}, got {value!r}")
        if self.heavy_share is not None and self.heavy_share > 1:
            raise ValueError(f"serve limit heavy_share is a share of the time, in (0, 1], got {self.heavy_share!r}")


# A quarter: in soaks (benchmarks/soak_serve.py) with four heavy clients, of a language model and of the image
# generator, a half held the light requests' p99 past 1.5x idle in five of six, a quarter within it in all six, at
# half to two thirds as many heavy requests answered while light ones keep coming. A half was chosen when
# a smaller share stretched long generations towards their deadline; now a request the lane would not finish in time is
# refused at once (Lane.admit), and in those soaks none ran past it (measured: docs/results.md, 'Measurements behind
# the code's choices').
HEAVY_SHARE = 0.25


class ApiError(Exception):
    """A request the server will not serve: answered as {"error": message} with a 4xx status."""

    def __init__(self, status: int, message: str, reason: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers
        # The label /metrics counts this refusal under (anyformer_refusals_total{reason=...}).
        self.reason = reason or REASONS.get(status, str(status))

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status, headers=self.headers)


REASONS = {400: "malformed", 401: "unauthorized", 404: "no_route", 405: "method", 408: "slow_body", 413: "too_large",
           415: "media_type", 422: "invalid", 499: "client_gone", 503: "busy", 504: "deadline"}


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower case ('' when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes `limit` bytes: a client that lies in
    Content-Length or sends none is cut off while streaming, not after it has filled memory."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body is {int(declared)} bytes; the limit is {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def field(values: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any,
          low: float | None = None, high: float | None = None) -> Any:
    """One JSON field checked for type and range; a bad one is a 422 naming what was expected."""
    value = values.get(name, default)
    if value is None and default is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ApiError(422, f"{name} must be {names}, got {type(value).__name__} {value!r}")
    if low is not None and value < low or high is not None and value > high:
        raise ApiError(422, f"{name} must be in [{low}, {high}], got {value!r}")
    return value
