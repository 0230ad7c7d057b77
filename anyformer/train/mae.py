"""Masked autoencoding: images without labels, 75% of each image's patches hidden at random, the
loss the squared error on the hidden patches; evaluated on the test images with fixed masks, and a
picture of masked inputs, reconstructions and originals drawn at the end of the run."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data.transfer import to_device
from ..models import PRESETS, MAEConfig
from ..models.base import config_from_dict
from .batches import epoch_order, rank_share, step_generator
from .classify import ImageClassification
from .precision import autocast

EVAL_MASK_SEED = 1234  # the test set's masks: the same for every evaluation of every run
NOISE_SALT = 1         # a step's masks come from their own stream, apart from augmentation's


class MaskedAutoencoding(ImageClassification):
    """The images (and their preprocessing) of image classification; the labels are not used."""

    family, unit = "mae", "images"
    pictures = ("reconstruction.png",)

    def model_overrides(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"in_chans": c, "image_size": [h, w]}

    def _num_patches(self) -> int:
        """Patches per image of the model this run builds (the masks' width); known before it is built."""
        values = {**PRESETS[self.cfg.model][1], **self.cfg.model_overrides, **self.model_overrides()}
        return config_from_dict(MAEConfig, values).num_patches

    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)
        idx = order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = self.normalise(self.images[idx])
        # Drawn for the whole global batch, then shared out: the masks do not depend on the ranks.
        noise = torch.rand(len(idx), self._num_patches(), generator=step_generator(self.cfg.seed, step, NOISE_SALT))
        share = rank_share(len(idx), rank, world)
        return (x[share], to_device(noise[share], self.device)), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        x, noise = batch
        return model(x, noise), {}

    def train_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {}

    def progress_fields(self, sums: dict[str, float]) -> dict[str, str]:
        return {}

    def _eval_noise(self, n: int, patches: int) -> Tensor:
        return torch.rand(n, patches, generator=torch.Generator().manual_seed(EVAL_MASK_SEED))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Mean squared error over the hidden patches of the test images, each with its fixed mask."""
        model.eval()
        noise = self._eval_noise(len(self.test), model.config.num_patches)
        errors = torch.zeros((), dtype=torch.float64, device=self.device)
        hidden = torch.zeros((), dtype=torch.float64, device=self.device)
        shard = dist.shard(len(self.test))
        for i in range(shard.start, shard.stop, self.cfg.eval_batch_size):
            j = min(i + self.cfg.eval_batch_size, shard.stop)
            with autocast(self.cfg.amp, self.device):
                err, mask = model.patch_errors(self.normalise(self.test.images[i:j]), noise[i:j].to(self.device))
            errors += err.double().sum()
            hidden += mask.sum()
        model.train()
        errors, hidden = float(dist.sum(errors)), float(dist.sum(hidden))
        return {"eval_loss": errors / max(hidden, 1.0)}

    def eval_text(self, line: dict[str, Any]) -> str:
        return f"test masked-patch mse {line['eval_loss']:.4f}"

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"test_masked_mse": line["eval_loss"]} if "eval_loss" in line else {}

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"test masked-patch mse {summary['test_masked_mse']:.4f} after {summary['epochs']} epochs "
                f"in {summary['train_seconds']:.0f}s of training ({summary['images_per_s']:.0f} images/s)")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """reconstruction.png: 8 test images, each with the mask its evaluation used."""
        from ..viz.reconstruction import plot_reconstruction  # matplotlib only when a run ends
        device = next(model.parameters()).device
        images = self.normalise(self.test.images[:8]).to(device)
        noise = self._eval_noise(len(images), model.config.num_patches).to(device)
        grey = torch.full((self.test.images.shape[1], 1, 1), 128, dtype=torch.uint8)
        fill = float(self.preprocess(grey).mean())  # hidden patches drawn mid-grey, apart from black ink
        was_training = model.training
        model.eval()
        rows = model.reconstruct(images, noise, fill=fill)
        model.train(was_training)
        mean = torch.tensor(self.preprocess.mean).view(1, -1, 1, 1)
        std = torch.tensor(self.preprocess.std).view(1, -1, 1, 1)
        pixels = [(r.cpu() * std + mean).clamp(0, 1) for r in rows]
        plot_reconstruction(*pixels, run_dir / "reconstruction.png")
