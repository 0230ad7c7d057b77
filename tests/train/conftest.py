import contextlib
import os
import signal
import socket

import pytest
import torch

from anyformer.data import load_image_dataset
from anyformer.train import TrainConfig
from anyformer.train.distributed import Distributed

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
    """A tiny ViT run on the MNIST slice. No pictures unless asked (plots=True): drawing them took
    1-3 s a run, more than many of these runs train."""
    values = dict(recipe="test", model="vit-mnist", model_overrides=dict(TINY), data="mnist",
                  out=str(tmp_path / "run"), batch_size=32, lr=3e-3, warmup_steps=5, limit_train=2000,
                  limit_eval=500, progress=False, weight_decay=0.05, threads=1, plots=False)
    values.update(kw)
    return TrainConfig(**values)


def make_trainer(cfg, mnist_slice, task_class=None):
    """A Trainer on the real MNIST slice; `task_class` (default ImageClassification) builds the task."""
    from anyformer.train import Trainer
    from anyformer.train.tasks import ImageClassification
    train, test = mnist_slice
    if cfg.threads:  # as the Trainer will: the dataset's mean and std, parallel sums, differ in the last
        torch.set_num_threads(cfg.threads)  # bit between thread counts, and so would the whole first run
    return Trainer(cfg, task=(task_class or ImageClassification)(cfg, torch.device("cpu"), train, test))


@pytest.fixture
def trainer(tmp_path, mnist_slice):
    """A tiny trainer on the MNIST slice, nothing run yet (the trainer's unit tests, test_trainer_*.py):
    2,000 examples in batches of 32, so 63 steps an epoch and 126 steps asked."""
    return make_trainer(tiny_config(tmp_path, epochs=2), mnist_slice)


@pytest.fixture
def no_peak_measurement(monkeypatch):
    """The summary's MFU divides by the measured matmul rate, about a second per run on a CPU; the
    tests that ask for this (test_every_option_*.py) never read it."""
    from anyformer.train import perf
    monkeypatch.setattr(perf, "peak_flops", lambda device, amp="none": (1e12, "test"))


def interrupt_at(trainer, step: int) -> None:
    """Send this process SIGTERM right after `step`: the step ends and a checkpoint is written."""
    real = trainer.train_step

    def stepper():
        loss = real()
        if trainer.step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss
    trainer.train_step = stepper


def assert_same_weights(a, b) -> None:
    """Every tensor of two run directories' model.safetensors bit for bit: the same names in both
    (a key only one file has fails), and every one of them equal."""
    from safetensors.torch import load_file
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa, f"{a / 'model.safetensors'} holds no tensors"
    assert sorted(wa) == sorted(wb), f"keys differ: {sorted(set(wa) ^ set(wb))}"
    differ = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not differ, f"tensors differ: {differ}"


def assert_same_checkpoints(a, b) -> None:
    """The last checkpoints of two run directories hold the same model and optimiser state: every
    key at every depth, every tensor bit for bit (resuming from either continues the same way)."""
    from anyformer.train.checkpoint import list_checkpoints, load_checkpoint
    ca, cb = list_checkpoints(a)[-1], list_checkpoints(b)[-1]
    assert ca.name == cb.name
    sa, sb = load_checkpoint(ca), load_checkpoint(cb)

    def same(x, y, where):
        # A resumed optimiser holds its betas as a list where a fresh one has a tuple: same numbers.
        assert type(x) is type(y) or {type(x), type(y)} == {list, tuple}, where
        if isinstance(x, dict):
            assert sorted(map(str, x)) == sorted(map(str, y)), f"{where}: keys {sorted(map(str, set(x) ^ set(y)))}"
            for k in x:
                same(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y)):
                same(u, v, f"{where}[{i}]")
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y), where
        else:
            assert x == y, where
    for key in ("step", "model", "optimizer", "model_config", "rng", "metrics_lines"):
        same(sa[key], sb[key], key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(monkeypatch, local_world: int = 1, restarts: int = 0) -> None:
    """This process as torchrun starts rank 0 of `local_world` local ranks, after `restarts` restarts:
    a gloo group of one, the other local ranks only counted."""
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(local_world),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                            TORCHELASTIC_RESTART_COUNT=str(restarts)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)


class StandInRank(Distributed):
    """Rank `rank` of a group of `world` stood in for without a process group, answering as the
    collectives would: `sum` adds what the other ranks send (`others`, a number or a tensor shaped
    like the sum) to this rank's value; `broadcast` gives rank 0 its own object back and another rank
    `from_rank0`'s objects in turn (None: the one it sent, as for the settings every rank shares);
    `all_gather` has every rank send this rank's object. What it sums and sends is recorded, and so
    are the gradient syncs asked of it (no DDP wrapper here holds the gradients back)."""

    def __init__(self, rank: int, world: int, *, fsdp: bool = False, others=0.0, from_rank0=()) -> None:
        super().__init__(rank=rank, world=world, device=torch.device("cpu"), fsdp=fsdp, joined=True)
        self.others, self.from_rank0 = others, list(from_rank0)
        self.summed: list = []
        self.sent: list = []
        self.held: list = []

    def sum(self, t):
        self.summed.append(t.clone())
        return t + self.others

    def broadcast(self, obj):
        self.sent.append(obj)
        reply = obj if self.rank == 0 else self.from_rank0.pop(0)
        return obj if reply is None else reply

    def all_gather(self, obj):
        return [obj] * self.world

    def wrap(self, model):
        return model

    def grad_sync(self, model, sync: bool):
        self.held.append((model, sync))
        return contextlib.nullcontext()
