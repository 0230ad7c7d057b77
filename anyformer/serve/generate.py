"""The language-model section: POST /api/generate continues a prompt with the run's model.

JSON in: {prompt, max_new_tokens, temperature, top_k, top_p, seed, stream}. Without `stream` the
answer is JSON {prompt, text, tokens}; with `stream: true` it is text/plain, sent piece by piece
as `GPT.stream` samples each token (curl -N shows it live; the page reads it with fetch). Text is
decoded incrementally with the run's tokenizer, as `anyformer generate` prints it, so a character
split across BPE tokens is sent once it is whole. Every value is checked before the first token:
a bad request gets its 4xx, never a stream that breaks off.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any, Iterator

import torch
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..data.text.tokenizers import tokenizer_from_info
from ..models.gpt import window_keep
from ..models.generation import cache_length
from ..plan import prepare_decode
from .context import Context
from .limits import ApiError, field, media_type, read_body

FAMILY = "gpt"
FRAGMENT = "generate.html"
MAX_TEMPERATURE = 10.0
TIMED_STEPS, TIMED_RUNS = 8, 3  # one-token steps timed after each prompt; prompts timed, the median kept
SHORT_PROMPT = 8  # the prompt length `info` quotes the most new tokens for


def info(ctx: Context) -> dict[str, Any]:
    return {"task": "generate", "context": ctx.model.config.context,
            "max_new_tokens": ctx.limits.max_new_tokens,  # any length: past the context the window slides
            "max_prompt_chars": ctx.limits.max_prompt_chars,
            "tokens_in_budget": most_tokens(ctx, SHORT_PROMPT)}


def warm_up(ctx: Context) -> None:
    """Everything the first requests would otherwise do inside themselves, done before the server
    listens: the prompt's and the step's kernels planned, and whether the one-token step runs
    compiled settled (and any compile done) for every cache size a request may use, as the plan
    decides for a process that runs for days (`plan.prepare_decode`, the door's decoding half:
    generation itself never compiles), so that no request waits for a compile.
    Then what the budget needs (`generation_seconds`): a one-token step with the smallest cache
    and with a cache of the whole context, and a pass over a full window's kept tokens (a refill)."""
    context = ctx.model.config.context
    size = 64
    while True:  # the cache sizes: powers of two from 64, up to the context (generation.cache_length)
        prepare_decode(ctx.model, 1, min(size, context))
        if size >= context:
            break
        size *= 2
    _, ctx.costs["token"] = _timed(ctx, 1, TIMED_STEPS + 1)            # a cache of 64 positions
    refills = [_timed(ctx, window_keep(context), context) for _ in range(TIMED_RUNS)]
    ctx.costs["refill"] = statistics.median(r[0] for r in refills)     # the prompt of a window's kept tokens
    ctx.costs["token_full"] = statistics.median(r[1] for r in refills)  # steps with a cache of the context


def _timed(ctx: Context, prompt: int, new_tokens: int) -> tuple[float, float]:
    """(the prompt's pass, the median of TIMED_STEPS one-token steps after it) for a zero prompt of
    `prompt` tokens in a generation of `new_tokens` (which sets the cache's size)."""
    tokens = ctx.model.stream(torch.zeros(1, prompt, dtype=torch.long), new_tokens, temperature=0)
    times, last = [], time.perf_counter()
    for _ in zip(range(TIMED_STEPS + 1), tokens):
        now = time.perf_counter()
        times.append(now - last)
        last = now
    tokens.close()
    return times[0], statistics.median(times[1:])


def generation_seconds(ctx: Context, prompt: int, new_tokens: int) -> float:
    """Estimated compute of `new_tokens` after a prompt of `prompt` tokens, from the warm-up's times:
    the prompt's pass (a refill's time, pro rata), a one-token step per further token at the cost of
    its cache's size (interpolated between the smallest cache and the context's), and, past the
    context, a refill of the window each time it slides (every quarter context)."""
    costs, context = ctx.costs, ctx.model.config.context
    keep, p = window_keep(context), min(prompt, context)
    size = cache_length(ctx.model, min(p + new_tokens, context))
    step = costs["token"] + (costs["token_full"] - costs["token"]) * max(0, size - 64) / max(1, context - 64)
    slides = math.ceil(max(0, p + new_tokens - context) / max(1, context - keep))
    return max(costs["token"], costs["refill"] * p / keep) + (new_tokens - 1) * step + slides * costs["refill"]


def most_tokens(ctx: Context, prompt: int) -> int:
    """The most new tokens a request with a prompt of `prompt` tokens may ask within the budget."""
    low, high = 0, ctx.limits.max_new_tokens
    while low < high:  # the estimate grows with the tokens asked
        mid = (low + high + 1) // 2
        if generation_seconds(ctx, prompt, mid) <= ctx.limits.max_work_seconds:
            low = mid
        else:
            high = mid - 1
    return low


def routes(ctx: Context) -> list[Route]:
    tok = tokenizer_from_info(ctx.data, ctx.run_dir)

    def pieces(ids: list[int], req: dict[str, Any]) -> Iterator[str]:
        gen = torch.Generator().manual_seed(req["seed"]) if req["seed"] is not None else None
        decoder = tok.decoder()
        tokens = ctx.model.stream(torch.tensor([ids], dtype=torch.long), req["max_new_tokens"],
                                  temperature=req["temperature"], top_k=req["top_k"], top_p=req["top_p"],
                                  generator=gen)
        try:
            for nxt in tokens:
                if text := decoder.feed(nxt[0].tolist()):
                    yield text
            if text := decoder.flush():
                yield text
        finally:
            tokens.close()

    async def generate(request: Request) -> Response:
        req = await _read_request(request, ctx)
        try:
            ids = tok.encode(req["prompt"])
        except ValueError as e:  # a character the model never saw
            raise ApiError(422, f"the prompt cannot be encoded: {e}") from None
        if not ids:
            raise ApiError(422, "the prompt must hold at least one token")
        n = req["max_new_tokens"]
        cost = generation_seconds(ctx, len(ids), n)
        lane = ctx.check_cost(cost,
                              f"{n} tokens after {len(ids)}, from the step and refill times measured at start",
                              f"ask for at most {most_tokens(ctx, len(ids))} max_new_tokens")
        if req["stream"]:
            return StreamingResponse(ctx.worker.stream(request, lane, pieces(ids, req), cost=cost),
                                     media_type="text/plain; charset=utf-8",
                                     headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        text = "".join(await ctx.worker.collect(request, lane, pieces(ids, req), cost=cost))
        return JSONResponse({"prompt": req["prompt"], "text": text, "tokens": req["max_new_tokens"]})

    return [Route("/api/generate", generate, methods=["POST"])]


async def _read_request(request: Request, ctx: Context) -> dict[str, Any]:
    if media_type(request) != "application/json":
        raise ApiError(415, f"expected Content-Type application/json, got {media_type(request) or 'none'}")
    body = await read_body(request, ctx.limits.max_body_bytes)
    try:
        values = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(values, dict):
        raise ApiError(400, f"expected a JSON object {{\"prompt\": ...}}, got {type(values).__name__}")
    unknown = sorted(set(values) - {"prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stream"})
    if unknown:
        raise ApiError(422, f"unknown fields {unknown}; expected prompt, max_new_tokens, temperature, top_k, "
                            f"top_p, seed, stream")
    limits = ctx.limits
    prompt = field(values, "prompt", str, "")
    if len(prompt) > limits.max_prompt_chars:
        raise ApiError(413, f"the prompt is {len(prompt)} characters; the limit is {limits.max_prompt_chars}")
    return {
        "prompt": prompt,
        "max_new_tokens": field(values, "max_new_tokens", int, min(200, limits.max_new_tokens), 1,
                                limits.max_new_tokens),
        "temperature": float(field(values, "temperature", (int, float), 0.8, 0, MAX_TEMPERATURE)),
        "top_k": field(values, "top_k", int, None, 1),
        "top_p": field(values, "top_p", (int, float), None, 1e-6, 1),
        "seed": field(values, "seed", int, None, 0, 2**63 - 1),
        "stream": field(values, "stream", bool, False),
    }
