"""One generation step of a GPT as one static graph, for `torch.compile`: the fast decode path.

The step is the model's own forward (GPT -> Transformer -> TransformerBlock -> MultiHeadAttention)
in its static cache mode, as gpt-fast's and Hugging Face's StaticCache steps are: the token's
position is a 0-dim tensor, its keys and values are written into the preallocated cache at that
position, and attention reads the whole cache with the positions not yet written masked (a mask,
not a slice: no shape depends on the position). So one compile serves every step. The caches are
`KVCache`s of `GPT.new_cache`, which the eager steps (and the prompt) fill too.

A cached step computes one position, so it is bound by memory: every weight is read once per
token. The layers choose what compiles well for that themselves. On the CPU, where inductor would
send each one-row product to a GEMM library (10-24 GB/s of weights here, 2-core AMD EPYC, the char
GPT and gpt2, against 28-44 GB/s for a plain pass over them), the linear layers write it as a
product and a sum (`nn.linear.rowwise_linear`) and attention as products and sums over the cache
(`nn.attention.attend_by_sums`): inductor fuses the step around one pass over each weight. On CUDA
the step runs as a CUDA graph (`compile_for_decode`), SDPA inside it, the caches at fixed addresses.

Whether the compiled step runs is the speed plan's call (`anyformer.plan.compile_for_decode`):
measured against the eager step, numerics checked, compile time counted.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from ..nn import KVCache

if TYPE_CHECKING:
    from .gpt import GPT

Step = Callable[[Tensor, list[KVCache]], Tensor]  # (B, 1) ids, caches -> (B, vocab) logits

# Where the static step is compiled and measured: inductor's C++ on the CPU, CUDA graphs on CUDA.
STATIC_DEVICES = ("cpu", "cuda")


def static_decode_unsupported(model: "GPT") -> str | None:
    """Why `model` has no compiled static decode step (None: it has one)."""
    device = next(model.parameters()).device.type
    if device not in STATIC_DEVICES:
        return f"the static decode step is compiled for {' and '.join(STATIC_DEVICES)} only, not {device}"
    return None


def cache_length(model: "GPT", total: int) -> int:
    """Positions to allocate for `total` tokens: the next power of two (at least 64), at most the
    context. One compiled graph serves every request of the same bucket; the unused positions are
    masked, not read into the softmax."""
    n = 64
    while n < total:
        n *= 2
    return min(n, model.config.context)


def decode_step(model: "GPT", ids: Tensor, position: Tensor, cache: list[KVCache]) -> Tensor:
    """Logits (B, vocab) for tokens `ids` (B, 1) standing at `position` (a 0-dim int64 tensor), after
    the positions before it held in `cache` (written here at `position`): the model's forward in its
    static cache mode. Eval mode: no dropout."""
    return model(ids, cache=cache, position=position, last_only=True)[:, -1]


def fresh_decode_step() -> Callable[..., Tensor]:
    """`decode_step` with a code object of its own. torch.compile keeps its graphs per code object and
    stops compiling a code object after a few recompiles (`recompile_limit`, 8), running it eagerly
    from then on: here that would be the slow product-and-sum form, unfused. With one code object
    per (model, batch, cache size) each compiles exactly one graph, however many a process makes."""
    f = decode_step
    return types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def eager_step(model: "GPT") -> Step:
    """The model's own cached forward, one position: the stock candidate."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        return model(ids, cache=cache, last_only=True)[:, -1]
    return step


def static_step(model: "GPT", compiled: Callable[..., Tensor]) -> Step:
    """`compiled` (decode_step under torch.compile) behind the eager step's signature: it reads the
    position from the cache and moves every layer's length on by one, as `KVCache.append` does."""
    def step(ids: Tensor, cache: list[KVCache]) -> Tensor:
        pos = cache[0].length
        if pos >= min(cache[0].max_len, model.config.context):  # the graph cannot check a tensor position
            raise ValueError(f"KV cache holds at most {cache[0].max_len} positions (context "
                             f"{model.config.context}); got {pos} cached + 1 new")
        if ids.is_cuda:
            _static_addresses(cache)
        out = compiled(model, ids, torch.tensor(pos, device=ids.device), cache)
        for c in cache:
            c.length = pos + 1
        # A CUDA graph's output lives in its memory pool, which its next replay overwrites.
        return out.clone() if out.is_cuda else out
    return step


def _static_addresses(cache: list[KVCache]) -> None:
    """Mark the caches' buffers as static inputs of the compiled step. CUDA graphs replay fixed
    addresses: an input that is not marked is copied into the graph's own buffer, and one written in
    place (as the caches are) makes cudagraph trees skip the graph. Unguarded: another cache (another
    request's) has the graph recorded again, not recompiled; `GPT.stream` reuses one per size."""
    for c in cache:
        torch._dynamo.mark_static_address(c.k)
        torch._dynamo.mark_static_address(c.v)


def decode_tolerance(dtype: torch.dtype) -> float:
    """How far the compiled step's logits may differ from the eager step's, relative to the largest:
    a summation order's worth in float32; in half precision, where every fused or unfused rounding
    is one in 2^8 (bf16) or 2^11 (fp16), a few of those."""
    return max(1e-4, 8 * torch.finfo(dtype).eps)


def compute_dtype(model: "GPT", device: torch.device) -> torch.dtype:
    """The precision the step computes in: autocast's where it is on for the device, else the weights'."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def model_key(model: "GPT") -> str:
    """The shape of `model` as the plan file names it: what the compiled graph depends on."""
    c = model.config
    return (f"gpt-d{c.depth}-w{c.width}-h{c.heads}-m{c.mlp_hidden or 4 * c.width}-v{c.vocab_size}"
            f"-{c.position}-{c.activation}{'' if c.bias else '-nobias'}")


def plan_fields(model: "GPT", batch: int, cache: int) -> dict[str, object]:
    """The decode step's key in the plan file (`compile_for_decode` adds pass=decode)."""
    device = next(model.parameters()).device
    return dict(model=model_key(model), batch=batch, cache=cache,
                dtype=str(compute_dtype(model, device)).removeprefix("torch."), device=device.type)
