"""A masked autoencoder's work at a glance: masked inputs, reconstructions and originals."""
from __future__ import annotations

import os

from torch import Tensor

from ..files import atomic_path

ROWS = ("masked input", "reconstruction", "original")


def plot_reconstruction(masked: Tensor, reconstruction: Tensor, original: Tensor, out: str | os.PathLike) -> None:
    """Three rows of the same B images (B, C, H, W) with pixels in [0, 1]: one column per image."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not masked.shape == reconstruction.shape == original.shape or masked.dim() != 4:
        raise ValueError(f"expected three (B, C, H, W) batches of one shape, got {tuple(masked.shape)}, "
                         f"{tuple(reconstruction.shape)}, {tuple(original.shape)}")
    n = masked.shape[0]
    fig, axes = plt.subplots(3, n, figsize=(1.2 * n + 1.2, 3.9), squeeze=False)
    for r, (name, batch) in enumerate(zip(ROWS, (masked, reconstruction, original))):
        for i in range(n):
            ax = axes[r][i]
            img = batch[i].detach().float().permute(1, 2, 0).numpy()
            ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r][0].set_ylabel(name, fontsize=9)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
