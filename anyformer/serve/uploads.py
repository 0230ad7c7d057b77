"""One uploaded file from a request: the raw body, or the one file of a multipart form (`curl -F`).
Shared by the sections that take a file (an image, a series as CSV)."""
from __future__ import annotations

from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from .limits import ApiError, media_type, read_body


async def upload_bytes(request: Request, limit: int, raw_types: tuple[str, ...], noun: str, example: str) -> bytes:
    """The body when its Content-Type starts with one of `raw_types`, else the multipart form's one
    file; `noun` ("image") and `example` (a curl line) word the refusals."""
    what = f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
    kind = media_type(request)
    if kind.startswith(raw_types):
        return await read_body(request, limit)
    if kind == "multipart/form-data":
        body = await read_body(request, limit)

        async def once():
            yield body
        try:
            form = await MultiPartParser(request.headers, once(), max_files=1, max_fields=8,
                                         max_part_size=limit).parse()
        except MultiPartException as e:
            if "Too many files" in str(e):
                raise ApiError(413, f"the multipart form holds more than one file; the limit is one {noun} "
                                    "per upload") from None
            raise ApiError(400, f"cannot read the multipart form: {e}") from None
        files = [v for _, v in form.multi_items() if not isinstance(v, str)]
        if not files:
            raise ApiError(400, f"the multipart form holds no file; send {what} as a file field, e.g. {example}")
        return await files[0].read()
    accepted = ", ".join(t + ("*" if t.endswith("/") else "") for t in raw_types)
    raise ApiError(415, f"expected {what} (Content-Type {accepted} or multipart/form-data), "
                        f"got {kind or 'no Content-Type'}")
