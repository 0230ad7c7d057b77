"""The series transformer's closed forms, computed by hand for its tests: a small model with every
parameter drawn at random, its patches and key-padding mask from the series and their lengths, a
linear layer's product, and a `match` pattern for a whole message."""
import re

import torch

from anyformer.models import SeriesConfig, SeriesTransformer

# 3 channels of up to 23 steps, patches of 6 every 4 steps: starts 0, 4, ..., 20, so L = 6 and the
# last patch reaches step 26, three steps of zero padding past the longest series.
SMALL = dict(channels=3, length=23, patch_size=6, patch_stride=4, num_classes=5, width=16, depth=2,
             heads=2, mlp_hidden=24, dropout=0.0, drop_path=0.0)


def build(**overrides) -> SeriesTransformer:
    """A small model in eval mode with every parameter drawn at random: the initial zeros (biases,
    LayerNorm's shift), ones (LayerNorm's scale) and near-zeros (class token) would hide a dropped term."""
    torch.manual_seed(0)
    model = SeriesTransformer(SeriesConfig(**{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model.eval()


def exactly(message: str) -> str:
    """A `match` pattern for the whole message, so that text added before or after it fails too."""
    return "^" + re.escape(message) + "$"


def patches_by_hand(series, lengths, config, difference=False):
    """(B, C, T) -> (B, C', L, p): each series zeroed from its length on, its slope read beside it when
    asked, laid on a zero grid long enough for whole patches, patch l the steps [l s, l s + p)."""
    B, C, T = series.shape
    kept = series.clone()
    ends = [T] * B if lengths is None else [min(int(n), T) for n in lengths]
    for b, n in enumerate(ends):
        kept[b, :, n:] = 0
    if difference:
        slope = torch.zeros_like(kept)
        slope[..., 1:] = kept[..., 1:] - kept[..., :-1]
        for b, n in enumerate(ends):
            slope[b, :, n:] = 0  # no step down to the padding
        kept = torch.cat([kept, slope], dim=1)
    s, p, L = config.stride, config.patch_size, config.patches
    grid = torch.zeros(B, kept.shape[1], (L - 1) * s + p)
    grid[..., :T] = kept
    return torch.stack([grid[..., l * s:l * s + p] for l in range(L)], dim=2)


def mask_by_hand(lengths, T, config):
    """(B, 1 + L) key-padding mask: the class token, then patch l where it starts before the series' end."""
    steps = [min(int(n), T) for n in lengths]
    return torch.tensor([[True] + [l * config.stride < n for l in range(config.patches)] for n in steps])


def linear(x, layer):
    return x @ layer.weight.T + layer.bias
