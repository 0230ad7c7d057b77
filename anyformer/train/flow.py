"""Class-conditional image generation by flow matching (rectified flow, as SiT and minRF train it).

Each step takes a batch of training images x in [-1, 1] with their labels, noise eps and times t
drawn logit-normal (sigmoid of a standard normal: most steps near t = 0.5, where the velocity is
hardest to guess, Esser et al. 2024), and regresses the model's velocity on the straight path:

    x_t = (1 - t) x + t eps;   loss = || v(x_t, t, y) - (eps - x) ||^2   (models/flow.py's convention)

A share of the labels (`label_dropout`) is replaced by the null class, so that the same network
also learns the unconditional velocity that classifier-free guidance needs.

Evaluation: the same loss on held-out test images at fixed, evenly spread times and fixed noise
(the same numbers every evaluation, so the curve shows the model alone), a grid of samples, and
with `judge` set, a classifier's verdict on `judge_samples` generated images.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import ImageDataset
from ..data.images.preprocess import ImagePreprocess
from ..data.transfer import to_device
from ..models.flow import interpolate, velocity_target
from .batches import epoch_order, rank_share, step_generator
from .classify import image_splits
from .config import TrainConfig
from .precision import autocast

GRID_PER_CLASS = 8      # samples.png: one row per class
SAMPLE_STEPS = 10       # Heun steps (20 passes) for the evaluation's samples: enough to judge progress
SAMPLE_CFG = 2.0        # guidance of the evaluation's samples (the run's report; `anyformer eval` scans others)
HELD_OUT_TIMES = 16     # the held-out loss visits t = (k + 0.5) / 16, k = 0..15, in turn over the images
EVAL_SEED = 1234        # the held-out noise and the samples' noise: the same for every run and evaluation


class FlowMatching:
    """Images and labels in memory as uint8; batches, times, noise and dropped labels fixed by (seed, step)."""

    family, unit = "dit", "images"
    pictures = ("samples.png",)
    items_per_example = 1
    draw_each_evaluation = True  # the trainer redraws samples.png at every evaluation (see protocol.py)

    def __init__(self, cfg: TrainConfig, device: torch.device, train: ImageDataset | None = None,
                 test: ImageDataset | None = None, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.train, self.test = image_splits(cfg, train, test)
        _, c, h, w = self.train.images.shape
        # The sampler maps [-1, 1] back to pixels, so a generator always trains on symmetric pixels.
        self.preprocess = ImagePreprocess.from_info(info) if info is not None else ImagePreprocess.symmetric(c, (h, w))
        self.classes = list(self.train.classes)
        self.images = self.train.images.to(device)
        self.labels = self.train.labels.to(device)
        self.steps_per_epoch = math.ceil(len(self.train) / cfg.batch_size)
        self._judge = None

    def model_overrides(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"num_classes": len(self.classes), "in_chans": c, "image_size": [h, w]}

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, ...], int]:
        """(x, y, t, eps): images in [-1, 1], labels (some made the null class), times, noise."""
        epoch, i = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)
        idx = order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = self.preprocess(self.images[idx])
        y = self.labels[idx]
        g = step_generator(self.cfg.seed, step)
        n = len(idx)
        t = torch.sigmoid(torch.randn(n, generator=g))  # logit-normal(0, 1)
        eps = torch.randn(x.shape, generator=g)
        dropped = torch.rand(n, generator=g) < self.cfg.label_dropout
        y = torch.where(to_device(dropped, y.device), torch.full_like(y, len(self.classes)), y)
        share = rank_share(n, rank, world)
        return (x[share], y[share], to_device(t[share], self.device), to_device(eps[share], self.device)), n

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Any]]:
        x, y, t, eps = batch
        v = model(interpolate(x, eps, t), t, y)
        return F.mse_loss(v.float(), velocity_target(x, eps)), {}

    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {}

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        return {}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops()  # forward + backward = 3 x forward (per image)

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def held_out_loss(self, model: nn.Module, dist: Any = None) -> float:
        """The flow loss on the test images at fixed times and noise (each rank its shard)."""
        model.eval()
        n = len(self.test)
        g = torch.Generator().manual_seed(EVAL_SEED)
        noise = torch.randn(n, *self.test.images.shape[1:], generator=g)
        times = (torch.arange(n) % HELD_OUT_TIMES + 0.5) / HELD_OUT_TIMES
        shard = range(n) if dist is None else dist.shard(n)
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for i in range(shard.start, shard.stop, self.cfg.eval_batch_size):
            j = min(i + self.cfg.eval_batch_size, shard.stop)
            x = self.preprocess(self.test.images[i:j].to(self.device))
            eps, t = noise[i:j].to(self.device), times[i:j].to(self.device)
            y = self.test.labels[i:j].to(self.device)
            with autocast(self.cfg.amp, self.device):
                v = model(interpolate(x, eps, t), t, y).float()
            total += F.mse_loss(v, velocity_target(x, eps), reduction="sum").double()
        model.train()
        if dist is not None:
            total = dist.sum(total)
        return float(total) / (n * self.test.images[0].numel())

    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"eval_loss": self.held_out_loss(model, dist)}
        labels = torch.arange(len(self.classes)).repeat_interleave(GRID_PER_CLASS)
        result["samples"] = self._sample(model, labels)
        if self.cfg.judge:
            result.update(self.judge_scores(model))
        return result

    def _sample(self, model: nn.Module, labels: Tensor) -> Tensor:
        with autocast(self.cfg.amp, self.device):  # bf16 where training found it faster: sampling is most of an evaluation
            return model.sample(labels, steps=SAMPLE_STEPS, cfg=SAMPLE_CFG, seed=EVAL_SEED)

    def judge_scores(self, model: nn.Module) -> dict[str, float]:
        """`judge_samples` images spread evenly over the classes, scored by the classifier run `judge`:
        class consistency, Fréchet distance of its features and the real-vs-real floor."""
        from .judge import Judge  # another module of this floor, loaded only when a judge is asked for
        if self._judge is None:
            _, c, h, w = self.train.images.shape
            self._judge = Judge.load(self.cfg.judge, channels=c, image_size=(h, w), classes=self.classes)
        labels = torch.arange(self.cfg.judge_samples) % len(self.classes)
        scores = self._judge.score(self._sample(model, labels), labels)
        return {("judge_n" if k == "n" else k): v for k, v in scores.items()}

    def eval_text(self, line: dict[str, Any]) -> str:
        text = f"held-out flow loss {line['eval_loss']:.4f}"
        if "class_consistency" in line:
            text += (f"  class consistency {line['class_consistency']:.3f}  Fréchet {line['frechet']:.2f} "
                     f"(floor {line['frechet_floor']:.2f})")
        return text

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        fields = {"test_flow_loss": line["eval_loss"]} if "eval_loss" in line else {}
        judged = ("class_consistency", "frechet", "frechet_floor", "judge_accuracy", "judge_n")
        return {**fields, **{k: line[k] for k in judged if k in line}}

    def final_line(self, summary: dict[str, Any]) -> str:
        judged = (f", class consistency {summary['class_consistency']:.3f}, Fréchet {summary['frechet']:.2f} "
                  f"(floor {summary['frechet_floor']:.2f})") if "class_consistency" in summary else ""
        return (f"held-out flow loss {summary['test_flow_loss']:.4f}{judged} after {summary['steps']} steps "
                f"in {summary['train_seconds']:.0f}s of training ({summary['images_per_s']:.0f} images/s)")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """samples.png: the evaluation's samples, one row per class."""
        from ..viz.grid import save_grid
        save_grid(result["samples"], len(self.classes), run_dir / "samples.png")

    def run_info(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"kind": "images", "generator": "flow", "dataset": self.cfg.data, "classes": self.classes,
                "channels": c, "image_size": [h, w], "mean": self.preprocess.mean, "std": self.preprocess.std,
                "train_examples": len(self.train), "test_examples": len(self.test),
                "preprocess": self.preprocess.to_dict()}


