"""The order of examples: a function of (n, seed, epoch) alone, kept between the steps of an epoch."""
from __future__ import annotations

import torch

from anyformer.train.batches import epoch_order


def test_an_epochs_order_is_a_permutation_fixed_by_seed_and_epoch():
    first = epoch_order(1000, 3, 0)
    assert torch.equal(first.sort().values, torch.arange(1000))
    assert torch.equal(first, torch.randperm(1000, generator=torch.Generator().manual_seed(3 * 10_007)))
    assert not torch.equal(first, epoch_order(1000, 3, 1)) and not torch.equal(first, epoch_order(1000, 4, 0))
    epoch_order.cache_clear()  # drawn again, not remembered: the same order
    assert torch.equal(epoch_order(1000, 3, 0), first)
