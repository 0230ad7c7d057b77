"""Judging generated images with a classifier trained apart from the generator.

Two figures, both read through the judge's eyes:
- class consistency: the share of samples the judge assigns to the class they were asked for,
  read beside the judge's own accuracy on real test images (its ceiling);
- the Fréchet distance between Gaussians fitted to the judge's penultimate features of the samples
  and of the real test set, read beside the floor: the same statistic for as many REAL training
  images. With few samples the statistic is biased upwards (a covariance fitted to n points is
  noisy), so a number means something only next to the floor at the same n.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor

from ..data import ImageDataset, ImagePreprocess, load_image_dataset
from ..models import ViT, load, read_config
from ..shapes import pair
from .precision import autocast

__all__ = ["Judge", "frechet_distance", "guidance_sweep"]


# ---------------------------------------------------------------------- the statistic
def _moments(feats: Tensor, name: str) -> tuple[Tensor, Tensor]:
    """Mean (F,) and unbiased covariance (F, F) of (N, F) features, in float64."""
    if not isinstance(feats, Tensor):
        feats = torch.as_tensor(feats)
    if feats.dim() != 2 or feats.shape[0] < 2:
        raise ValueError(f"{name}: expected features (N, F) with N >= 2, got shape {tuple(feats.shape)}")
    x = feats.detach().to("cpu", torch.float64)
    if not torch.isfinite(x).all():
        raise ValueError(f"{name}: features must be finite, got NaN or infinity")
    mu = x.mean(dim=0)
    d = x - mu
    return mu, d.T @ d / (x.shape[0] - 1)


def _psd_sqrt(m: Tensor) -> Tensor:
    """The symmetric square root of a symmetric positive semi-definite matrix. Rounding leaves tiny
    negative eigenvalues; they are zeros of the true matrix, so they are clipped, not rooted."""
    w, v = torch.linalg.eigh((m + m.T) / 2)
    return (v * w.clamp_min(0).sqrt()) @ v.T


def frechet_from_moments(mu1: Tensor, s1: Tensor, mu2: Tensor, s2: Tensor) -> float:
    """|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2), in float64.

    The cross term is written with S1^1/2 S2 S1^1/2, which is symmetric PSD (unlike S1 S2), so its
    trace of a square root is the sum of the roots of its eigenvalues: no general matrix root needed.
    """
    r = _psd_sqrt(s1)
    m = r @ s2 @ r
    cross = torch.linalg.eigvalsh((m + m.T) / 2).clamp_min(0).sqrt().sum()
    d = float(((mu1 - mu2) ** 2).sum() + torch.trace(s1) + torch.trace(s2) - 2 * cross)
    return max(d, 0.0)  # a true distance is >= 0; rounding can leave -1e-13


def frechet_distance(feats_a: Tensor, feats_b: Tensor) -> float:
    """The Fréchet distance between Gaussians fitted to two feature sets (N_a, F) and (N_b, F)."""
    mu1, s1 = _moments(feats_a, "feats_a")
    mu2, s2 = _moments(feats_b, "feats_b")
    if mu1.shape != mu2.shape:
        raise ValueError(f"feature sets differ in width: {mu1.shape[0]} and {mu2.shape[0]}")
    return frechet_from_moments(mu1, s1, mu2, s2)


# ---------------------------------------------------------------------- the judge
class Judge:
    """A classifier run used to score images of its own dataset's classes, size and channels.

    `Judge.load(run_dir, channels=C, image_size=(H, W), classes=[...])`, then
    `judge.score(images_uint8 (N, C, H, W), labels int64 (N,))`. The real test set's features and
    the judge's accuracy on it are computed once, on first use, and kept.
    """

    def __init__(self, model: ViT, preprocess: ImagePreprocess, classes: Sequence[str], test: ImageDataset,
                 train: ImageDataset, *, batch_size: int = 500, seed: int = 0) -> None:
        self.model, self.preprocess, self.classes = model.eval(), preprocess, list(classes)
        self.test, self.train = test, train
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.device = next(model.parameters()).device
        self._reference: tuple[Tensor, Tensor, float] | None = None  # test (mu, cov), accuracy
        self._floors: dict[int, float] = {}

    @classmethod
    def load(cls, run_dir: str | os.PathLike[str], *, channels: int, image_size: int | Sequence[int],
             classes: Sequence[str], device: str | torch.device = "cpu", test: ImageDataset | None = None,
             train: ImageDataset | None = None, batch_size: int = 500, seed: int = 0) -> "Judge":
        """The classifier in `run_dir`, checked against the generator's channels, image size and
        classes. `test` and `train` replace the run's dataset splits (default: loaded by its name)."""
        run = Path(run_dir)
        info = _classifier_info(run)
        want_hw, have_hw = pair(image_size, "image_size"), pair(info["image_size"], "image_size")
        if int(info["channels"]) != int(channels):
            raise ValueError(f"the judge {run} sees {info['channels']}-channel images, the generator makes "
                             f"{channels}-channel ones")
        if have_hw != want_hw:
            raise ValueError(f"the judge {run} sees {have_hw[0]}x{have_hw[1]} images, the generator makes "
                             f"{want_hw[0]}x{want_hw[1]} ones")
        if [str(c) for c in info["classes"]] != [str(c) for c in classes]:
            raise ValueError(f"the judge {run} knows the classes {list(info['classes'])}, the generator "
                             f"{list(classes)}")
        if not (run / "model.safetensors").is_file():
            raise ValueError(f"the judge {run} has no weights: expected {run / 'model.safetensors'}")
        model = load(run, device=device)  # stock kernels: the reference arithmetic
        if not isinstance(model, ViT) or model.config.num_classes != len(info["classes"]):
            raise ValueError(f"the judge {run} is not a ViT classifier of its {len(info['classes'])} classes")
        name = info["dataset"]
        test = load_image_dataset(name, "test") if test is None else test
        train = load_image_dataset(name, "train") if train is None else train
        for split, ds in (("test", test), ("train", train)):
            if len(ds) < 2 or tuple(ds.images.shape[1:]) != (int(channels), *want_hw):
                raise ValueError(f"the judge's {split} split of {name!r} must hold at least 2 images of shape "
                                 f"{(int(channels), *want_hw)}, got {tuple(ds.images.shape)}")
        return cls(model, ImagePreprocess.from_info(info), info["classes"], test, train,
                   batch_size=batch_size, seed=seed)

    # ------------------------------------------------------------------ reading images
    def features(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """uint8 images (N, C, H, W) -> (penultimate features (N, F) float64, predicted classes (N,))."""
        feats, preds = [], []
        with torch.inference_mode():
            for i in range(0, images.shape[0], self.batch_size):
                x = self.preprocess(images[i:i + self.batch_size].to(self.device))
                f = self.model.pre_logits(x)
                preds.append(self.model.head.fc(f).argmax(-1).cpu())
                feats.append(f.to("cpu", torch.float64))
        return torch.cat(feats), torch.cat(preds)

    def _test_reference(self) -> tuple[Tensor, Tensor, float]:
        if self._reference is None:
            feats, preds = self.features(self.test.images)
            accuracy = float((preds == self.test.labels).double().mean())
            self._reference = (*_moments(feats, "test features"), accuracy)
        return self._reference

    def floor(self, n: int) -> float:
        """The Fréchet distance of n real training images (a seeded draw) against the test set: what a
        perfect generator would score at this sample count."""
        if not 2 <= n <= len(self.train):
            raise ValueError(f"the floor needs 2 to {len(self.train)} images (the judge's train split), got {n}")
        if n not in self._floors:
            pick = torch.randperm(len(self.train), generator=torch.Generator().manual_seed(self.seed))[:n]
            feats, _ = self.features(self.train.images[pick])
            self._floors[n] = frechet_from_moments(*_moments(feats, "train features"), *self._test_reference()[:2])
        return self._floors[n]

    def score(self, images: Tensor, labels: Tensor) -> dict[str, Any]:
        """Class consistency and the Fréchet distance of uint8 images (N, C, H, W) generated for `labels`
        (N,), with the floor at the same N and the judge's accuracy on the real test set."""
        n = self._check(images, labels)
        feats, preds = self.features(images)
        mu_t, cov_t, accuracy = self._test_reference()
        return {"class_consistency": float((preds == labels.cpu()).double().mean()),
                "frechet": frechet_from_moments(*_moments(feats, "generated features"), mu_t, cov_t),
                "frechet_floor": self.floor(n), "judge_accuracy": accuracy, "n": n}

    def _check(self, images: Tensor, labels: Tensor) -> int:
        expected = (self.preprocess.channels, *self.preprocess.image_size)
        if not isinstance(images, Tensor) or images.dtype != torch.uint8 or images.dim() != 4:
            got = (f"a {images.dtype} tensor of shape {tuple(images.shape)}" if isinstance(images, Tensor)
                   else type(images).__name__)
            raise TypeError(f"expected uint8 images (N, C, H, W), got {got}")
        if tuple(images.shape[1:]) != expected:
            raise ValueError(f"expected images of shape (N, {expected[0]}, {expected[1]}, {expected[2]}) "
                             f"for this judge, got {tuple(images.shape)}")
        if not isinstance(labels, Tensor) or labels.dtype != torch.int64 or tuple(labels.shape) != images.shape[:1]:
            got = (f"a {labels.dtype} tensor of shape {tuple(labels.shape)}" if isinstance(labels, Tensor)
                   else type(labels).__name__)
            raise TypeError(f"expected int64 labels ({images.shape[0]},), one per image, got {got}")
        if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < len(self.classes):
            raise ValueError(f"expected labels in 0..{len(self.classes) - 1}, got {int(labels.min())}.."
                             f"{int(labels.max())}")
        if images.shape[0] < 2:
            raise ValueError(f"expected at least 2 images to fit a covariance, got {images.shape[0]}")
        return int(images.shape[0])


def guidance_sweep(generator: torch.nn.Module, info: dict[str, Any], judge_run: str | os.PathLike[str], *,
                   scales: Sequence[float], per_class: int, steps: int, seed: int = 0,
                   amp: str = "none") -> Iterator[dict[str, Any]]:
    """Score a class-conditional generator at each guidance scale: `per_class` samples of every class,
    drawn with `steps` Heun steps under the run's precision `amp`, judged by the classifier run
    `judge_run`. `info` is the generator run's data section. Yields one row of scores per scale, as
    each is ready (the sampling dominates: a row can take minutes)."""
    if per_class < 1:  # before the judge computes its test-set features
        raise ValueError(f"--per-class must be >= 1, got {per_class}")
    judge = Judge.load(judge_run, channels=info["channels"], image_size=tuple(info["image_size"]),
                       classes=info["classes"])
    labels = torch.arange(generator.config.num_classes).repeat_interleave(per_class)
    for w in scales:
        with autocast(amp, torch.device("cpu")):  # the run's precision: bf16 halves this on CPUs that have it
            images = generator.sample(labels, steps=steps, cfg=w, seed=seed)
        yield {"cfg": w, "steps": steps, **judge.score(images, labels)}


def _classifier_info(run: Path) -> dict[str, Any]:
    """The "data" section of an image classifier run's config.json, or one line saying why it is not one."""
    path = run / "config.json"
    if not path.is_file():
        raise ValueError(f"the judge {run} is not a run directory: expected {path} (written by anyformer train)")
    try:  # the family first, read plainly, so that a run of a family this install lacks is named too
        family = json.loads(path.read_text()).get("family")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        family = None
    if family is not None and family != ViT.family:
        raise ValueError(f"the judge {run} is a {family!r} run, not an image classifier (a 'vit' run)")
    meta = read_config(run)
    info = meta.get("data")
    train = meta.get("train") if isinstance(meta.get("train"), dict) else {}
    if (not isinstance(info, dict) or info.get("kind") != "images" or train.get("task", "classify") != "classify"
            or not all(k in info for k in ("classes", "channels", "image_size", "dataset"))):
        raise ValueError(f"the judge {run} is not an image classifier run: its config.json lacks the data section "
                         f"(classes, channels, image_size, dataset) that anyformer train writes for one")
    return info
