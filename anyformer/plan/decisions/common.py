"""What the decisions share: shape buckets, the size of a timed call, argument checks, inputs."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import choices
from .. import planner as _planner


_CALL_FLOPS = 1e9  # one timed call: ~5-20 ms at the 50-200 GFLOP/s of a small CPU
# A training linear's weight gradient, dy^T x, sums over its rows: timed on fewer rows, that product
# is another shape, and the answer changes: which of oneDNN and F.linear is faster flipped between
# 256 and 4096 rows (measured: docs/results.md, 'Measurements behind the code's choices').
# So a training call may take this much before its rows are cut (~100 ms).
_TRAIN_CALL_FLOPS = 16e9
_MAX_ROWS, _MAX_LEN, _MAX_BATCH = 4096, 2048, 64
# Inference on at most this many rows reads each weight from memory (the weights of a model do not
# stay in cache between its layers): timed over copies of the weight that overflow the caches.
_COLD_MAX_ROWS, _COLD_BYTES, _COLD_MAX_COPIES = 16, 256 << 20, 64
_ADAMW_MAX_TENSORS, _ADAMW_MAX_NUMEL = 64, 1 << 20  # a 1M-element step: ~1-5 ms
_GELU_MAX_NUMEL = 1 << 22  # elementwise: its time per element holds once the tensor outgrows the caches


def _bucket(n: int, cap: int) -> int | None:
    """The next power of two >= n, at most cap. Also the in-process memo's key, asked on every call:
    a decode step's growing KV cache (one key more each token) then hits the memo instead of
    re-entering the planner. None for a non-int: the memo misses and the validation that follows
    names the problem."""
    try:
        return min(cap, 1 << max(0, int.bit_length(n - 1)))
    except TypeError:
        return None


# Sequence lengths of a forward over many queries (a ViT's 50 tokens, a prompt) are keyed finely and
# timed at the length asked: rounding 50 up to 64 changed the answer (SDPA's 32-query blocks fit 64
# tokens and leave a ragged block at 50) (measured: docs/results.md, 'Measurements behind the code's choices').
# The key is the next multiple of 8 up to 128 tokens, of 32 up to _FINE_LEN (at most 28 keys where a
# prompt's length varies); longer ones, and a decode step's growing cache (one query), go by powers of two.
_FINE_LEN = 512


def _length_bucket(n: int, queries: int) -> int:
    """The key for a sequence length `n` attended by `queries` queries."""
    if queries > 1 and n <= _FINE_LEN:
        step = 8 if n <= 128 else 32
        return (n + step - 1) // step * step
    return _bucket(n, _MAX_LEN)


def _floor_pow2(x: float) -> int:
    return 1 << max(0, int(x).bit_length() - 1) if x >= 1 else 1


def _positive(where: str, **sizes: Any) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")


def _dtype(where: str, dtype: Any) -> str:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{where}: dtype must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")
    return str(dtype).removeprefix("torch.")


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0,
           device: torch.device | str = "cpu") -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)


def _with_grads(fn: Callable[[], torch.Tensor], leaves: tuple[torch.Tensor, ...], dy: torch.Tensor) -> Callable:
    """A call that runs fn forward and backward (as a training step does) and returns the output
    and the gradients of `leaves`."""
    def run():
        with torch.enable_grad():
            y = fn()
            return (y.detach(), *torch.autograd.grad(y, leaves, dy))
    return run


def _may_build(p: _planner.Planner, decision: str) -> bool:
    """Whether the native kernels may be built for `decision`: not where another choice is forced
    (`ANYFORMER_PLAN=stock` compiles nothing)."""
    forced = choices.forced_choice(p.forced()[0], decision)
    return forced is None or forced == "native"
