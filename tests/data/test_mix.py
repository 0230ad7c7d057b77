"""data/images/mix.py: mixup blends each image with its partner (the batch read backwards) and CutMix pastes
a box of it, the targets mixed by the share each kept; the step's generator decides, so the same step mixes
alike; the image task trains on the mixed targets."""
import pytest
import torch
import torch.nn.functional as F

from anyformer.data.images.mix import mix_batch
from anyformer.train.batches import step_generator


def batch(b: int = 6, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    # each image a constant of its own index, so that a pixel says which image it came from
    x = torch.arange(b, dtype=torch.float32)[:, None, None, None].expand(b, 1, 8, 8).clone()
    return x, torch.arange(b) % classes


def test_mixup_blends_each_image_with_its_partner_and_the_targets_alike():
    x, y = batch()
    mixed, target = mix_batch(x, y, 4, mixup=0.8, cutmix=0.0, generator=step_generator(0, 3))
    lam = float(target[0, y[0]])  # image 0 (class 0) meets image 5 (class 1)
    assert 0 < lam < 1
    assert torch.allclose(mixed[0], lam * x[0] + (1 - lam) * x[5])
    assert torch.allclose(target.sum(-1), torch.ones(6))
    assert torch.allclose(target[0], lam * F.one_hot(y[0], 4).float() + (1 - lam) * F.one_hot(y[5], 4).float())


def test_cutmix_pastes_a_box_and_the_target_is_the_share_of_pixels_kept():
    x, y = batch()
    for step in range(20):
        mixed, target = mix_batch(x, y, 4, mixup=0.0, cutmix=1.0, generator=step_generator(1, step))
        for i in range(6):
            kept = float((mixed[i] == x[i]).float().mean())
            assert torch.all((mixed[i] == x[i]) | (mixed[i] == x[5 - i]))
            assert target[i, y[i]] == pytest.approx(kept if y[i] != y[5 - i] else 1.0, abs=1e-6)


def test_the_same_step_mixes_alike_and_both_kinds_take_turns():
    x, y = batch()
    a = mix_batch(x, y, 4, 0.8, 1.0, step_generator(7, 11))
    b = mix_batch(x, y, 4, 0.8, 1.0, step_generator(7, 11))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    boxes = 0
    for step in range(40):
        mixed, _ = mix_batch(x, y, 4, 0.8, 1.0, step_generator(0, step))
        boxes += bool(torch.all((mixed[0] == x[0]) | (mixed[0] == x[5])))  # only pasted pixels: CutMix
    assert 5 < boxes < 35


def test_off_gives_the_batch_and_one_hot_targets_and_a_negative_alpha_is_refused():
    x, y = batch()
    same, target = mix_batch(x, y, 4, 0.0, 0.0, step_generator(0, 0))
    assert same is x and torch.equal(target, F.one_hot(y, 4).float())
    with pytest.raises(ValueError, match="alpha >= 0"):
        mix_batch(x, y, 4, -1.0, 0.0, step_generator(0, 0))


def test_the_image_task_trains_on_mixed_targets(tmp_path):
    from anyformer.train.classify import ImageClassification
    from anyformer.train.config import TrainConfig
    from anyformer.data import ImageDataset
    images = torch.randint(0, 255, (16, 1, 8, 8), dtype=torch.uint8)
    data = ImageDataset(images, torch.arange(16) % 2, ["a", "b"], "stand-in")
    cfg = TrainConfig(data="stand-in", batch_size=8, mixup=0.8, cutmix=1.0, max_steps=1)
    task = ImageClassification(cfg, torch.device("cpu"), data, data)
    (x, target), n = task.batch(0)
    assert n == 8 and target.shape == (8, 2) and torch.allclose(target.sum(-1), torch.ones(8))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))
    loss, stats = task.loss(model, (x, target))
    assert torch.isfinite(loss) and stats["count"] == 8
    with pytest.raises(ValueError, match="alpha >= 0"):
        TrainConfig(cutmix=-0.5)


@pytest.mark.parametrize("kind", ["mixup", "cutmix", "none"])
def test_the_image_task_mixes_as_its_config_says(kind):
    from anyformer.data import ImageDataset
    from anyformer.train.classify import ImageClassification
    from anyformer.train.config import TrainConfig
    images = (torch.arange(8, dtype=torch.uint8) * 30)[:, None, None, None].expand(8, 1, 8, 8).contiguous()
    data = ImageDataset(images, torch.arange(8) % 2, ["a", "b"], "stand-in")
    cfg = TrainConfig(data="stand-in", batch_size=8, max_steps=1, **({kind: 1.0} if kind != "none" else {}))
    task = ImageClassification(cfg, torch.device("cpu"), data, data)
    (x, target), _ = task.batch(0)
    values = {round(float(v), 4) for v in task.normalise(images).flatten(1)[:, 0]}  # each image one value
    pure = [all(round(float(v), 4) in values for v in x[i].flatten()) for i in range(8)]
    if kind == "mixup":  # blends: values between the images'
        assert not all(pure) and target.is_floating_point()
    elif kind == "cutmix":  # pasted pixels only, and soft targets where the partner's class differs
        assert all(pure) and target.is_floating_point() and (target.max(-1).values < 1).any()
    else:
        assert all(pure) and not target.is_floating_point()
