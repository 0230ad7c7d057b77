"""What is being learned: batches, the loss, and the evaluation. The trainer loop is shared."""
from __future__ import annotations

import math
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import ImageDataset, load_image_dataset, random_affine, random_crop_flip
from .config import TrainConfig
from .perf import resolve_amp


class Task(Protocol):
    family: str                 # the model family it trains
    unit: str                   # "images" or "tokens", for throughput
    steps_per_epoch: int

    def model_overrides(self) -> dict[str, Any]: ...
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        """This rank's share of the step's global batch, and the global batch's size."""
    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, float]]: ...
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]: ...
    def run_info(self) -> dict[str, Any]: ...


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """Randomness of one step derived from (seed, step): a resumed run draws exactly the same."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + salt) % (2 ** 63))


def epoch_order(n: int, seed: int, epoch: int) -> Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 10_007 + epoch))


class ImageClassification:
    """Images in memory as uint8; each step slices a shuffled batch, normalises and augments it."""

    family, unit = "vit", "images"

    def __init__(self, cfg: TrainConfig, device: torch.device,
                 train: ImageDataset | None = None, test: ImageDataset | None = None) -> None:
        self.cfg, self.device = cfg, device
        # `is None`, not `or`: an empty dataset given by the caller must be refused, not replaced.
        self.train = load_image_dataset(cfg.data, "train") if train is None else train
        self.test = load_image_dataset(cfg.data, "test") if test is None else test
        if cfg.limit_train:
            self.train = _head(self.train, cfg.limit_train)
        if cfg.limit_eval:
            self.test = _head(self.test, cfg.limit_eval)
        if len(self.train) == 0 or len(self.test) == 0:
            raise ValueError(f"dataset {cfg.data!r} has no examples in its train or test split "
                             f"({len(self.train)} train, {len(self.test)} test)")
        if self.train.images.shape[1:] != self.test.images.shape[1:]:
            raise ValueError(f"train and test images differ in shape: {tuple(self.train.images.shape[1:])} "
                             f"vs {tuple(self.test.images.shape[1:])}")
        if cfg.normalize == "symmetric":  # seed 000: pixels scaled to [-1, 1]
            c = self.train.images.shape[1]
            self.mean, self.std = [0.5] * c, [0.5] * c
        else:
            x = self.train.images.float().div_(255)
            self.mean = x.mean(dim=(0, 2, 3)).tolist()
            self.std = x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist()
        self._mean = torch.tensor(self.mean, device=device).view(1, -1, 1, 1) * 255
        self._inv_std = 1 / (torch.tensor(self.std, device=device).view(1, -1, 1, 1) * 255)
        self.images = self.train.images.to(device)
        self.labels = self.train.labels.to(device)
        self.steps_per_epoch = math.ceil(len(self.train) / cfg.batch_size)

    def model_overrides(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"num_classes": len(self.train.classes), "in_chans": c, "image_size": [h, w]}

    def normalise(self, images: Tensor) -> Tensor:
        return (images.to(self.device, torch.float32) - self._mean) * self._inv_std

    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), self.cfg.seed, epoch)
        idx = order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = self.normalise(self.images[idx])
        g = step_generator(self.cfg.seed, step)
        if self.cfg.augment == "digits":
            x = random_affine(x, generator=g, fill=float(-self._mean.flatten()[0] * self._inv_std.flatten()[0]))
        elif self.cfg.augment == "crop_flip":
            x = random_crop_flip(x, generator=g)
        y = self.labels[idx]
        # Every rank draws the same global batch, then keeps its own contiguous share.
        share = math.ceil(len(idx) / world)
        return (x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, float]]:
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.cfg.label_smoothing)
        return loss, {"correct": (logits.argmax(-1) == y).sum(), "count": y.numel()}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Each rank scores its shard of the test set; the sums are added across ranks."""
        model.eval()
        k = len(self.test.classes)
        confusion = torch.zeros(k, k, dtype=torch.long, device=self.device)
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        shard = dist.shard(len(self.test))
        for i in range(shard.start, shard.stop, self.cfg.eval_batch_size):
            j = min(i + self.cfg.eval_batch_size, shard.stop)
            x = self.normalise(self.test.images[i:j])
            y = self.test.labels[i:j].to(self.device)
            with autocast(self.cfg.amp, self.device):
                logits = model(x).float()
            total_loss += F.cross_entropy(logits, y, reduction="sum").double()
            confusion += torch.bincount(y * k + logits.argmax(-1), minlength=k * k).view(k, k)
        model.train()
        confusion, total_loss = dist.sum(confusion).cpu(), float(dist.sum(total_loss))
        n = int(confusion.sum())
        return {"eval_loss": total_loss / n, "eval_accuracy": float(confusion.diag().sum()) / n,
                "confusion": confusion.numpy()}

    def run_info(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"kind": "images", "dataset": self.cfg.data, "classes": self.train.classes,
                "channels": c, "image_size": [h, w], "mean": self.mean, "std": self.std,
                "train_examples": len(self.train), "test_examples": len(self.test)}

    def sample_images(self, n: int) -> tuple[Tensor, Tensor, Tensor]:
        """The first n test images: raw uint8, normalised, and labels (for attention.png)."""
        raw = self.test.images[:n]
        return raw, self.normalise(raw), self.test.labels[:n]


def _head(ds: ImageDataset, n: int) -> ImageDataset:
    return ImageDataset(ds.images[:n], ds.labels[:n], ds.classes, ds.name)


def autocast(amp: str, device: torch.device):
    amp = resolve_amp(amp, device)
    if amp == "none":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


def make_task(cfg: TrainConfig, device: torch.device) -> Task:
    if cfg.task == "classify":
        return ImageClassification(cfg, device)
    from .lm import LanguageModelling  # written for text; imported only when asked for
    return LanguageModelling(cfg, device)

