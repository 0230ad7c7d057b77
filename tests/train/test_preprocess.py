"""ImagePreprocess: the one normalisation that training, eval, predict and attention share; it
gives training's numbers bit for bit, is saved with a run, and reads runs saved before it existed."""
import json

import pytest
import torch

from anyformer.data.images.preprocess import ImagePreprocess
from anyformer.models import read_config
from anyformer.train import TrainConfig
from anyformer.train.tasks import ImageClassification

from .conftest import make_trainer, tiny_config


def by_hand(images, mean, std):
    """Training's arithmetic written out: (x - 255 mean) * (1 / (255 std)), float32."""
    m = torch.tensor(mean).view(1, -1, 1, 1) * 255
    inv = 1 / (torch.tensor(std).view(1, -1, 1, 1) * 255)
    return (images.float() - m) * inv


def test_normalises_exactly_as_training_does(mnist_slice):
    train, _ = mnist_slice
    pre = ImagePreprocess.from_images(train.images[:2000])
    x = train.images[:64]
    assert torch.equal(pre(x), by_hand(x, pre.mean, pre.std))
    assert torch.equal(pre(x[3]), pre(x)[3]), "one image (C, H, W) as in a batch"
    assert pre(x).dtype == torch.float32 and pre(x).shape == x.shape
    # Division by 255 std instead of multiplying by its reciprocal differs in the last bit somewhere:
    # the check above can tell the two apart.
    mean, std = (torch.tensor(v).view(1, -1, 1, 1) * 255 for v in (pre.mean, pre.std))
    divided = (x.float() - mean) / std
    assert not torch.equal(divided, pre(x))


def test_the_classification_task_feeds_the_model_through_it(tmp_path, mnist_slice):
    train, test = mnist_slice
    cfg = tiny_config(tmp_path, augment="none", batch_size=16)
    task = ImageClassification(cfg, torch.device("cpu"), train, test)
    x = train.images[:2000].float().div_(255)
    assert task.preprocess.mean == x.mean(dim=(0, 2, 3)).tolist()  # the statistics of the training split
    (batch, labels), n = task.batch(3)
    order = torch.randperm(2000, generator=torch.Generator().manual_seed(cfg.seed * 10_007))
    idx = order[3 * 16:4 * 16]
    assert n == 16 and torch.equal(labels, train.labels[idx])
    assert torch.equal(batch, by_hand(train.images[idx], task.preprocess.mean, task.preprocess.std))
    symmetric = ImageClassification(tiny_config(tmp_path, normalize="symmetric"), torch.device("cpu"), train, test)
    assert symmetric.preprocess.mean == [0.5] and symmetric.preprocess.std == [0.5]
    assert float(symmetric.normalise(torch.zeros(1, 1, 28, 28, dtype=torch.uint8)).min()) == -1.0


@pytest.mark.slow
def test_saved_with_the_run_and_read_back(tmp_path, mnist_slice):
    make_trainer(tiny_config(tmp_path, max_steps=1), mnist_slice).run()
    info = read_config(tmp_path / "run")["data"]
    pre = ImagePreprocess.from_info(info)
    again = ImagePreprocess.from_dict(json.loads(json.dumps(pre.to_dict())))
    assert info["preprocess"] == pre.to_dict() == again.to_dict()
    assert (pre.mean, pre.std, pre.channels, pre.image_size) == (info["mean"], info["std"], 1, (28, 28))
    # A run written before "preprocess" existed: mean, std, channels and image_size beside it.
    old = {k: v for k, v in info.items() if k != "preprocess"}
    x = mnist_slice[1].images[:8]
    assert torch.equal(ImagePreprocess.from_info(old)(x), pre(x))


def test_evaluating_a_finished_run_uses_its_statistics_not_those_of_what_is_loaded(tmp_path, mnist_slice):
    """`anyformer eval` loads one training example; the saved statistics must win over its own."""
    train, test = mnist_slice
    cfg = tiny_config(tmp_path)
    trained = ImageClassification(cfg, torch.device("cpu"), train, test)
    one = TrainConfig(**{**cfg.to_dict(), "limit_train": 1})
    again = ImageClassification(one, torch.device("cpu"), train, test, info=trained.run_info())
    assert again.preprocess.to_dict() == trained.preprocess.to_dict()
    assert ImageClassification(one, torch.device("cpu"), train, test).preprocess.mean != trained.preprocess.mean


def test_load_reads_an_image_file_as_the_model_expects(tmp_path):
    from PIL import Image
    Image.new("RGB", (50, 40), (255, 255, 255)).save(tmp_path / "white.png")
    pre = ImagePreprocess([0.5], [0.5], 1, 28)
    x = pre.load(tmp_path / "white.png")
    assert x.dtype == torch.uint8 and x.shape == (1, 28, 28) and int(x.min()) == 255
    assert torch.equal(pre(x), torch.ones(1, 28, 28))


@pytest.mark.parametrize("make, error, message", [
    (lambda: ImagePreprocess([0.5], [0.5, 0.5], 1, 28), ValueError,
     r"expected one mean and one std per channel \(1\), got 1 means and 2 stds"),
    (lambda: ImagePreprocess([0.5], [0.0], 1, 28), ValueError, r"std must be positive in every channel, got \[0.0\]"),
    (lambda: ImagePreprocess([0.5], [0.5], 1, 0), ValueError, r"bad image_size 0: expected a positive int"),
    (lambda: ImagePreprocess.from_dict({"mean": [0.5]}), ValueError,
     r"image preprocessing needs mean, std, channels and image_size; missing \['std', 'channels', 'image_size'\]"),
    (lambda: ImagePreprocess([0.5], [0.5], 1, 28)(torch.zeros(1, 1, 28, 28)), TypeError,
     r"expected uint8 images \(B, C, H, W\) or \(C, H, W\), got a torch.float32 tensor of shape \(1, 1, 28, 28\)"),
    (lambda: ImagePreprocess([0.5], [0.5], 1, 28)(torch.zeros(28, 28, dtype=torch.uint8)), TypeError,
     r"got a torch.uint8 tensor of shape \(28, 28\)"),
    (lambda: ImagePreprocess([0.5], [0.5], 1, 28)(torch.zeros(2, 3, 28, 28, dtype=torch.uint8)), ValueError,
     r"expected images with 1 channels, got shape \(2, 3, 28, 28\)"),
])
def test_bad_preprocessing_is_named(make, error, message):
    with pytest.raises(error, match=message):
        make()
