"""Unit tests of FlowMatching (train/flow.py) on small hand-made image sets and tiny fake models:
each value is computed again here in closed form (no Trainer, no real network, well under a second)."""
import math
import sys
import types

import numpy as np
import pytest
import torch
from torch import nn

from anyformer.data import ImageDataset
from anyformer.data.images.preprocess import ImagePreprocess
from anyformer.train import TrainConfig
from anyformer.train.batches import step_generator
from anyformer.train.flow import FlowMatching

CLASSES = ["ant", "bee", "cat"]  # 3 classes: the null class is index 3
C, H, W = 3, 5, 6                # RGB, neither square nor a channel count equal to a side


def toy_set(n: int, seed: int, name: str = "toy") -> ImageDataset:
    """n random RGB images of 5x6 with labels in 0..2; every set holds a black and a white pixel."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, C, H, W), generator=g, dtype=torch.uint8)
    images[0, 0, 0, 0], images[0, 1, 2, 3] = 0, 255
    labels = torch.randint(0, len(CLASSES), (n,), generator=g)
    return ImageDataset(images, labels, list(CLASSES), name)


def toy_config(tmp_path, **kw) -> TrainConfig:
    """`data` names nothing on disk: the task must use the splits it is given, never load its own."""
    values = dict(recipe="test", task="flow", model="dit-mnist", data=str(tmp_path / "no-such-data"),
                  out=str(tmp_path / "run"), batch_size=8, seed=7, label_dropout=0.3, eval_batch_size=3,
                  progress=False, plots=False)
    values.update(kw)
    return TrainConfig(**values)


def toy_task(tmp_path, n_train=21, n_test=11, device="cpu", info=None, **kw) -> FlowMatching:
    return FlowMatching(toy_config(tmp_path, **kw), torch.device(device), toy_set(n_train, 1), toy_set(n_test, 2),
                        info=info)


def symmetric(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to [-1, 1], written out: (p - 127.5) / 127.5."""
    return (images.double() - 127.5) / 127.5


class Velocity(nn.Module):
    """v = a x_t + b t + c y per pixel (float32), recording its inputs; `sample` records its call."""

    def __init__(self, a=0.7, b=-1.3, c=0.25):
        super().__init__()
        self.a, self.b, self.c = a, b, c
        self.calls, self.samples = [], []

    def forward(self, x_t, t, y):
        self.calls.append((x_t.clone(), t.clone(), y.clone(), self.training))
        view = (-1, 1, 1, 1)
        return (self.a * x_t + self.b * t.view(view) + self.c * y.view(view).float()).float()

    def expected(self, x_t, t, y):
        view = (-1, 1, 1, 1)
        return self.a * x_t + self.b * t.view(view).double() + self.c * y.view(view).double()

    def sample(self, labels, *, steps, cfg, seed):
        self.samples.append(dict(labels=labels.clone(), steps=steps, cfg=cfg, seed=seed,
                                 autocast=torch.is_autocast_enabled("cpu"),
                                 dtype=torch.get_autocast_dtype("cpu")))
        g = torch.Generator().manual_seed(len(labels))
        return torch.randint(0, 256, (len(labels), C, H, W), generator=g, dtype=torch.uint8)


class FakeDist:
    """Rank 1 of a pretend run: scores test examples 2..8 and adds 5.0 from the other ranks."""
    extra = 5.0

    def shard(self, n):
        return range(2, min(9, n))

    def sum(self, total):
        return total + self.extra


# ------------------------------------------------------------------------------- construction
def test_the_given_splits_are_used_and_kept_on_the_task_device(tmp_path):
    """__init__: train and test are the datasets passed (cfg.data is never read), the training images
    and labels go to the task's device (meta here), steps_per_epoch = ceil(21 / 8) = 3."""
    train, test = toy_set(21, 1), toy_set(11, 2)
    task = FlowMatching(toy_config(tmp_path), torch.device("meta"), train, test)
    assert torch.equal(task.train.images, train.images) and torch.equal(task.train.labels, train.labels)
    assert torch.equal(task.test.images, test.images) and torch.equal(task.test.labels, test.labels)
    assert task.images.device.type == "meta" and task.labels.device.type == "meta"
    assert task.images.shape == (21, C, H, W) and task.labels.shape == (21,)
    assert task.steps_per_epoch == 3 and task.classes == CLASSES and task._judge is None


def test_preprocessing_is_symmetric_unless_a_run_info_gives_it(tmp_path):
    """Without info: mean = std = 0.5 per channel, no framing or statistics. With a finished run's
    info, its own preprocessing (its mean and std) is taken as saved."""
    task = toy_task(tmp_path)
    assert task.preprocess.to_dict() == {"kind": "image", "mean": [0.5] * C, "std": [0.5] * C, "channels": C,
                                         "image_size": [H, W], "framing": None, "stats": None}
    saved = ImagePreprocess([0.2, 0.35, 0.6], [0.15, 0.4, 0.25], C, (H, W))
    info = {"classes": list(CLASSES), "channels": C, "image_size": [H, W], "preprocess": saved.to_dict()}
    again = toy_task(tmp_path, info=info)
    assert again.preprocess.mean == [0.2, 0.35, 0.6] and again.preprocess.std == [0.15, 0.4, 0.25]


def test_model_overrides_give_classes_channels_and_size(tmp_path):
    """num_classes, in_chans and image_size [H, W] of the training images."""
    assert toy_task(tmp_path).model_overrides() == {"num_classes": 3, "in_chans": C, "image_size": [H, W]}


# ------------------------------------------------------------------------------- batches
def draws(seed, step, n):
    """The step's randomness as the docstring defines it: t = sigmoid(N(0, 1)), eps ~ N(0, 1), drop draws U(0, 1)."""
    g = step_generator(seed, step)
    t = torch.sigmoid(torch.randn(n, generator=g))
    eps = torch.randn(n, C, H, W, generator=g)
    return t, eps, torch.rand(n, generator=g)


def epoch_indices(n, seed, epoch):
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 10_007 + epoch))


def test_a_batch_is_its_images_times_noise_and_labels_dropped_below_the_threshold(tmp_path):
    """Step 4 of 3 per epoch: epoch 1's second slice of 8. x in [-1, 1]; t, eps from (seed, step); a label
    becomes the null class (3) where its draw is strictly below label_dropout (set to one of the draws,
    so that draw itself keeps its label)."""
    t, eps, u = draws(7, 4, 8)
    k = int(u.argsort()[4])  # about half the draws are below it
    task = toy_task(tmp_path, label_dropout=float(u[k]))
    (x, y, tt, ee), n = task.batch(4)  # rank and world left at their defaults: the whole batch
    idx = epoch_indices(21, 7, 1)[8:16]
    assert n == 8 and x.shape == (8, C, H, W) and y.shape == (8,) and tt.shape == (8,) and ee.shape == (8, C, H, W)
    torch.testing.assert_close(x.double(), symmetric(task.train.images[idx]), rtol=0, atol=1e-6)
    assert torch.equal(tt, t) and torch.equal(ee, eps)
    dropped = u < u[k]
    assert 2 <= int(dropped.sum()) <= 6 and not dropped[k]
    assert torch.equal(y, torch.where(dropped, torch.tensor(3), task.train.labels[idx]))
    # The whole training set spans [-1, 1] exactly (image 0 holds a black and a white pixel).
    whole = [task.batch(s)[0][0] for s in range(3)]
    assert min(float(b.min()) for b in whole) == -1.0 and max(float(b.max()) for b in whole) == 1.0


def test_the_last_slice_of_an_epoch_is_short(tmp_path):
    """Step 2: images 16..20 of epoch 0, five of them, with five times and five noises."""
    task = toy_task(tmp_path, label_dropout=0.0)
    (x, y, t, eps), n = task.batch(2)
    idx = epoch_indices(21, 7, 0)[16:]
    tt, ee, _ = draws(7, 2, 5)
    assert n == 5 and torch.equal(y, task.train.labels[idx]) and torch.equal(t, tt) and torch.equal(eps, ee)
    torch.testing.assert_close(x.double(), symmetric(task.train.images[idx]), rtol=0, atol=1e-6)


def test_each_rank_keeps_its_contiguous_share_of_the_global_batch(tmp_path):
    """World 3, batch 8: shares of ceil(8/3) = 3, i.e. 0:3, 3:6, 6:8; each rank reports the global 8."""
    task = toy_task(tmp_path, label_dropout=0.45)
    whole, n = task.batch(4)
    assert n == 8
    for rank, part in enumerate((slice(0, 3), slice(3, 6), slice(6, 8))):
        mine, m = task.batch(4, rank=rank, world=3)
        assert m == 8
        for a, b in zip(mine, whole):
            assert torch.equal(a, b[part])


# ------------------------------------------------------------------------------- loss and cost
def test_loss_is_the_mean_squared_velocity_error_on_the_straight_path(tmp_path):
    """The model sees x_t = (1 - t) x + t eps, t and y; the loss is mean((v - (eps - x))^2) of v in float."""
    task = toy_task(tmp_path)
    g = torch.Generator().manual_seed(11)
    x, eps = torch.rand(4, C, H, W, generator=g) * 2 - 1, torch.randn(4, C, H, W, generator=g)
    t, y = torch.rand(4, generator=g), torch.tensor([2, 0, 3, 1])
    v = torch.randn(4, C, H, W, generator=g).to(torch.bfloat16)

    class Fixed(nn.Module):
        seen = None

        def forward(self, x_t, tt, yy):
            Fixed.seen = (x_t, tt, yy)
            return v
    loss, extra = task.loss(Fixed(), (x, y, t, eps))
    x_t, tt, yy = Fixed.seen
    torch.testing.assert_close(x_t, (1 - t.view(-1, 1, 1, 1)) * x + t.view(-1, 1, 1, 1) * eps)
    assert torch.equal(tt, t) and torch.equal(yy, y) and extra == {}
    expected = ((v.double() - (eps.double() - x.double())) ** 2).mean()
    assert loss.dtype == torch.float32 and abs(float(loss) - float(expected)) < 1e-5


def test_flops_per_item_is_three_forward_passes(tmp_path):
    """Forward and backward: 3 x model.forward_flops()."""
    class Costed(nn.Module):
        def forward_flops(self):
            return 1234.5
    assert toy_task(tmp_path).flops_per_item(Costed()) == 3 * 1234.5


# ------------------------------------------------------------------------------- evaluation
def held_out_expected(task, model, lo, hi, extra=0.0):
    """Sum over test examples lo..hi-1 of the squared error of v at t = (k mod 16 + 0.5) / 16 with noise
    N(0, 1) drawn by seed 1234 for every test example, plus `extra`, over (examples x pixels)."""
    n = len(task.test)
    noise = torch.randn(n, C, H, W, generator=torch.Generator().manual_seed(1234)).double()
    times = torch.tensor([(k % 16 + 0.5) / 16 for k in range(n)], dtype=torch.float64)
    x = symmetric(task.test.images)
    x_t = (1 - times.view(-1, 1, 1, 1)) * x + times.view(-1, 1, 1, 1) * noise
    v = model.expected(x_t, times, task.test.labels)
    err = ((v - (noise - x)) ** 2)[lo:hi].sum()
    return (float(err) + extra) / (n * C * H * W)


def test_held_out_loss_scores_the_rank_shard_at_fixed_times_and_noise(tmp_path):
    """Alone: every test image; under a dist: its shard (2..8) in batches of 3, plus the other ranks' sum.
    The model is put in eval mode to be scored and back in training mode after."""
    task = toy_task(tmp_path, n_test=19)
    model = Velocity()
    got = task.held_out_loss(model)
    assert abs(got - held_out_expected(task, model, 0, 19)) < 1e-6 * max(1.0, got)
    assert all(not training for *_, training in model.calls) and model.training
    assert [len(c[1]) for c in model.calls] == [3] * 6 + [1]
    model.calls.clear()
    got = task.held_out_loss(model, FakeDist())
    assert abs(got - held_out_expected(task, model, 2, 9, FakeDist.extra)) < 1e-6 * max(1.0, got)
    assert [len(c[1]) for c in model.calls] == [3, 3, 1]


def test_evaluate_reports_the_held_out_loss_and_eight_samples_per_class(tmp_path):
    """eval_loss under the dist given; samples: model.sample of labels 0 x8, 1 x8, 2 x8 with 10 steps,
    guidance 2.0 and seed 1234, under the run's autocast (none here); no judge, no other keys."""
    task = toy_task(tmp_path)
    model = Velocity()
    result = task.evaluate(model, FakeDist())
    assert sorted(result) == ["eval_loss", "samples"]
    assert abs(result["eval_loss"] - held_out_expected(task, model, 2, 9, FakeDist.extra)) < 1e-6
    (call,) = model.samples
    assert torch.equal(call["labels"], torch.tensor([0] * 8 + [1] * 8 + [2] * 8))
    assert (call["steps"], call["cfg"], call["seed"], call["autocast"]) == (10, 2.0, 1234, False)
    assert torch.equal(result["samples"], model.sample(call["labels"], steps=1, cfg=1.0, seed=0))


class FakeJudge:
    """Stands in for train/judge.py's Judge: records how it was loaded and what it scored."""
    loads: list = []
    scored: list = []

    @classmethod
    def load(cls, run, *, channels, image_size, classes):
        cls.loads.append((run, channels, image_size, classes))
        return cls()

    def score(self, images, labels):
        FakeJudge.scored.append((images, labels))
        return {"class_consistency": 0.625, "frechet": 17.25, "frechet_floor": 3.5, "judge_accuracy": 0.875,
                "n": len(labels)}


@pytest.fixture
def judge(monkeypatch):
    FakeJudge.loads, FakeJudge.scored = [], []
    monkeypatch.setitem(sys.modules, "anyformer.train.judge", types.SimpleNamespace(Judge=FakeJudge))
    return FakeJudge


def test_the_judge_is_loaded_once_and_scores_samples_spread_over_the_classes(tmp_path, judge):
    """Judge.load(run, channels, (H, W), classes) on the first call only; judge_samples = 7 labels
    0,1,2,0,1,2,0 sampled (10 steps, guidance 2, seed 1234) and scored; "n" is reported as judge_n."""
    task = toy_task(tmp_path, judge="clf-run", judge_samples=7)
    model = Velocity()
    first, second = task.judge_scores(model), task.judge_scores(model)
    assert judge.loads == [("clf-run", C, (H, W), CLASSES)]
    expected = {"class_consistency": 0.625, "frechet": 17.25, "frechet_floor": 3.5, "judge_accuracy": 0.875,
                "judge_n": 7}
    assert first == expected and second == expected
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    for (images, scored_labels), call in zip(judge.scored, model.samples):
        assert scored_labels.dtype == torch.int64 and torch.equal(scored_labels, labels)
        assert torch.equal(call["labels"], labels) and (call["steps"], call["cfg"], call["seed"]) == (10, 2.0, 1234)
        assert torch.equal(images, model.sample(labels, steps=1, cfg=1.0, seed=0))


def test_evaluate_with_a_judge_adds_its_scores_and_samples_under_autocast(tmp_path, judge):
    """With `judge`: the judge's scores join eval_loss and samples; with amp bf16 both the grid and the
    judge's samples are drawn under bf16 autocast."""
    task = toy_task(tmp_path, judge="clf-run", judge_samples=5, amp="bf16")
    model = Velocity()
    result = task.evaluate(model, None)
    assert sorted(result) == ["class_consistency", "eval_loss", "frechet", "frechet_floor", "judge_accuracy",
                              "judge_n", "samples"]
    assert result["judge_n"] == 5 and result["frechet"] == 17.25
    assert [len(c["labels"]) for c in model.samples] == [24, 5]
    assert all(c["autocast"] and c["dtype"] == torch.bfloat16 for c in model.samples)


# ------------------------------------------------------------------------------- words and records
def test_eval_text_with_and_without_judge_scores(tmp_path):
    """The loss to 4 places; with class_consistency, consistency to 3 and Fréchet and its floor to 2."""
    task = toy_task(tmp_path)
    assert task.eval_text({"eval_loss": 0.123456}) == "held-out flow loss 0.1235"
    line = {"eval_loss": 1.987654, "class_consistency": 0.87654, "frechet": 12.3456, "frechet_floor": 3.4567}
    assert task.eval_text(line) == ("held-out flow loss 1.9877  class consistency 0.877  Fréchet 12.35 "
                                    "(floor 3.46)")


def test_summary_fields_keep_the_loss_and_the_judge_scores_only(tmp_path):
    """eval_loss becomes test_flow_loss; the five judge keys are kept where present; the rest is dropped."""
    task = toy_task(tmp_path)
    line = {"step": 40, "eval_loss": 0.4321, "samples": object(), "class_consistency": 0.5, "frechet": 9.5,
            "frechet_floor": 1.5, "judge_accuracy": 0.75, "judge_n": 60, "train_loss": 0.9}
    assert task.summary_fields(line, []) == {"test_flow_loss": 0.4321, "class_consistency": 0.5, "frechet": 9.5,
                                             "frechet_floor": 1.5, "judge_accuracy": 0.75, "judge_n": 60}
    assert task.summary_fields({"step": 3, "frechet": 2.25}, []) == {"frechet": 2.25}
    assert task.summary_fields({"eval_loss": 0.75}, []) == {"test_flow_loss": 0.75}
    assert task.summary_fields({"step": 3}, []) == {}


def test_final_line_with_and_without_judge_scores(tmp_path):
    """Loss, steps, seconds and images/s; judge scores inserted after the loss where present."""
    task = toy_task(tmp_path)
    summary = {"test_flow_loss": 0.456789, "steps": 120, "train_seconds": 61.7, "images_per_s": 812.4, "epochs": 3}
    assert task.final_line(summary) == ("held-out flow loss 0.4568 after 120 steps in 62s of training "
                                        "(812 images/s)")
    judged = {**summary, "class_consistency": 0.91234, "frechet": 4.5678, "frechet_floor": 0.9876}
    assert task.final_line(judged) == ("held-out flow loss 0.4568, class consistency 0.912, Fréchet 4.57 "
                                       "(floor 0.99) after 120 steps in 62s of training (812 images/s)")


def test_draw_writes_one_row_of_samples_per_class(tmp_path):
    """samples.png in the run directory: 3 rows of 8 samples, each magnified 2x in a 2-pixel frame, RGB."""
    from PIL import Image
    task = toy_task(tmp_path)
    samples = torch.randint(0, 256, (24, C, H, W), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)
    task.draw(Velocity(), {"samples": samples}, tmp_path)
    with Image.open(tmp_path / "samples.png") as im:
        assert im.mode == "RGB" and im.size == (8 * (2 * W + 2) + 2, 3 * (2 * H + 2) + 2)
        pixels = np.asarray(im)
    # Row 1, column 5 holds sample 13, each pixel a 2x2 block.
    top, left = 2 + 1 * (2 * H + 2), 2 + 5 * (2 * W + 2)
    block = pixels[top:top + 2 * H, left:left + 2 * W]
    expected = samples[13].repeat_interleave(2, 1).repeat_interleave(2, 2).permute(1, 2, 0).numpy()
    assert np.array_equal(block, expected)


def test_run_info_describes_the_data_and_its_preprocessing(tmp_path):
    """kind, generator, dataset, classes, channels, size, mean, std, split sizes and the preprocessing."""
    task = toy_task(tmp_path, n_train=13, n_test=6)
    assert task.run_info() == {
        "kind": "images", "generator": "flow", "dataset": str(tmp_path / "no-such-data"), "classes": CLASSES,
        "channels": C, "image_size": [H, W], "mean": [0.5] * C, "std": [0.5] * C, "train_examples": 13,
        "test_examples": 6, "preprocess": {"kind": "image", "mean": [0.5] * C, "std": [0.5] * C, "channels": C,
                                           "image_size": [H, W], "framing": None, "stats": None}}
    assert math.ceil(13 / 8) == task.steps_per_epoch
