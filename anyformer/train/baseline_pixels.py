"""The baseline beside an image classifier (`--baseline`): logistic regression on the pixels, fitted
on exactly the run's training images and scored on exactly the images the run was scored on.

Pixels are scaled to [0, 1] and each one standardised on the training images (scikit-learn's
StandardScaler); images larger than 32x32 are average-pooled to at most 32x32 first, so that the fit
stays a minute or so on a CPU whatever the photos' size (said in the method's name)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

SIDE = 32  # the largest side the pixels are pooled to


def pixel_features(images: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    """uint8 (N, C, H, W) -> float64 (N, C * h * w) in [0, 1], pooled to `size` where smaller."""
    x = images.float() / 255
    if tuple(x.shape[-2:]) != size:
        x = F.adaptive_avg_pool2d(x, size)
    return x.flatten(1).double().numpy()


def pooled_size(h: int, w: int) -> tuple[int, int]:
    scale = min(1.0, SIDE / max(h, w))
    return max(1, round(h * scale)), max(1, round(w * scale))


def fit_pixels(task: Any, threads: int | None) -> dict[str, Any]:
    from sklearn import __version__ as sklearn_version
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    h, w = task.train.images.shape[-2:]
    size = pooled_size(h, w)
    started = time.perf_counter()
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=task.cfg.seed))
    model.fit(pixel_features(task.train.images, size), task.train.labels.numpy())
    predicted = model.predict(pixel_features(task.test.images, size))
    prefix = "test" if task.eval_split == "test" else "val"
    pooled = "" if size == (h, w) else f", pooled from {h}x{w} to {size[0]}x{size[1]}"
    return {"method": f"logistic regression on the pixels (scikit-learn {sklearn_version}{pooled})",
            f"{prefix}_accuracy": float((predicted == task.test.labels.numpy()).mean()),
            "seconds": round(time.perf_counter() - started, 3)}
