"""The image generator section: POST /api/sample -> samples of one class from a "dit" run.

Written against the generator interface `model.sample(labels: LongTensor, *, steps=50, cfg=1.0,
seed=None) -> uint8 (N, C, H, W)` (the "dit" runs of the mnist-gen recipe).
JSON in: {class: index or name, n, steps, cfg, seed}; out: {class, images: [PNG data URLs]}.
Sampling runs one ODE step per call (`flow.sample_steps`), so a request stopped by its deadline,
its client leaving or the server shutting down stops at the next step.
"""
from __future__ import annotations

import json
import statistics
import time
from typing import Any, Iterator

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..models import flow
from .context import Context
from .images import png_data_url
from .limits import ApiError, field, media_type, read_body

FAMILY = "dit"
FRAGMENT = "sample.html"
MAX_SAMPLES, MAX_STEPS, MAX_CFG = 16, 1000, 20.0
BATCH, TIMED_RUNS = 32, 5  # a pass is timed at one image and at BATCH, each the median of TIMED_RUNS


def info(ctx: Context) -> dict[str, Any]:
    return {"task": "sample", "classes": _classes(ctx), "max_samples": MAX_SAMPLES, "max_steps": MAX_STEPS}


def warm_up(ctx: Context) -> None:
    """The sampler's kernels planned now for every batch a request may run (n images, 2n with
    guidance), not inside the first request of a size; then one pass timed for one image and for a
    batch of BATCH, for the budget: a pass costs about a + b x images."""
    for n in range(1, 2 * MAX_SAMPLES + 1):
        ctx.model.sample(torch.zeros(n, dtype=torch.long), steps=1, cfg=1.0, seed=0, method="euler")
    times = {}
    for n in (1, BATCH):
        ctx.model.sample(torch.zeros(n, dtype=torch.long), steps=1, cfg=1.0, seed=0, method="euler")
        runs = []
        for _ in range(TIMED_RUNS):
            started = time.perf_counter()
            ctx.model.sample(torch.zeros(n, dtype=torch.long), steps=1, cfg=1.0, seed=0, method="euler")
            runs.append(time.perf_counter() - started)
        times[n] = statistics.median(runs)  # a busy machine's odd slow run does not set the budget
    per_image = max(0.0, (times[BATCH] - times[1]) / (BATCH - 1))
    ctx.costs["pass"], ctx.costs["pass_image"] = max(0.0, times[1] - per_image), per_image


def work_seconds(ctx: Context, n: int, steps: int, cfg: float) -> float:
    """Estimated compute of n samples in `steps` Heun steps: 2 passes a step (the last 1), of 2n
    images with guidance (cfg != 1), else n."""
    images = n * (1 if cfg == 1 else 2)
    return (2 * steps - 1) * (ctx.costs["pass"] + ctx.costs["pass_image"] * images)


def routes(ctx: Context) -> list[Route]:
    classes = _classes(ctx)

    def encode(images: torch.Tensor) -> list[str]:
        out = images.permute(0, 2, 3, 1).cpu().numpy()
        return [png_data_url(im[..., 0] if im.shape[-1] == 1 else im) for im in out]

    def steps_then_encoded(steps: Iterator[torch.Tensor]) -> Iterator[list[str] | None]:
        """The sampler's steps, then its images encoded: the request's whole work in one place of its lane
        (worker.Lane.place). Encoded in a call of its own, they waited behind every request queued after."""
        images = None
        for images in steps:
            yield None
        yield encode(images)

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
        per_step = 2 * work_seconds(ctx, n, 1, cfg)  # a Heun step is two passes (the last one)
        cost = work_seconds(ctx, n, steps, cfg)
        lane = ctx.check_cost(cost, f"{n} samples x {steps} steps x "
                              f"{'2 passes (guidance)' if cfg != 1 else '1 pass'} x 2 (Heun), measured at start",
                              f"ask for at most {max(1, int(ctx.limits.max_work_seconds / per_step))} steps "
                              f"of {n} samples, or fewer samples")
        labels = torch.full((n,), label, dtype=torch.long)
        *_, encoded = await ctx.worker.collect(request, lane, steps_then_encoded(
            flow.sample_steps(ctx.model, labels, steps=steps, cfg=cfg, seed=seed)), cost=cost)
        return JSONResponse({"class": classes[label], "images": encoded})

    return [Route("/api/sample", sample, methods=["POST"])]


def _classes(ctx: Context) -> list[str]:
    classes = ctx.data.get("classes")
    if classes:
        return [str(c) for c in classes]
    return [str(i) for i in range(int(getattr(ctx.model.config, "num_classes", 0)))]
