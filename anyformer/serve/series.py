"""The series classifier section: POST /api/predict with a CSV -> the top classes and the attention
over time.

The CSV is read as `anyformer predict` reads a file (one column per channel, one row per time step, a
header line skipped; a univariate series may be one row), sent as the raw body (Content-Type text/csv,
text/plain or application/octet-stream: `curl --data-binary @one.csv`) or as one file in a multipart
form (`curl -F file=@one.csv`). A series longer than the model's length is resampled down to it, with
a warning, as `predict` does. One forward pass gives the probabilities and the rollout.
"""
from __future__ import annotations

from typing import Any

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..data.errors import DataError
from ..data.series.dataset import SeriesPreprocess, fit_to_model
from ..data.series.one_series import orient_series, parse_series_csv
from .context import Context
from .limits import ApiError
from .uploads import upload_bytes

FAMILY = "series"
FRAGMENT = "series.html"
TOP = 3
HEAVY_BYTES = 256 * 1024  # a CSV longer than this is parsed in the heavy lane: parsing outweighs the pass


def info(ctx: Context) -> dict[str, Any]:
    c = ctx.model.config
    _preprocess(ctx)
    return {"task": "classify-series", "classes": ctx.data.get("classes"), "channels": c.channels, "length": c.length}


def warm_up(ctx: Context) -> None:
    """One request's computation on a flat series, so the speed plan decides its kernels now."""
    from ..viz.series_attention import series_attention
    c = ctx.model.config
    series_attention(ctx.model, torch.zeros(1, c.channels, c.length))


def read_upload(data: bytes, model: Any, pre: SeriesPreprocess) -> tuple[torch.Tensor, torch.Tensor, str | None]:
    """(raw (1, C, T), standardised (1, C, T), warning) from CSV bytes; 400 naming what is wrong."""
    c = model.config
    try:
        raw = torch.from_numpy(orient_series(parse_series_csv(data, "the upload"), c.channels, "the upload"))[None]
    except DataError as e:
        raise ApiError(400, " ".join(str(e).split())) from None
    return fit_to_model(raw, c.length, pre)


def routes(ctx: Context) -> list[Route]:
    pre = _preprocess(ctx)
    classes = ctx.data.get("classes") or [str(i) for i in range(ctx.model.config.num_classes)]

    def predict_bytes(data: bytes) -> dict[str, Any]:
        from ..viz.series_attention import series_attention
        raw, x, warning = read_upload(data, ctx.model, pre)
        probs, steps = series_attention(ctx.model, x, torch.tensor([x.shape[-1]]))
        p = probs[0]
        order = p.argsort(descending=True)[:TOP].tolist()
        top = [{"class": str(classes[i]), "index": int(i), "probability": round(float(p[i]), 6)} for i in order]
        # The series as the model read it (after any resampling), so the page draws the weights on it.
        return {"top": top, "warning": warning, "series": raw[0].round(decimals=6).tolist(),
                "attention": {"steps": steps[0].round(6).tolist()}}

    async def predict(request: Request) -> JSONResponse:
        data = await upload_bytes(request, ctx.limits.max_body_bytes,
                                  ("text/csv", "text/plain", "application/octet-stream"), "series (CSV)",
                                  "curl -F file=@one.csv")
        if not data.strip():
            raise ApiError(400, "the request holds no series: send a CSV, one column per channel, one row per step")
        lane = "heavy" if len(data) > HEAVY_BYTES else "light"
        return JSONResponse(await ctx.worker.run(request, lane, predict_bytes, data))

    return [Route("/api/predict", predict, methods=["POST"])]


def _preprocess(ctx: Context) -> SeriesPreprocess:
    if ctx.data.get("kind") != "series":
        raise ValueError(f"{ctx.run_dir} holds a series model but its data kind is {ctx.data.get('kind')!r}; "
                         f"the series page needs a run trained by `anyformer train series`")
    return SeriesPreprocess.from_info(ctx.data)
