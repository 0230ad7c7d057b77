"""TrainConfig's options that shape what a step computes, each pinned by a test that fails when
the library ignores or inverts it (test_every_option.py's OPTION_PINS): the model and its first
weights, the data and its augmentation, the step's chunks, loss, clipping and precision, the
evaluation's chunks, and where and how the step runs (threads, deterministic kernels, device, FSDP)."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file
from torch import nn

from anyformer.data import (random_affine, random_crop_flip, random_elastic, random_erasing, random_resized_crop_flip,
                            random_stroke_width)
from anyformer.train import Trainer
from anyformer.train.batches import epoch_order, step_generator
from anyformer.train.build import TRUNK, build_model
from anyformer.train.classify import crop_pad
from anyformer.train.distributed import Distributed
from anyformer.train.tasks import ImageClassification

from .conftest import make_trainer, torchrun_env
from .option_runs import short

pytestmark = pytest.mark.usefixtures("no_peak_measurement")


# ---------------------------------------------------------------- the model


def test_the_model_is_the_preset_named_with_its_overrides(tmp_path, mnist_slice):
    # vit-mnist-fast has a convolutional stem and width 64; vit-mnist (the default) patches and width 128.
    cfg = short(tmp_path, model="vit-mnist-fast", model_overrides=dict(width=40, depth=1, heads=2, mlp_hidden=80))
    task = ImageClassification(cfg, torch.device("cpu"), *mnist_slice)
    c = build_model(cfg, task).config
    assert (c.stem, c.width, c.depth, c.heads, c.mlp_hidden) == ("conv", 40, 1, 2, 80)


def test_init_from_starts_the_trunk_from_the_runs_weights(tmp_path, mnist_slice):
    make_trainer(short(tmp_path / "a", max_steps=1), mnist_slice).run()
    saved = load_file(tmp_path / "a" / "run" / "model.safetensors")
    started = make_trainer(short(tmp_path / "b", seed=1, init_from=str(tmp_path / "a" / "run")), mnist_slice)
    own = started.model.state_dict()
    trunk = [k for k in saved if k.startswith(TRUNK)]
    head = [k for k in saved if not k.startswith(TRUNK) and saved[k].dim() == 2]
    assert trunk and all(torch.equal(own[k], saved[k]) for k in trunk)
    assert head and not any(torch.equal(own[k], saved[k]) for k in head)  # the classifier head starts fresh


def test_seed_fixes_the_initial_weights_and_the_batch_order(tmp_path, mnist_slice):
    def first(seed):
        t = make_trainer(short(tmp_path / str(seed), seed=seed), mnist_slice)
        return t.model.state_dict(), t.task.batch(0)[0][1]
    (w0, y0), (w5, y5), (again, y5_again) = first(0), first(5), first(5)
    assert all(torch.equal(again[k], w5[k]) for k in w5) and torch.equal(y5, y5_again)
    assert not any(torch.equal(w0[k], w5[k]) for k in w0 if w0[k].dim() == 2)  # every matrix drawn anew
    train_labels = mnist_slice[0].labels[:320]
    assert torch.equal(y5, train_labels[epoch_order(320, 5, 0)[:32]]) and not torch.equal(y0, y5)


# ---------------------------------------------------------------- the data


def test_limits_cut_the_splits_to_their_first_examples(tmp_path, mnist_slice):
    train, test = mnist_slice
    task = ImageClassification(short(tmp_path, limit_train=100, limit_eval=50), torch.device("cpu"), train, test)
    assert torch.equal(task.train.images, train.images[:100]) and torch.equal(task.test.images, test.images[:50])
    assert task.steps_per_epoch == 4  # 100 examples in batches of 32


def _images(root: Path) -> Path:
    """Two classes of four 20x24 pictures each; the split has no test/ (a share is held out)."""
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (20, 24), dtype=np.uint8)).save(root / cls / f"{i}.png")
    return root


def test_image_size_resizes_every_image_loaded(tmp_path):
    data = _images(tmp_path / "pics")
    for size, shape in ((12, (12, 12)), ([10, 14], (10, 14))):
        task = ImageClassification(short(tmp_path, data=str(data), image_size=size, limit_train=None,
                                         limit_eval=None), torch.device("cpu"))
        assert tuple(task.train.images.shape[-2:]) == tuple(task.test.images.shape[-2:]) == shape


def test_augment_transforms_the_batch_as_named(tmp_path, mnist_slice):
    def batch(augment):
        task = ImageClassification(short(tmp_path, augment=augment), torch.device("cpu"), *mnist_slice)
        return task, task.batch(3)[0][0]
    task, plain = batch("none")
    idx = epoch_order(320, 0, 0)[3 * 32:4 * 32]
    assert torch.equal(plain, task.normalise(task.images[idx]))
    _, digits = batch("digits")
    assert torch.equal(digits, random_affine(plain, generator=step_generator(0, 3), fill=task._black))
    _, crop_flip = batch("crop_flip")
    assert torch.equal(crop_flip, random_crop_flip(plain, generator=step_generator(0, 3)))
    strong = ImageClassification(short(tmp_path, augment="digits", augment_strength=2.0), torch.device("cpu"),
                                 *mnist_slice).batch(3)[0][0]
    assert torch.equal(strong, random_affine(plain, max_shift=4 / 28, max_rotate_deg=20.0, scale=(0.8, 1.2),
                                             generator=step_generator(0, 3), fill=task._black))
    none = ImageClassification(short(tmp_path, augment="digits", augment_strength=0.0), torch.device("cpu"),
                               *mnist_slice).batch(3)[0][0]
    torch.testing.assert_close(none, plain, rtol=0, atol=1e-4)  # strength 0: the identity (resampled in float32)
    # The crop's pad scales too: 4 px at strength 1, 2 px at 0.5, and at most the side less one pixel.
    half = ImageClassification(short(tmp_path, augment="crop_flip", augment_strength=0.5), torch.device("cpu"),
                               *mnist_slice).batch(3)[0][0]
    assert torch.equal(half, random_crop_flip(plain, pad=2, generator=step_generator(0, 3)))
    assert not torch.equal(half, crop_flip)
    assert crop_pad(6.9, (16, 20)) == 15 and crop_pad(2.0, (64, 64)) == 8 and crop_pad(0.0, (8, 8)) == 0
    _, resized = batch("resized_crop")
    assert torch.equal(resized, random_resized_crop_flip(plain, generator=step_generator(0, 3)))
    assert not torch.equal(digits, plain) and not torch.equal(crop_flip, plain) and not torch.equal(resized, plain)


def test_random_erasing_erases_the_augmented_batch_with_the_steps_draws(tmp_path, mnist_slice):
    # After the warp, from the same step generator: the digits' warp first, then the erasing's draws.
    batch = functools.partial(_digits_batch, tmp_path, mnist_slice)
    task, warped = batch()
    g = step_generator(0, 3)
    expected = random_erasing(random_affine(_plain_step3(task), generator=g, fill=task._black), 0.5, generator=g)
    _, erased = batch(random_erasing=0.5)
    assert torch.equal(erased, expected) and not torch.equal(erased, warped)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="random_erasing is the chance"):
            short(tmp_path, random_erasing=bad)


def _digits_batch(tmp_path, mnist_slice, **kw) -> tuple[ImageClassification, torch.Tensor]:
    """A digits-augmented task with the options `kw`, and the pictures of its batch at step 3 (seed 0)."""
    task = ImageClassification(short(tmp_path, augment="digits", **kw), torch.device("cpu"), *mnist_slice)
    return task, task.batch(3)[0][0]


def _plain_step3(task: ImageClassification) -> torch.Tensor:
    """Step 3's 32 pictures, normalised and not augmented: the fourth batch of epoch 0's order."""
    return task.normalise(task.images[epoch_order(320, 0, 0)[96:128]])


def test_random_stroke_changes_the_strokes_first_with_the_steps_draws(tmp_path, mnist_slice):
    # Before the warp, from the same step generator: the strokes' draws first, then the digits' warp.
    batch = functools.partial(_digits_batch, tmp_path, mnist_slice)
    task, warped = batch()
    g = step_generator(0, 3)
    plain = _plain_step3(task)
    expected = random_affine(random_stroke_width(plain, 0.5, generator=g), generator=g, fill=task._black)
    _, stroked = batch(random_stroke=0.5)
    assert torch.equal(stroked, expected) and not torch.equal(stroked, warped)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="random_stroke is the chance"):
            short(tmp_path, random_stroke=bad)


def test_random_elastic_bends_the_pictures_after_the_strokes_before_the_warp(tmp_path, mnist_slice):
    # From the same step generator: the strokes' draws, then the elastic field's, then the digits' warp.
    batch = functools.partial(_digits_batch, tmp_path, mnist_slice)
    task, warped = batch()
    g = step_generator(0, 3)
    plain = _plain_step3(task)
    bent = random_elastic(random_stroke_width(plain, 0.5, generator=g), 0.5, generator=g)
    expected = random_affine(bent, generator=g, fill=task._black)
    _, both = batch(random_stroke=0.5, random_elastic=0.5)
    assert torch.equal(both, expected) and not torch.equal(both, warped)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="random_elastic is the chance"):
            short(tmp_path, random_elastic=bad)


def test_grad_accum_splits_the_step_into_that_many_chunks(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, grad_accum=4), mnist_slice)
    real_loss, chunks = trainer.task.loss, []
    trainer.task.loss = lambda model, batch: (chunks.append(len(batch[0])), real_loss(model, batch))[1]
    trainer.train_step()
    assert chunks == [8, 8, 8, 8]


def test_label_smoothing_reaches_the_loss(tmp_path, mnist_slice):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    task = ImageClassification(short(tmp_path, label_smoothing=0.2), torch.device("cpu"), *mnist_slice)
    batch = task.batch(0)[0]
    logits = model(batch[0])
    smoothed = F.cross_entropy(logits, batch[1], label_smoothing=0.2)
    assert torch.equal(task.loss(model, batch)[0], smoothed)
    assert not torch.allclose(smoothed, F.cross_entropy(logits, batch[1]))


def test_grad_clip_caps_the_gradient_norm_the_step_used(tmp_path, mnist_slice):
    def norm_stepped(grad_clip):
        trainer = make_trainer(short(tmp_path / str(grad_clip), grad_clip=grad_clip), mnist_slice)
        seen, real_step = [], trainer.optimizer.step

        def step():
            seen.append(float(torch.linalg.vector_norm(torch.stack(
                [p.grad.norm() for p in trainer.model.parameters() if p.grad is not None]))))
            return real_step()
        trainer.optimizer.step = step
        trainer.train_step()
        return seen[0]
    unclipped = norm_stepped(None)
    assert unclipped > 0.01  # so that the cap below has something to cut
    assert norm_stepped(0.01) == pytest.approx(0.01, rel=1e-4)


def test_sam_steps_from_the_weights_with_the_gradient_taken_again_at_the_ascent_point(tmp_path, mnist_slice):
    """train/sam.py's own tests check the gradient against the definition; here, that the trainer asks for
    it: a second pass of the step's batch, the optimiser handed another gradient at the same weights."""
    def stepped(sam):
        trainer = make_trainer(short(tmp_path / str(sam), sam=sam), mnist_slice)
        passes, real_loss = [], trainer.task.loss
        trainer.task.loss = lambda model, batch: (passes.append(batch[0]), real_loss(model, batch))[1]
        seen, real_step = {}, trainer.optimizer.step
        before = [p.detach().clone() for p in trainer.model.parameters()]

        def step():
            seen["grads"] = [p.grad.clone() for p in trainer.model.parameters()]
            seen["weights"] = [p.detach().clone() for p in trainer.model.parameters()]
            return real_step()
        trainer.optimizer.step = step
        trainer.train_step()
        return passes, seen, before
    plain_passes, plain, start = stepped(0.0)
    sam_passes, sam, sam_start = stepped(0.05)
    assert len(plain_passes) == 1 and len(sam_passes) == 2 and torch.equal(sam_passes[0], sam_passes[1])
    assert all(torch.equal(a, b) for a, b in zip(start, sam_start))
    assert all(torch.equal(a, b) for a, b in zip(sam["weights"], sam_start))  # stepped from the weights
    assert any(not torch.allclose(a, b) for a, b in zip(plain["grads"], sam["grads"]))


def test_amp_bf16_runs_the_step_and_the_evaluation_in_bf16(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, amp="bf16", max_steps=1), mnist_slice)
    dtypes = []
    trainer.model.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    trainer.train_step()
    trainer.task.evaluate(trainer.model, trainer.dist)
    assert len(dtypes) > 1 and set(dtypes) == {torch.bfloat16}


class Recording(nn.Module):
    """A linear classifier of digits that notes the size of each batch it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.sizes = nn.Linear(784, 10), []

    def forward(self, x):
        self.sizes.append(len(x))
        return self.linear(x.flatten(1))


def test_eval_batch_size_is_the_size_of_each_scored_chunk(tmp_path, mnist_slice):
    task = ImageClassification(short(tmp_path, limit_eval=500, eval_batch_size=200), torch.device("cpu"),
                               *mnist_slice)
    model = Recording()
    task.evaluate(model, Distributed())
    assert model.sizes == [200, 200, 100]


# ---------------------------------------------------------------- where and how it runs


def test_threads_sets_torchs_thread_count(tmp_path, mnist_slice):
    before = torch.get_num_threads()
    cfg = short(tmp_path, threads=before + 1)
    try:  # not make_trainer: it sets the threads itself
        Trainer(cfg, task=ImageClassification(cfg, torch.device("cpu"), *mnist_slice))
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


def test_deterministic_turns_on_deterministic_kernels_only_when_asked(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what the option sets; restored after the test
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        make_trainer(short(tmp_path / "free"), mnist_slice)
        assert not torch.are_deterministic_algorithms_enabled()
        make_trainer(short(tmp_path / "fixed", deterministic=True), mnist_slice)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_device_is_the_one_asked_for(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda was asked for, but no CUDA device is available"):
        make_trainer(short(tmp_path, device="cuda"), mnist_slice)
    # Where CUDA is there, `auto` would take it: `cpu` must not.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert make_trainer(short(tmp_path, device="cpu"), mnist_slice).device == torch.device("cpu")


def test_fsdp_shards_the_weights_under_torchrun(tmp_path, mnist_slice, monkeypatch):
    """One process as torchrun starts it (a gloo group of one): FSDP2 holds the weights as sharded
    DTensors, where without --fsdp DDP would hold plain tensors. (No DDP here: its reducer, freed at
    the interpreter's exit, can abort the process with gloo's threads still running.)"""
    from torch.distributed.tensor import DTensor
    torchrun_env(monkeypatch)
    trainer = make_trainer(short(tmp_path, fsdp=True), mnist_slice)
    try:
        assert trainer.dist.enabled and trainer.dist.fsdp
        assert all(isinstance(p, DTensor) for p in trainer.model.parameters())
    finally:
        trainer.dist.close()


def test_an_augment_strength_out_of_range_is_refused():
    from anyformer.train.config import TrainConfig
    for bad in (-0.5, 7.0):
        with pytest.raises(ValueError, match="augment_strength scales the shifts"):
            TrainConfig(augment_strength=bad)
