"""A module of your own through the trainer (`af.train.fit`): it trains on the task's batches, its
run directory holds its weights under its own parameter names, a kill and `resume=True` continue it
to the bit, and a module that does not fit the data is refused in one line before anything is written."""
import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import anyformer as af
from anyformer.train import Interrupted, Trainer

from .conftest import assert_same_weights, interrupt_at, tiny_config


class PatchNet(nn.Module):
    """A small ViT built from af.nn blocks by hand, as a user would: patches, positions, the trunk, a head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.patch = af.nn.PatchEmbedding(7, 1, 32)
        self.pos = nn.Parameter(torch.zeros(1, 16, 32))
        self.trunk = af.Transformer(width=32, depth=1, heads=2)
        self.head = nn.Linear(32, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.patch(images) + self.pos).mean(1))


def _run_command(argv):
    """The command's handler, without main's turning the error into a line (the message is the point here)."""
    from anyformer.cli import parser
    args = parser().parse_args(argv)
    return args.handler(args)


def own_trainer(cfg, mnist_slice, model):
    from anyformer.train.tasks import ImageClassification
    train, test = mnist_slice
    torch.set_num_threads(cfg.threads)
    return Trainer(cfg, task=ImageClassification(cfg, torch.device("cpu"), train, test), model=model)


def fresh(seed: int = 0, classes: int = 10) -> PatchNet:
    torch.manual_seed(seed)
    return PatchNet(classes)


@pytest.mark.slow
def test_an_own_module_trains_and_resumes_bit_for_bit(tmp_path, mnist_slice):
    kw = dict(max_steps=16, eval_every=8, checkpoint_every=4)
    full = own_trainer(tiny_config(tmp_path / "a", **kw), mnist_slice, fresh())
    summary = full.run()
    run = tmp_path / "a" / "run"
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"] + 0.5 and summary["params"] == sum(
        p.numel() for p in PatchNet().parameters())
    assert summary["mfu"] > 0  # FLOPs counted on one example, though the module has no forward_flops
    meta = json.loads((run / "config.json").read_text())
    assert meta["family"] == "own" and meta["config"]["class"].endswith("PatchNet")
    assert summary["model"] == "PatchNet"  # named as the user's, not as the preset the data would derive
    for command in (["eval", str(run)], ["predict", str(run), "x.png"], ["export", str(run), "--out", "m.onnx"]):
        with pytest.raises(ValueError, match=r"holds a module of your own \(.*PatchNet\), which anyformer cannot "
                                             r"rebuild from config.json; build it yourself and load its weights"):
            _run_command(command)
    weights = load_file(run / "model.safetensors")
    mine = fresh()
    mine.load_state_dict(weights)  # the user's own names: their module takes the weights back as they are
    assert set(weights) == set(PatchNet().state_dict())

    cut = own_trainer(tiny_config(tmp_path / "b", **kw), mnist_slice, fresh())
    interrupt_at(cut, 6)
    with pytest.raises(Interrupted, match="after step 6"):
        cut.run()
    own_trainer(tiny_config(tmp_path / "b", resume=True, **kw), mnist_slice, fresh(seed=1)).run()
    assert_same_weights(run, tmp_path / "b" / "run")


def test_a_module_that_does_not_fit_the_data_is_refused_before_anything_is_written(tmp_path, mnist_slice):
    with pytest.raises(ValueError, match=r"PatchNet does not fit .* expected logits \(B, 10\)") as e:
        own_trainer(tiny_config(tmp_path, max_steps=2), mnist_slice, fresh(classes=3))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_of_another_module_is_not_resumed_into_this_one(tmp_path, mnist_slice):
    kw = dict(max_steps=4, eval_every=4)
    own_trainer(tiny_config(tmp_path, **kw), mnist_slice, fresh()).run()

    class Wider(PatchNet):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))

    from anyformer.train import CheckpointError
    with pytest.raises(CheckpointError, match="belongs to another model"):
        own_trainer(tiny_config(tmp_path, resume=True, **kw), mnist_slice, Wider()).run()


def test_fit_refuses_a_task_that_is_not_the_datas(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("plain text, not images\n" * 200)
    with pytest.raises(ValueError, match="task 'classify' was asked for, but .* is data for the 'lm' task"):
        af.train.fit(fresh(), text, task="classify", out=str(tmp_path / "run"))
