"""Linear probe: how much a frozen encoder's features say about the labels, against raw pixels.

A multinomial logistic regression, fitted by full-batch L-BFGS on standardised inputs, once on the
encoder's pooled features (the mean of the patch tokens after the final norm) and once on the
pixels themselves; both scored on the test split. The same fit, penalty and examples for both.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data import load_image_dataset
from ..data.images.preprocess import ImagePreprocess
from ..models import Model, load, read_config
from .classify import _head, balanced_subset

L2 = 1e-3        # on standardised inputs: keeps 600 examples in 784 dimensions from separating perfectly
MAX_ITER = 300   # L-BFGS iterations; the fit converges well before on these sizes


def pooled_features(model: Model) -> Callable[[Tensor], Tensor]:
    """(B, C, H, W) -> (B, D): the mean of the patch tokens after the final norm, no masking."""
    if model.family == "mae":
        return model.features
    if model.family == "vit":
        return lambda x: model.forward_features(x)[:, model.prefix.num_prefix:].mean(dim=1)
    raise ValueError(f"a linear probe needs an image encoder (an MAE or ViT run), got a {model.family} model")


@torch.no_grad()
def _embed(fn: Callable[[Tensor], Tensor], images: Tensor, pre: ImagePreprocess, batch: int = 500) -> Tensor:
    return torch.cat([fn(pre(images[i:i + batch])).float() for i in range(0, len(images), batch)])


def fit_linear(x: Tensor, y: Tensor, classes: int, l2: float = L2) -> Callable[[Tensor], Tensor]:
    """Logistic regression on (N, F) inputs, standardised with the training statistics; returns the
    classifier, (M, F) -> (M, classes) logits."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    w = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=MAX_ITER, tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(z @ w + b, y) + l2 / 2 * w.square().sum()
        loss.backward()
        return loss
    opt.step(closure)
    w, b = w.detach(), b.detach()
    return lambda q: ((q - mean) / std) @ w + b


def probe(run: str | os.PathLike, data: str | None = None, label_fraction: float | None = None, seed: int = 0,
          limit_eval: int | None = None) -> dict[str, Any]:
    """Test accuracy of a linear classifier on the run's frozen features and on raw pixels, trained
    on `data`'s training split (default: the run's dataset), or a class-balanced `label_fraction` of it."""
    meta = read_config(run)
    info = meta.get("data") or {}
    if info.get("kind") != "images":
        raise ValueError(f"{run} was not trained on images (its data kind is {info.get('kind')!r}); "
                         f"a linear probe needs an MAE or ViT run")
    model = load(run)  # stock kernels: the features in the reference arithmetic
    fn = pooled_features(model)
    name = data or info["dataset"]
    train, test = load_image_dataset(name, "train"), load_image_dataset(name, "test")
    if label_fraction is not None:
        if not 0 < label_fraction <= 1:
            raise ValueError(f"label_fraction must be in (0, 1], got {label_fraction}")
        train = balanced_subset(train, label_fraction, seed)
    if limit_eval:
        test = _head(test, limit_eval)
    pre = ImagePreprocess.from_info(info)  # the run's own normalisation, for its features and the pixels
    if tuple(train.images.shape[1:]) != (pre.channels, *pre.image_size):
        raise ValueError(f"{name} has images of shape {tuple(train.images.shape[1:])}, but {run} was trained on "
                         f"{(pre.channels, *pre.image_size)}")
    model.eval()
    k = len(train.classes)
    out: dict[str, Any] = {"run": str(run), "data": name, "train_examples": len(train), "test_examples": len(test)}
    for key, embed in (("features", fn), ("pixels", lambda x: x.flatten(1))):
        x_train, x_test = _embed(embed, train.images, pre), _embed(embed, test.images, pre)
        classify = fit_linear(x_train, train.labels, k)
        out[f"{key}_dim"] = x_train.shape[1]
        out[f"{key}_accuracy"] = float((classify(x_test).argmax(-1) == test.labels).float().mean())
    return out
