"""The image generator section: POST /api/sample -> samples of one class from a "dit" run.

Written against the generator interface `model.sample(labels: LongTensor, *, steps=50, cfg=1.0,
seed=None) -> uint8 (N, C, H, W)`. No generator run exists on this branch, so this section is
untested here; it is the example of what a section is: FAMILY, FRAGMENT, info(), routes().
JSON in: {class: index or name, n, steps, cfg, seed}; out: {class, images: [PNG data URLs]}.
"""
from __future__ import annotations

import json
from typing import Any

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .context import Context
from .images import png_data_url
from .limits import ApiError, field, media_type, read_body

FAMILY = "dit"
FRAGMENT = "sample.html"
MAX_SAMPLES, MAX_STEPS, MAX_CFG = 16, 1000, 20.0


def info(ctx: Context) -> dict[str, Any]:
    return {"task": "sample", "classes": _classes(ctx), "max_samples": MAX_SAMPLES, "max_steps": MAX_STEPS}


def warm_up(ctx: Context) -> None:
    """One image in one step: the sampler's kernels are planned now, not inside the first request."""
    ctx.model.sample(torch.zeros(1, dtype=torch.long), steps=1, cfg=1.0, seed=0)


def routes(ctx: Context) -> list[Route]:
    classes = _classes(ctx)

    def run(label: int, n: int, steps: int, cfg: float, seed: int | None) -> list[str]:
        images = ctx.model.sample(torch.full((n,), label, dtype=torch.long), steps=steps, cfg=cfg, seed=seed)
        out = images.permute(0, 2, 3, 1).cpu().numpy()
        return [png_data_url(im[..., 0] if im.shape[-1] == 1 else im) for im in out]

    async def sample(request: Request) -> JSONResponse:
        if media_type(request) != "application/json":
            raise ApiError(415, f"expected Content-Type application/json, got {media_type(request) or 'none'}")
        try:
            values = json.loads(await read_body(request, ctx.limits.max_body_bytes))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the body is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise ApiError(400, f"expected a JSON object {{\"class\": ...}}, got {type(values).__name__}")
        wanted = values.get("class", 0)
        label = classes.index(wanted) if isinstance(wanted, str) and wanted in classes else wanted
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(classes):
            raise ApiError(422, f"class must be an index in [0, {len(classes)}) or one of {classes}, got {wanted!r}")
        n = field(values, "n", int, 4, 1, MAX_SAMPLES)
        steps = field(values, "steps", int, 50, 1, MAX_STEPS)
        cfg = float(field(values, "cfg", (int, float), 1.0, 0, MAX_CFG))
        seed = field(values, "seed", int, None, 0, 2**63 - 1)
        images = await ctx.worker.call(run, label, n, steps, cfg, seed)
        return JSONResponse({"class": classes[label], "images": images})

    return [Route("/api/sample", sample, methods=["POST"])]


def _classes(ctx: Context) -> list[str]:
    classes = ctx.data.get("classes")
    if classes:
        return [str(c) for c in classes]
    return [str(i) for i in range(int(getattr(ctx.model.config, "num_classes", 0)))]
