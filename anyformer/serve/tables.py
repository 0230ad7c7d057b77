"""The table section: POST /api/predict with rows -> one prediction a row.

Rows come as JSON, `{"rows": [{"column": value, ...}, ...]}` (or one `{"row": {...}}`), values as
numbers, words or null, or as a CSV with a header line (Content-Type text/csv, or one file of a
multipart form: `curl -F file=@rows.csv`). Columns are matched by name, cells read as the training
rows' were; a missing column is a 400 that names it, an unseen category reads as unknown (and says so).
"""
from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..data.errors import DataError, DataWarning
from ..data.tables.encode import TableEncoding
from ..data.tables.read import read_table_bytes, text_frame
from ..runs import predict_rows
from .context import Context
from .limits import ApiError, media_type, read_body
from .uploads import upload_bytes

FAMILY = "table"
FRAGMENT = "tables.html"
MAX_ROWS = 10_000          # one request's rows; more belong to `anyformer predict`
HEAVY_ROWS = 256           # more rows than this run in the heavy lane


def info(ctx: Context) -> dict[str, Any]:
    e = _encoding(ctx)
    return {"task": f"{e.target.task}-table", "target": e.target.name, "classes": list(e.target.classes) or None,
            "columns": [{"name": c.name, "kind": c.kind, "values": list(c.values)[:50]} for c in e.used]}


def warm_up(ctx: Context) -> None:
    """One row of missing cells through the model, so the speed plan decides its kernels now."""
    e = _encoding(ctx)
    predict_rows(ctx.model, e, pd.DataFrame({c.name: [""] for c in e.used}, dtype=object), "the warm-up row")


def _rows_of(body: dict | list | Any) -> pd.DataFrame:
    rows = body.get("rows", [body["row"]] if "row" in body else None) if isinstance(body, dict) else body
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ApiError(400, 'expected JSON {"rows": [{"column": value, ...}, ...]} or {"row": {...}} with at least '
                            'one row')
    if len(rows) > MAX_ROWS:
        raise ApiError(413, f"{len(rows):,} rows in one request; the limit is {MAX_ROWS:,} (anyformer predict RUN "
                            f"rows.csv takes any number)")
    bad = next(((k, v) for r in rows for k, v in r.items() if v is not None and not isinstance(v, (str, int, float))),
               None)
    if bad is not None:
        raise ApiError(400, f"column {bad[0]!r}: {type(bad[1]).__name__} value; expected a number, a word or null")
    return text_frame(pd.DataFrame(rows, dtype=object), "the request")


def routes(ctx: Context) -> list[Route]:
    encoding = _encoding(ctx)

    def predict_frame(frame: pd.DataFrame) -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", DataWarning)
            try:
                out = predict_rows(ctx.model, encoding, frame, "the request")
            except DataError as e:
                raise ApiError(400, " ".join(str(e).split())) from None
        name = encoding.target.name
        if encoding.target.task == "regress":
            answers = [{"value": float(v)} for v in out[name]]
        else:
            classes = list(encoding.target.classes)
            answers = [{"class": str(row[name]), "probability": round(float(row["probability"]), 6),
                        "probabilities": {c: round(float(row[f"p({c})"]), 6) for c in classes}}
                       for _, row in out.iterrows()]
        warning = "; ".join(str(w.message) for w in said if issubclass(w.category, DataWarning)) or None
        return {"target": name, "predictions": answers, "warning": warning}

    async def predict(request: Request) -> JSONResponse:
        if media_type(request) == "application/json":
            import json
            try:
                body = json.loads(await read_body(request, ctx.limits.max_body_bytes))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ApiError(400, f"the body is not JSON ({e})") from None
            frame = _rows_of(body)
        else:
            data = await upload_bytes(request, ctx.limits.max_body_bytes, ("text/csv", "text/plain"),
                                      "table (CSV with a header line)", "curl -F file=@rows.csv")
            try:
                frame = read_table_bytes(data, "the upload")
            except DataError as e:
                raise ApiError(400, " ".join(str(e).split())) from None
            if len(frame) > MAX_ROWS:
                raise ApiError(413, f"{len(frame):,} rows in one request; the limit is {MAX_ROWS:,}")
        lane = "heavy" if len(frame) > HEAVY_ROWS else "light"
        return JSONResponse(await ctx.worker.run(request, lane, predict_frame, frame))

    return [Route("/api/predict", predict, methods=["POST"])]


def _encoding(ctx: Context) -> TableEncoding:
    if ctx.data.get("kind") != "table":
        raise ValueError(f"{ctx.run_dir} holds a table model but its data kind is {ctx.data.get('kind')!r}; the "
                         f"table page needs a run trained by `anyformer train --data table.csv`")
    return TableEncoding.from_dict(ctx.data["encoding"])
