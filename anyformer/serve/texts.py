"""The text classifier section: POST /api/predict with texts -> each text's classes.

Texts come as JSON, `{"text": "..."}` or `{"texts": ["...", "..."]}`, or as plain text (Content-Type
text/plain: the body is one text). Each is tokenised as training read texts (the run's tokenizer.json,
cut at its length); the answer gives the class, its probability and every class's.
"""
from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..data.text.inputs import saved_tokenizer, text_probabilities
from .context import Context
from .limits import ApiError, media_type, read_body

FAMILY = "text-classifier"
FRAGMENT = "texts.html"
MAX_TEXTS = 1_000          # one request's texts; more belong to `anyformer predict RUN texts.csv`
HEAVY_TEXTS = 32           # more texts than this run in the heavy lane


def info(ctx: Context) -> dict[str, Any]:
    d = ctx.data
    return {"task": "classify-text", "classes": d.get("classes"), "max_length": d.get("max_length"),
            "text_column": d.get("text_column")}


def warm_up(ctx: Context) -> None:
    """One short text through the model, so the speed plan decides its kernels now."""
    text_probabilities(ctx.model, saved_tokenizer(ctx.run_dir), ["warm up"])


def _texts_of(body: Any) -> list[str]:
    texts = ([body["text"]] if "text" in body else body.get("texts")) if isinstance(body, dict) else None
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ApiError(400, 'expected JSON {"text": "..."} or {"texts": ["...", ...]} with at least one text')
    blank = [i for i, t in enumerate(texts) if not t.strip()]
    if blank:  # nothing to read: an answer would be the model's prior, shown as if it were about a text
        raise ApiError(400, f"text {blank[0] + 1} of {len(texts)} is blank; expected words to classify")
    if len(texts) > MAX_TEXTS:
        raise ApiError(413, f"{len(texts):,} texts in one request; the limit is {MAX_TEXTS:,} (anyformer predict RUN "
                            f"texts.csv takes any number)")
    return texts


def routes(ctx: Context) -> list[Route]:
    if ctx.data.get("kind") != "labelled-text":
        raise ValueError(f"{ctx.run_dir} holds a text classifier but its data kind is {ctx.data.get('kind')!r}")
    tokenizer, classes = saved_tokenizer(ctx.run_dir), [str(c) for c in ctx.data["classes"]]

    def classify(texts: list[str]) -> dict[str, Any]:
        probs = text_probabilities(ctx.model, tokenizer, texts)
        answers = []
        for p in probs:
            best = int(p.argmax())
            answers.append({"class": classes[best], "probability": round(float(p[best]), 6),
                            "probabilities": {c: round(float(q), 6) for c, q in zip(classes, p.tolist())}})
        return {"predictions": answers}

    async def predict(request: Request) -> JSONResponse:
        body = await read_body(request, ctx.limits.max_body_bytes)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError(400, f"the body is not UTF-8 ({e})") from None
        if media_type(request) == "application/json":
            try:
                texts = _texts_of(json.loads(text))
            except json.JSONDecodeError as e:
                raise ApiError(400, f"the body is not JSON ({e})") from None
        elif media_type(request) in ("text/plain", ""):
            texts = [text]
        else:
            raise ApiError(415, f"Content-Type {media_type(request)!r}; expected application/json "
                                f'({{"text": "..."}}) or text/plain (one text)')
        lane = "heavy" if len(texts) > HEAVY_TEXTS else "light"
        return JSONResponse(await ctx.worker.run(request, lane, classify, texts))

    return [Route("/api/predict", predict, methods=["POST"])]
