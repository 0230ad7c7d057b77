"""Flow matching on a real MNIST slice: the loss falls, EMA weights are what is saved and they
resume exactly, batches are a function of (seed, step), samples.png is drawn at each evaluation."""
import json

import pytest
import torch

import anyformer as af
from anyformer.train import Interrupted, TrainConfig
from anyformer.train.flow import FlowMatching

from .conftest import assert_same_checkpoints, assert_same_weights, interrupt_at, make_trainer

# predict="v" (the default, named because the untrained loss below depends on it).
TINY_DIT = dict(width=48, depth=2, heads=4, mlp_hidden=96, patch_size=7, time_freq_dim=32, predict="v")


def flow_config(tmp_path, **kw) -> TrainConfig:
    values = dict(recipe="test", task="flow", model="dit-mnist", model_overrides=dict(TINY_DIT), data="mnist",
                  out=str(tmp_path / "run"), batch_size=32, lr=3e-3, warmup_steps=5, limit_train=2000,
                  limit_eval=200, progress=False, weight_decay=0.0, threads=1, eval_batch_size=200)
    values.update(kw)
    return TrainConfig(**values)


def flow_trainer(cfg, mnist_slice):
    return make_trainer(cfg, mnist_slice, FlowMatching)


@pytest.mark.slow
def test_flow_loss_falls_and_the_run_writes_samples(tmp_path, mnist_slice):
    trainer = flow_trainer(flow_config(tmp_path, max_steps=60, eval_every=30), mnist_slice)
    # Untrained, a DiT predicts v = 0: its loss is E|eps - x|^2, about 1.8 per pixel on MNIST in [-1, 1].
    untrained = trainer.task.held_out_loss(trainer.model)
    assert 1.6 < untrained < 2.0
    drawn = []
    real_draw = trainer.task.draw
    trainer.task.draw = lambda model, result, run_dir: (drawn.append(trainer.step), real_draw(model, result, run_dir))
    summary = trainer.run()
    run = tmp_path / "run"
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["eval_loss"] < 0.75 * untrained and lines[-1]["eval_loss"] <= lines[0]["eval_loss"], lines
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert summary["test_flow_loss"] == lines[-1]["eval_loss"]
    assert drawn == [30, 60, 60]  # each evaluation, then the end of the run
    assert (run / "samples.png").is_file()
    from PIL import Image
    with Image.open(run / "samples.png") as im:
        assert im.mode == "L" and im.size[1] > im.size[0]  # 10 rows of 8: taller than wide
    assert json.loads((run / "config.json").read_text())["data"]["preprocess"]["mean"] == [0.5]
    model = af.load(run)
    assert model.family == "dit" and model.sample(torch.tensor([3]), steps=2, seed=0).shape == (1, 1, 28, 28)


def test_batches_are_a_function_of_seed_and_step_and_drop_labels(tmp_path, mnist_slice):
    cfg = flow_config(tmp_path, max_steps=1, label_dropout=0.5, batch_size=256)
    a, b = (FlowMatching(cfg, torch.device("cpu"), *mnist_slice) for _ in range(2))
    (x, y, t, eps), n = a.batch(3)
    for u, v in zip((x, y, t, eps), b.batch(3)[0]):
        assert torch.equal(u, v)
    assert n == 256 and x.min() >= -1 and x.max() <= 1 and 0 < t.min() and t.max() < 1
    assert 0.35 < (y == 10).float().mean() < 0.65  # the null class, about half the time here
    assert not torch.equal(a.batch(4)[0][2], t)


@pytest.mark.slow
def test_ema_is_saved_evaluated_and_resumed_exactly(tmp_path, mnist_slice):
    kw = dict(max_steps=12, eval_every=6, ema=0.9)
    full = flow_trainer(flow_config(tmp_path / "a", **kw), mnist_slice)
    full.run()
    # The EMA, not the raw weights, is what model.safetensors holds.
    saved = af.load(tmp_path / "a" / "run")
    ema_state, raw_state = full.ema.model.state_dict(), full.model.state_dict()
    assert all(torch.equal(saved.state_dict()[k], ema_state[k]) for k in ema_state)
    assert not all(torch.equal(ema_state[k], raw_state[k]) for k in raw_state)
    cut = flow_trainer(flow_config(tmp_path / "b", **kw), mnist_slice)
    interrupt_at(cut, 8)
    with pytest.raises(Interrupted, match="after step 8"):
        cut.run()
    flow_trainer(flow_config(tmp_path / "b", resume=True, **kw), mnist_slice).run()
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert_same_checkpoints(tmp_path / "a" / "run", tmp_path / "b" / "run")
    from anyformer.train.checkpoint import list_checkpoints, load_checkpoint
    ea = load_checkpoint(list_checkpoints(tmp_path / "a" / "run")[-1])["ema"]
    eb = load_checkpoint(list_checkpoints(tmp_path / "b" / "run")[-1])["ema"]
    assert sorted(ea) == sorted(eb) and all(torch.equal(ea[k], eb[k]) for k in ea)


@pytest.mark.slow
def test_a_judge_is_asked_for_lazily_and_its_scores_are_logged(tmp_path, mnist_slice, monkeypatch):
    import sys
    import types

    class FakeJudge:  # stands in for train/judge.py's Judge (another module): only the call is tested
        @classmethod
        def load(cls, run, *, channels, image_size, classes):
            assert (run, channels, image_size, classes) == ("clf-run", 1, (28, 28), [str(i) for i in range(10)])
            return cls()

        def score(self, images, labels):
            assert images.dtype == torch.uint8 and images.shape == (20, 1, 28, 28)
            assert torch.equal(torch.bincount(labels), torch.full((10,), 2))
            return {"class_consistency": 0.5, "frechet": 3.0, "frechet_floor": 1.0, "judge_accuracy": 0.99, "n": 20}
    monkeypatch.setitem(sys.modules, "anyformer.train.judge", types.SimpleNamespace(Judge=FakeJudge))
    cfg = flow_config(tmp_path, max_steps=2, eval_every=2, judge="clf-run", judge_samples=20)
    summary = flow_trainer(cfg, mnist_slice).run()
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["class_consistency"] == 0.5 and line["judge_n"] == 20
    assert summary["frechet"] == 3.0 and summary["frechet_floor"] == 1.0


def test_ema_is_refused_outside_zero_to_one():
    with pytest.raises(ValueError, match=r"ema must be a decay in \(0, 1\)"):
        TrainConfig(ema=1.5)
