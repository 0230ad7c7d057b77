import os
import signal

import pytest
import torch

from anyformer.data import load_image_dataset
from anyformer.train import TrainConfig

# Patch 7 (16 tokens) and width 48: small enough for seconds per run, big enough to learn visibly.
TINY = dict(width=48, depth=2, heads=4, mlp_hidden=96, head_hidden=None, patch_size=7, final_norm=True)


@pytest.fixture(scope="session")
def mnist_slice(tmp_path_factory):
    """2,000 real MNIST training digits and 500 test digits, read from the shared IDX files."""
    from tests.conftest import SHARED_DATA
    cache = tmp_path_factory.mktemp("cache")
    train = load_image_dataset(str(SHARED_DATA / "mnist"), "train", cache_dir=str(cache))
    test = load_image_dataset(str(SHARED_DATA / "mnist"), "test", cache_dir=str(cache))
    return train, test


def tiny_config(tmp_path, **kw) -> TrainConfig:
    values = dict(recipe="test", model="vit-mnist", model_overrides=dict(TINY), data="mnist",
                  out=str(tmp_path / "run"), batch_size=32, lr=3e-3, warmup_steps=5, limit_train=2000,
                  limit_eval=500, progress=False, weight_decay=0.05, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def make_trainer(cfg, mnist_slice):
    from anyformer.train import Trainer
    from anyformer.train.tasks import ImageClassification
    train, test = mnist_slice
    return Trainer(cfg, task=ImageClassification(cfg, torch.device("cpu"), train, test))


def interrupt_at(trainer, step: int) -> None:
    """Send this process SIGTERM right after `step`: the step ends and a checkpoint is written."""
    real = trainer.train_step

    def stepper():
        loss = real()
        if trainer.step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss
    trainer.train_step = stepper
