"""Unit tests of MaskedAutoencoding (train/mae.py) on small hand-made image sets and tiny fake models:
each value is computed again here in closed form (no Trainer, no real network, well under a second)."""
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from anyformer.data import ImageDataset
from anyformer.train import TrainConfig
from anyformer.train.batches import step_generator
from anyformer.train.mae import MaskedAutoencoding

C, H, W = 3, 6, 8  # RGB; with patches of 2, a 3 x 4 grid: 12 patches
PATCHES = 12


def toy_set(n: int, seed: int) -> ImageDataset:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, C, H, W), generator=g, dtype=torch.uint8)
    images[:, 1] //= 2  # channels with different statistics
    return ImageDataset(images, torch.randint(0, 4, (n,), generator=g), ["a", "b", "c", "d"], "toy")


def toy_task(tmp_path, device="cpu", **kw) -> MaskedAutoencoding:
    """`data` names nothing on disk: the task uses the splits it is given. Per-channel statistics of
    the 21 training images (normalize='dataset')."""
    values = dict(recipe="test", task="mae", model="mae-mnist", model_overrides=dict(patch_size=2),
                  data=str(tmp_path / "no-such-data"), out=str(tmp_path / "run"), batch_size=8, seed=5,
                  eval_batch_size=3, progress=False, plots=False)
    values.update(kw)
    return MaskedAutoencoding(TrainConfig(**values), torch.device(device), toy_set(21, 1), toy_set(11, 2))


def normalised(task, images):
    """(p - 255 mean_c) / (255 std_c), written out in float64."""
    mean = torch.tensor(task.preprocess.mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(task.preprocess.std, dtype=torch.float64).view(1, -1, 1, 1)
    return (images.double() - 255 * mean) / (255 * std)


def test_the_statistics_are_those_of_the_training_images_per_channel(tmp_path):
    """The MAE normalises as image classification does (normalize='dataset'): per-channel mean and std."""
    task = toy_task(tmp_path)
    x = task.train.images.double() / 255
    assert task.preprocess.mean == pytest.approx(x.mean(dim=(0, 2, 3)).tolist(), abs=1e-6)
    assert task.preprocess.std == pytest.approx(x.std(dim=(0, 2, 3)).tolist(), abs=1e-6)
    assert task.preprocess.mean[1] < 0.75 * task.preprocess.mean[0]


def test_model_overrides_and_the_number_of_patches(tmp_path):
    """in_chans and image_size of the images (no classes); 12 patches of 2x2 in a 6x8 image."""
    task = toy_task(tmp_path)
    assert task.model_overrides() == {"in_chans": C, "image_size": [H, W]}
    assert task._num_patches() == PATCHES


def test_a_batch_is_normalised_images_and_masking_noise_from_its_own_stream(tmp_path):
    """Step 4, 3 steps per epoch: epoch 1's second slice of 8. The noise is U(0, 1) per patch from
    step_generator(seed, step, salt=1), not the augmentation's stream (salt 0)."""
    task = toy_task(tmp_path)
    (x, noise), n = task.batch(4)  # rank and world left at their defaults: the whole batch
    idx = torch.randperm(21, generator=torch.Generator().manual_seed(5 * 10_007 + 1))[8:16]
    assert n == 8 and x.shape == (8, C, H, W) and noise.shape == (8, PATCHES)
    torch.testing.assert_close(x.double(), normalised(task, task.train.images[idx]), rtol=0, atol=1e-5)
    assert torch.equal(noise, torch.rand(8, PATCHES, generator=step_generator(5, 4, 1)))
    assert not torch.equal(noise, torch.rand(8, PATCHES, generator=step_generator(5, 4, 0)))


def test_each_rank_keeps_its_share_of_the_same_masks(tmp_path):
    """World 3, batch 8: shares 0:3, 3:6, 6:8 of the global images and noise; each reports the global 8."""
    task = toy_task(tmp_path)
    (x, noise), _ = task.batch(4)
    for rank, part in enumerate((slice(0, 3), slice(3, 6), slice(6, 8))):
        (xr, nr), m = task.batch(4, rank=rank, world=3)
        assert m == 8 and torch.equal(xr, x[part]) and torch.equal(nr, noise[part])


def test_loss_is_the_model_output_on_images_and_noise(tmp_path):
    """loss(model, (x, noise)) = model(x, noise), with no extra sums."""
    task = toy_task(tmp_path)
    x, noise = torch.randn(2, C, H, W), torch.rand(2, PATCHES)
    seen = []

    class Fixed(nn.Module):
        def forward(self, images, masks):
            seen.append((images, masks))
            return torch.tensor(0.37)
    loss, extra = task.loss(Fixed(), (x, noise))
    assert float(loss) == pytest.approx(0.37) and extra == {}
    assert seen[0][0] is x and seen[0][1] is noise


class PatchModel(nn.Module):
    """patch_errors: err = noise * (mean |pixel| of the image), mask = noise > 0.5 (or none hidden)."""

    def __init__(self, hide=True):
        super().__init__()
        self.config = SimpleNamespace(num_patches=PATCHES)
        self.hide, self.sizes = hide, []

    def patch_errors(self, images, noise):
        self.sizes.append(len(images))
        mask = (noise > 0.5).float() if self.hide else torch.zeros_like(noise)
        return noise * images.abs().mean(dim=(1, 2, 3)).unsqueeze(1), mask


class FakeDist:
    """A rank that scores test examples 2..8 and adds 4.0 from the other ranks to each sum."""

    def shard(self, n):
        return range(2, 9)

    def sum(self, total):
        return total + 4.0


def test_evaluate_divides_the_summed_errors_by_the_hidden_patches_over_ranks(tmp_path):
    """Masks U(0, 1) by seed 1234 for every test image; the shard in batches of 3; (errors + others) /
    max(hidden + others, 1); with nothing hidden anywhere, the errors over 1."""
    task = toy_task(tmp_path)
    noise = torch.rand(11, PATCHES, generator=torch.Generator().manual_seed(1234)).double()
    assert torch.equal(task._eval_noise(11, PATCHES), noise.float())
    pixels = normalised(task, task.test.images).abs().mean(dim=(1, 2, 3))
    errors = float((noise * pixels.unsqueeze(1))[2:9].sum())
    hidden = float((noise[2:9] > 0.5).sum())
    model = PatchModel()
    assert task.evaluate(model, FakeDist())["eval_loss"] == pytest.approx((errors + 4) / (hidden + 4), rel=1e-6)
    assert model.sizes == [3, 3, 1] and model.training

    class Alone(FakeDist):
        def sum(self, total):
            return total
    assert task.evaluate(PatchModel(hide=False), Alone())["eval_loss"] == pytest.approx(errors, rel=1e-6)


def test_eval_text_summary_fields_and_final_line(tmp_path):
    """The masked-patch mse to 4 places, kept as test_masked_mse; the final line with epochs, seconds, images/s."""
    task = toy_task(tmp_path)
    assert task.eval_text({"eval_loss": 0.123456, "step": 3}) == "test masked-patch mse 0.1235"
    assert task.summary_fields({"eval_loss": 0.5432, "step": 3, "train_loss": 0.9}, []) == {"test_masked_mse": 0.5432}
    assert task.summary_fields({"step": 3, "train_loss": 0.9}, []) == {}
    summary = {"test_masked_mse": 0.345678, "epochs": 2.5, "steps": 40, "train_seconds": 30.6, "images_per_s": 99.7}
    assert task.final_line(summary) == ("test masked-patch mse 0.3457 after 2.5 epochs in 31s of training "
                                        "(100 images/s)")


class Reconstructor(nn.Module):
    """Returns fixed rows (masked, reconstruction, original) in model units; records its inputs."""

    def __init__(self, rows, device="cpu"):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, device=device))
        self.config = SimpleNamespace(num_patches=PATCHES)
        self.rows, self.calls = rows, []

    def reconstruct(self, images, noise, fill=0.0):
        self.calls.append(dict(images=images, noise=noise, fill=fill, training=self.training))
        return self.rows


@pytest.fixture
def plotted(monkeypatch):
    """plot_reconstruction replaced by a recorder: its three pixel batches and its path."""
    calls = []
    monkeypatch.setattr("anyformer.viz.reconstruction.plot_reconstruction",
                        lambda masked, reconstruction, original, out: calls.append((masked, reconstruction,
                                                                                    original, out)))
    return calls


def test_draw_plots_eight_test_images_with_their_evaluation_masks(tmp_path, plotted):
    """The first 8 of 11 test images normalised, the evaluation's masks (seed 1234), hidden patches
    filled with what grey 128 becomes (mean over channels of (128 - 255 m) / (255 s)), the model in
    eval mode for it and back in its own mode after; the rows turned back into [0, 1] pixels."""
    task = toy_task(tmp_path)
    g = torch.Generator().manual_seed(9)
    rows = tuple(3 * torch.randn(8, C, H, W, generator=g) for _ in range(3))
    model = Reconstructor(rows)
    task.draw(model, {"eval_loss": 0.5}, tmp_path)
    (call,) = model.calls
    torch.testing.assert_close(call["images"].double(), normalised(task, task.test.images[:8]), rtol=0, atol=1e-5)
    assert torch.equal(call["noise"], torch.rand(8, PATCHES, generator=torch.Generator().manual_seed(1234)))
    mean, std = torch.tensor(task.preprocess.mean, dtype=torch.float64), torch.tensor(task.preprocess.std,
                                                                                      dtype=torch.float64)
    assert call["fill"] == pytest.approx(float(((128 - 255 * mean) / (255 * std)).mean()), abs=1e-5)
    assert not call["training"] and model.training
    ((masked, recon, original, out),) = plotted
    assert out == tmp_path / "reconstruction.png"
    for got, r in zip((masked, recon, original), rows):
        expected = (r.double() * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)).clamp(0, 1)
        torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-6)
        assert 0 < float((got == 0).float().mean()) < 0.5 and 0 < float((got == 1).float().mean()) < 0.5
    model.eval()
    task.draw(model, {}, tmp_path)
    assert not model.training  # a model drawn in eval mode stays in it


def test_draw_feeds_the_model_on_the_device_of_its_weights(tmp_path, plotted):
    """Images and masks go to the device the model's parameters are on (meta here), whatever the task's."""
    task = toy_task(tmp_path)
    rows = tuple(torch.zeros(8, C, H, W) for _ in range(3))
    model = Reconstructor(rows, device="meta")
    task.draw(model, {}, tmp_path)
    (call,) = model.calls
    assert call["images"].device.type == "meta" and call["noise"].device.type == "meta"
    assert call["images"].shape == (8, C, H, W) and call["noise"].shape == (8, PATCHES)
    assert len(plotted) == 1
