"""The image classifier section: POST /api/predict -> the top classes and the attention rollout.

Accepts the image as the raw body (Content-Type image/* or application/octet-stream, what the
page's canvas and `curl --data-binary` send) or as one file in a multipart form (`curl -F`).
One forward pass gives both the probabilities and the rollout (`viz.image_attention` streams the
attention layer by layer), so the heat map costs no second pass.
"""
from __future__ import annotations

from typing import Any

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..data.images.decode_process import PictureDecoder
from ..data.images.preprocess import ImagePreprocess
from .context import Context
from .images import check_header, heat_overlay, load_upload, png_data_url, undecodable
from .uploads import upload_bytes
from .worker import charge

FAMILY = "vit"
FRAGMENT = "classify.html"
TOP = 3
HEAVY_PIXELS = 1_000_000  # an upload of more pixels than this is decoded in the heavy lane, by a low-priority process
# The heavy lane's share of a core while light requests are in (worker.py): a large picture's decoding is
# tens of milliseconds, which a fifth of a core stretches to a fraction of a second, while light requests keep
# nearer their idle latency (soaks with 4 heavy clients: docs/results.md, 'Measurements behind the code's
# choices').
HEAVY_SHARE = 0.2
OVERLAY_SIZE = 112  # pixels across the heat map sent back: small, but big enough to see a digit


def info(ctx: Context) -> dict[str, Any]:
    pre = _preprocess(ctx)
    return {"task": "classify", "classes": ctx.data.get("classes"), "image_size": list(pre.image_size),
            "channels": pre.channels}


def warm_up(ctx: Context) -> None:
    """One request's computation on a blank picture: the speed plan decides its kernels now, not
    inside the first user's request."""
    from .. import viz
    pre = _preprocess(ctx)
    blank = torch.zeros(pre.channels, *pre.image_size, dtype=torch.uint8)
    viz.image_attention(ctx.model, pre(blank)[None], layers=[])


def routes(ctx: Context) -> list[Route]:
    pre = _preprocess(ctx)
    classes = ctx.data.get("classes") or [str(i) for i in range(ctx.model.config.num_classes)]

    # A large picture is decoded by a process of its own at the lowest CPU priority (decode_process.py), its
    # CPU time counted in the heavy lane's turns; the model's pass on the small result is light work, in the
    # light lane.
    decoder = PictureDecoder(pre)
    ctx.background.append(decoder)

    def answer(x: torch.Tensor, warning: str | None) -> dict[str, Any]:
        from .. import viz
        result = viz.image_attention(ctx.model, pre(x)[None], layers=[])
        probs = result["probs"][0]
        order = probs.argsort()[::-1][:TOP]
        top = [{"class": str(classes[i]), "index": int(i), "probability": round(float(probs[i]), 6)} for i in order]
        scale = max(1, OVERLAY_SIZE // max(x.shape[-2:]))
        return {"top": top, "warning": warning,
                "attention": {"png": png_data_url(heat_overlay(x, result["overlay"][0], scale)),
                              "grid": result["rollout"][0].round(5).tolist()}}

    def predict_bytes(data: bytes) -> dict[str, Any]:
        return answer(*load_upload(pre, data))

    def decode_large(data: bytes) -> tuple[torch.Tensor, str | None]:
        try:
            x, warning, cpu = decoder.decode(data)
        except ValueError as e:
            raise undecodable(e) from None
        charge(cpu)  # the child's time counts in the heavy lane's turns, as the lane's own thread's would
        return x, warning

    async def predict(request: Request) -> JSONResponse:
        data = await _image_bytes(request, ctx)
        width, height = check_header(data, ctx.limits.max_pixels)
        if width * height <= HEAVY_PIXELS:
            return JSONResponse(await ctx.worker.run(request, "light", predict_bytes, data))
        x, warning = await ctx.worker.run(request, "heavy", decode_large, data)
        return JSONResponse(await ctx.worker.run(request, "light", answer, x, warning))

    return [Route("/api/predict", predict, methods=["POST"])]


def _preprocess(ctx: Context) -> ImagePreprocess:
    if ctx.data.get("kind") != "images":
        raise ValueError(f"{ctx.run_dir} holds a ViT but its data kind is {ctx.data.get('kind')!r}; "
                         f"the classifier page needs a run trained by `anyformer train` on images")
    return ImagePreprocess.from_info(ctx.data)


async def _image_bytes(request: Request, ctx: Context) -> bytes:
    return await upload_bytes(request, ctx.limits.max_body_bytes, ("image/", "application/octet-stream"),
                              "image", "curl -F file=@digit.png")
