"""Masked autoencoding on a real MNIST slice, fine-tuning from its encoder, and scarce labels."""
import json

import pytest
import torch

import anyformer as af
from anyformer.train import TrainConfig
from anyformer.train.build import build_model
from anyformer.train.classify import ImageClassification, balanced_subset
from anyformer.train.tasks import MaskedAutoencoding

from .conftest import TINY as TINY_VIT, make_trainer, tiny_config

# 16 patches of 7x7, a 2-block encoder of width 48 (TINY's ViT trunk), a 1-block decoder.
TINY_MAE = dict(width=48, depth=2, heads=4, mlp_hidden=96, patch_size=7, decoder_width=32, decoder_depth=1,
                decoder_heads=2, decoder_mlp_hidden=64)
# The ViT whose trunk that encoder is: the same shape, fixed 2-D positions, mean-pooled.
VIT_OF_MAE = {**TINY_VIT, "position": "sinusoidal", "pool": "mean", "norm_eps": 1e-6}


def mae_config(tmp_path, **kw) -> TrainConfig:
    values = dict(recipe="test", task="mae", model="mae-mnist", model_overrides=dict(TINY_MAE), data="mnist",
                  out=str(tmp_path / "mae"), batch_size=64, lr=3e-3, betas=(0.9, 0.95), warmup_steps=5,
                  limit_train=2000, limit_eval=300, progress=False, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def mae_trainer(cfg, mnist_slice):
    return make_trainer(cfg, mnist_slice, MaskedAutoencoding)


@pytest.fixture(scope="module")
def mae_run(tmp_path_factory, mnist_slice):
    """A tiny MAE trained 40 steps, and the test MSE of the same model untrained."""
    tmp = tmp_path_factory.mktemp("mae")
    trainer = mae_trainer(mae_config(tmp, max_steps=40, eval_every=20), mnist_slice)
    from anyformer.train.distributed import Distributed
    before = trainer.task.evaluate(trainer.model, Distributed())["eval_loss"]
    summary = trainer.run()
    return tmp / "mae", before, summary


@pytest.mark.slow
def test_mae_loss_falls_on_real_digits_and_the_run_draws_its_picture(mae_run):
    run, before, summary = mae_run
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [20, 40]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert summary["test_masked_mse"] == lines[-1]["eval_loss"] < 0.8 * before  # untrained: ~1 (unit-variance pixels)
    assert (run / "reconstruction.png").stat().st_size > 5000 and (run / "curves.png").is_file()
    assert isinstance(af.load(run), af.MAE)


def test_mae_batches_and_evaluation_are_functions_of_the_seed_and_step(tmp_path, mnist_slice):
    train, test = mnist_slice
    cfg = mae_config(tmp_path, max_steps=2)
    a, b = (MaskedAutoencoding(cfg, torch.device("cpu"), train, test) for _ in range(2))
    (x1, n1), _ = a.batch(5)
    (x2, n2), _ = b.batch(5)
    assert torch.equal(x1, x2) and torch.equal(n1, n2) and n1.shape == (64, 16)
    assert not torch.equal(n1, a.batch(6)[0][1])
    (xs, ns), n = a.batch(5, rank=1, world=2)  # a rank's share of the same global batch
    assert n == 64 and torch.equal(ns, n1[32:]) and torch.equal(xs, x1[32:])
    model = build_model(cfg, a)
    from anyformer.train.distributed import Distributed
    assert a.evaluate(model, Distributed()) == b.evaluate(model, Distributed())


@pytest.mark.slow
def test_init_from_an_mae_run_starts_the_vit_from_its_encoder(mae_run, tmp_path, mnist_slice):
    run, _, _ = mae_run
    mae = af.load(run)
    cfg = tiny_config(tmp_path, model="vit-mae-mnist", model_overrides=dict(VIT_OF_MAE), init_from=str(run),
                      max_steps=3, label_fraction=0.05)
    trainer = make_trainer(cfg, mnist_slice)
    vit = trainer.model
    for key, value in mae.vit_state_dict().items():
        assert torch.equal(vit.state_dict()[key], value), key
    images = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(vit.forward_features(images), mae.encode(images))
    assert len(trainer.task.train) == 100  # 5% of the 2,000-image slice, 10 per digit
    trainer.run()  # and it trains from there
    # Scored again as `anyformer eval` does (one training example loaded): the label subset is not redrawn,
    # and the statistics are those of every training image, saved with the run.
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    again_cfg = TrainConfig.from_dict({**meta["train"], "limit_train": 1})
    rescored = ImageClassification(again_cfg, torch.device("cpu"), *mnist_slice, info=meta["data"])
    assert rescored.preprocess.mean == trainer.task.preprocess.mean == meta["data"]["mean"]
    assert meta["data"]["train_examples"] == 100
    # From a ViT run, the trunk too; the head starts fresh.
    cfg2 = tiny_config(tmp_path / "again", model="vit-mae-mnist", model_overrides=dict(VIT_OF_MAE),
                       init_from=str(tmp_path / "run"), max_steps=1)
    again = make_trainer(cfg2, mnist_slice).model
    trained = af.load(tmp_path / "run")
    assert torch.equal(again.backbone.blocks[0].attn.qkv.weight, trained.backbone.blocks[0].attn.qkv.weight)


@pytest.mark.slow
def test_init_from_refuses_a_mismatched_shape_with_one_line(mae_run, tmp_path, mnist_slice):
    run, _, _ = mae_run
    cfg = tiny_config(tmp_path, model="vit-mae-mnist", model_overrides={**VIT_OF_MAE, "width": 64},
                      init_from=str(run), max_steps=1)
    with pytest.raises(ValueError) as e:
        make_trainer(cfg, mnist_slice)
    assert "\n" not in str(e.value)
    assert f"--init-from {run}: backbone.blocks.0.attn.proj.bias is (48,) in that mae run but (64,) in " \
           "vit-mae-mnist" in str(e.value)
    # Learned positions where the MAE had fixed ones: the position table is named as missing there.
    cfg = tiny_config(tmp_path, model="vit-mae-mnist", model_overrides={**VIT_OF_MAE, "position": "learned"},
                      init_from=str(run), max_steps=1)
    with pytest.raises(ValueError, match=r"pos.pos_embed is absent in that mae run but \(1, 17, 48\)"):
        make_trainer(cfg, mnist_slice)
    cfg = tiny_config(tmp_path, init_from=str(tmp_path / "nowhere"), max_steps=1)
    with pytest.raises(FileNotFoundError, match="no model in"):
        make_trainer(cfg, mnist_slice)


def test_label_fraction_picks_a_class_balanced_seeded_subset(mnist_slice, tmp_path):
    from tests.conftest import SHARED_DATA
    from anyformer.data import load_image_dataset
    full = load_image_dataset(str(SHARED_DATA / "mnist"), "train")
    one = balanced_subset(full, 0.01, seed=0)
    assert len(one) == 600 and torch.bincount(one.labels, minlength=10).tolist() == [60] * 10
    same, other = balanced_subset(full, 0.01, seed=0), balanced_subset(full, 0.01, seed=1)
    assert torch.equal(one.images, same.images) and not torch.equal(one.images, other.images)
    ten = balanced_subset(full, 0.1, seed=0)
    assert len(ten) == 6000 and torch.bincount(ten.labels, minlength=10).tolist() == [600] * 10
    with pytest.raises(ValueError, match="leaves no example of each of the 10 classes"):
        balanced_subset(full, 1e-5, seed=0)
    with pytest.raises(ValueError, match=r"label_fraction must be in \(0, 1\]"):
        TrainConfig(label_fraction=0.0)
    # The task uses it: the from-scratch baseline and the fine-tune see the same images.
    train, test = mnist_slice
    tasks = [ImageClassification(tiny_config(tmp_path, label_fraction=0.1), torch.device("cpu"), train, test)
             for _ in range(2)]
    assert len(tasks[0].train) == 200 and torch.equal(tasks[0].train.images, tasks[1].train.images)
