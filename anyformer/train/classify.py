"""Image classification: labelled images in memory as uint8, a cross-entropy loss, accuracy, and a
confusion matrix and attention maps drawn at the end of the run."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import ImageDataset, load_image_dataset, random_affine, random_crop_flip
from ..data.preprocess import ImagePreprocess
from .batches import epoch_order, rank_share, step_generator
from .config import TrainConfig
from .scoring import ClassifierReport, score_classifier


class ImageClassification(ClassifierReport):
    """Each step slices a shuffled batch, normalises it on the device and augments it."""

    family, unit = "vit", "images"
    pictures = ("confusion.png", "attention.png")
    items_per_example = 1

    def __init__(self, cfg: TrainConfig, device: torch.device, train: ImageDataset | None = None,
                 test: ImageDataset | None = None, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.train, self.test = image_splits(cfg, train, test)
        # A finished run is scored with the statistics it was trained with, whatever part of the
        # training split is loaded now (`anyformer eval` loads one example of it).
        if cfg.normalize == "series":
            raise ValueError("normalize='series' standardises each time series by itself; images take 'dataset' "
                             "or 'symmetric'")
        if info is not None:
            self.preprocess = ImagePreprocess.from_info(info)
        elif cfg.normalize == "symmetric":  # pixels scaled to [-1, 1], as Turner's (2023) MNIST ViT trains
            _, c, h, w = self.train.images.shape
            self.preprocess = ImagePreprocess.symmetric(c, (h, w), self.train.images)
        else:
            self.preprocess = ImagePreprocess.from_images(self.train.images)
        # Corners that a warp brings in are filled with what a black pixel becomes.
        black = torch.zeros(self.train.images.shape[1], 1, 1, dtype=torch.uint8)
        self._black = float(self.preprocess(black)[0, 0, 0])
        if cfg.label_fraction is not None and info is None:  # a finished run is scored on its test split alone
            # After the statistics: every training image is there, only labels are scarce (and an MAE saw them all).
            self.train = balanced_subset(self.train, cfg.label_fraction, cfg.seed)
        self.images = self.train.images.to(device)
        self.labels = self.train.labels.to(device)
        self.steps_per_epoch = math.ceil(len(self.train) / cfg.batch_size)

    def model_overrides(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"num_classes": len(self.train.classes), "in_chans": c, "image_size": [h, w]}

    def normalise(self, images: Tensor) -> Tensor:
        return self.preprocess(images.to(self.device))

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)
        idx = order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = self.normalise(self.images[idx])
        g = step_generator(self.cfg.seed, step)
        if self.cfg.augment == "digits":
            x = random_affine(x, generator=g, fill=self._black)
        elif self.cfg.augment == "crop_flip":
            x = random_crop_flip(x, generator=g)
        share = rank_share(len(idx), rank, world)
        return (x[share], self.labels[idx][share]), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.cfg.label_smoothing)
        return loss, {"correct": (logits.argmax(-1) == y).sum(), "count": y.numel()}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops()  # forward + backward = 3 x forward (per image)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Each rank scores its shard of the test set; the sums are added across ranks."""
        model.eval()
        result = score_classifier(lambda i, j: model(self.normalise(self.test.images[i:j])), self.test.labels, len(self.test.classes), dist,
                                  self.cfg.eval_batch_size, self.cfg.amp, self.device)
        model.train()
        return result

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"{self.accuracy_words(summary)} after {summary['epochs']} epochs "
                f"in {summary['train_seconds']:.0f}s of training ({summary['images_per_s']:.0f} images/s)")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """confusion.png, and attention.png: where the model looks in the first 8 test images."""
        from ..viz import plot_confusion, plot_digit_attention  # matplotlib only when a run ends
        plot_confusion(result["confusion"], self.test.classes, run_dir / "confusion.png")
        device = next(model.parameters()).device
        images = self.normalise(self.test.images[:8]).to(device)
        plot_digit_attention(model, images, self.test.labels[:8], self.test.classes, run_dir / "attention.png")

    def run_info(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"kind": "images", "dataset": self.cfg.data, "classes": self.train.classes,
                "channels": c, "image_size": [h, w], "mean": self.preprocess.mean, "std": self.preprocess.std,
                "train_examples": len(self.train), "test_examples": len(self.test),
                "preprocess": self.preprocess.to_dict()}


def image_splits(cfg: TrainConfig, train: ImageDataset | None = None,
                 test: ImageDataset | None = None) -> tuple[ImageDataset, ImageDataset]:
    """The train and test splits of `cfg.data` (or those given), cut to `limit_train`/`limit_eval`,
    refused in one line when either is empty or their image shapes differ. Image tasks share it."""
    # `is None`, not `or`: an empty dataset given by the caller must be refused, not replaced.
    train = load_image_dataset(cfg.data, "train") if train is None else train
    test = load_image_dataset(cfg.data, "test") if test is None else test
    if cfg.limit_train:
        train = _head(train, cfg.limit_train)
    if cfg.limit_eval:
        test = _head(test, cfg.limit_eval)
    if len(train) == 0 or len(test) == 0:
        raise ValueError(f"dataset {cfg.data!r} has no examples in its train or test split "
                         f"({len(train)} train, {len(test)} test)")
    if train.images.shape[1:] != test.images.shape[1:]:
        raise ValueError(f"train and test images differ in shape: {tuple(train.images.shape[1:])} "
                         f"vs {tuple(test.images.shape[1:])}")
    return train, test


def _head(ds: ImageDataset, n: int) -> ImageDataset:
    return ImageDataset(ds.images[:n], ds.labels[:n], ds.classes, ds.name)


def balanced_subset(ds: ImageDataset, fraction: float, seed: int) -> ImageDataset:
    """`fraction` of the examples, the same number from every class (0.01 of MNIST: 60 of each digit),
    drawn by `seed` alone: a fine-tune and its from-scratch baseline with one seed see the same images."""
    k = len(ds.classes)
    per_class = round(fraction * len(ds) / k)
    if per_class < 1:
        raise ValueError(f"label_fraction {fraction} of {len(ds)} examples leaves no example of each of the "
                         f"{k} classes; expected at least {k / len(ds):.2g}")
    g = torch.Generator().manual_seed(seed)
    picked = []
    for c in range(k):
        members = (ds.labels == c).nonzero().flatten()
        if len(members) < per_class:
            raise ValueError(f"label_fraction {fraction} needs {per_class} examples of class {ds.classes[c]!r}, "
                             f"but the training split has {len(members)}")
        picked.append(members[torch.randperm(len(members), generator=g)[:per_class]])
    idx = torch.cat(picked).sort().values  # in the split's order; each epoch shuffles anyway
    return ImageDataset(ds.images[idx], ds.labels[idx], ds.classes, ds.name)
