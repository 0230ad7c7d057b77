"""What one request may ask of the server, and the one error type every route answers with.

Every limit is a number a user can change (`anyformer serve --help`); the defaults keep one
request from taking the machine: a body of 5 MB holds any reasonable photo, 40 megapixels any
phone camera's picture, while a decompression bomb (a tiny PNG that inflates to gigapixels) is
refused from its header before a single pixel is decoded.
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
    concurrency: int = 2                    # model calls running at once; the rest wait their turn

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"serve limit {f.name} must be a positive int, got {value!r}")


class ApiError(Exception):
    """A request the server will not serve: answered as {"error": message} with a 4xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status)


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
