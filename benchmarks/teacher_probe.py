"""Is a quickly trained CNN a teacher worth distilling from? Its held-out accuracy on one CHOOSE fold, and its time.

Issue 56 names distillation from a quickly trained CNN (DeiT, Touvron et al. 2021) among the small-data
helps. DeiT's student learns from a teacher stronger than itself; a teacher that scores below the
transformer it would teach can only pull it towards the teacher's mistakes. So before any distillation
is built into the trainer, this asks the cheap question first: within the time a run can spare (a run
of a few thousand small images has five minutes on 2 cores, and the transformer already takes most of
it), how good is a CNN built from anyformer's own pieces?

The CNN: `af.nn.ConvStem` (3x3 convolutions, the first of each stage stride 2, BatchNorm and GELU, as
Xiao et al.'s stem) down to a small grid, GELU, the mean over the grid and a linear head. It trains on
exactly the batches the transformer's run would draw (`ImageClassification.batch`: the derived
augmentation and random erasing of a grey folder), AdamW with a warm-up and cosine decay, and is scored
on the fold's held-out images. Only CHOOSE folds (images_select.py's `<work>/<folder>/k<k>/fold<i>`)
are meant here: this informs a choice.

    python benchmarks/teacher_probe.py /tmp/isel26/lowercase/k2/fold0 --image-size 32 --steps 1000 --width 64 --patch 8
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bench_common  # noqa: F401  (puts the repository on the path)
from anyformer.nn.stems import ConvStem
from anyformer.train.classify import ImageClassification
from anyformer.train.config import TrainConfig


class StemCNN(nn.Module):
    """A convolutional stem, pooled over its grid, and a linear head."""

    def __init__(self, in_chans: int, classes: int, width: int, patch: int) -> None:
        super().__init__()
        self.stem = ConvStem(patch, in_chans, width, channels=width, convs=2, norm="batch")
        self.head = nn.Linear(width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(F.gelu(self.stem(x)).mean(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fold", help="a CHOOSE fold: a folder with train/ and test/")
    ap.add_argument("--image-size", type=int, required=True, help="the size the run derives for the folder")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--patch", type=int, default=8, help="the stem's total stride (a power of two)")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--erasing", type=float, default=0.5, help="the grey default's random erasing")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = TrainConfig(data=a.fold, batch_size=64, augment="digits", random_erasing=a.erasing, seed=0,
                      image_size=a.image_size)
    task = ImageClassification(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    model = StemCNN(task.images.shape[1], len(task.train.classes), a.width, a.patch)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.05)
    t0 = time.perf_counter()
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        (x, y), _ = task.batch(step)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        guess = model(task.normalise(task.test.images)).argmax(-1)
    acc = (guess == task.test.labels).float().mean().item()
    params = sum(p.numel() for p in model.parameters())
    print(f"{a.fold}: {params:,} parameters, {a.steps} steps, held-out accuracy {acc:.4f}, "
          f"{seconds:.1f} s of training ({seconds / a.steps * 1000:.1f} ms a step, {a.threads} thread(s))")


if __name__ == "__main__":
    main()
