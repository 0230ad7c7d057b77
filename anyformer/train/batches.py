"""What every task's batches share: randomness fixed by (seed, step), and each rank's share of
the global batch. A resumed run, or a run on more processes, draws exactly the same examples."""
from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from ..data.transfer import to_device


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """Randomness of one step derived from (seed, step): a resumed run draws exactly the same."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + salt) % (2 ** 63))


@functools.lru_cache(maxsize=4)  # this epoch's order, on the host and on the device
def epoch_order(n: int, seed: int, epoch: int, device: torch.device | None = None) -> Tensor:
    """The shuffled order of n examples in one epoch (read-only: every step of the epoch shares it),
    drawn on the CPU (the same on every device) and, with `device`, copied there once per epoch: a
    CUDA step then indexes the data kept on the device without copying its indices first (a copy that
    made the host wait for the device). Kept, not drawn again for each step: a permutation of a data
    set the size of MNIST's costs a few percent of a small model's whole step on a GPU, every step
    (measured: docs/results.md, 'Measurements behind the code's choices')."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 10_007 + epoch))
    return order if device is None else to_device(order, device)


def rank_share(n: int, rank: int, world: int) -> slice:
    """Every rank draws the same global batch of n, then keeps its own contiguous share."""
    share = math.ceil(n / world)
    return slice(rank * share, (rank + 1) * share)
