"""Training on a real MNIST slice: it learns, it resumes exactly, it stops cleanly."""
import json

import pytest

import anyformer as af
from anyformer.train import Interrupted, TrainingError
from anyformer.train.optim import lr_at, param_groups

from .conftest import assert_same_checkpoints, assert_same_weights, interrupt_at, make_trainer, tiny_config


@pytest.mark.slow
def test_short_run_learns_and_writes_the_run_directory(tmp_path, mnist_slice):
    cfg = tiny_config(tmp_path, epochs=3, plots=True)
    summary = make_trainer(cfg, mnist_slice).run()
    run = tmp_path / "run"
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 3  # one line per evaluation, once each epoch
    assert lines[-1]["train_loss"] < lines[0]["train_loss"] * 0.85
    assert summary["test_accuracy"] > 0.35  # chance is 0.1; tiny ViTs start slowly (timm's too)
    for name in ("config.json", "model.safetensors", "summary.json", "curves.png", "confusion.png", "attention.png"):
        assert (run / name).is_file(), name
    assert {"test_accuracy", "train_seconds", "params", "device"} <= set(json.loads((run / "summary.json").read_text()))
    model = af.load(run)
    assert model.num_params() == summary["params"]


@pytest.mark.slow
def test_a_forced_compile_trains_compiled_across_an_epoch_end(tmp_path, mnist_slice, capsys):
    """--compile: the steps run under torch.compile; the epoch's short last batch (2,000 = 62 x 32 + 16)
    runs eagerly instead of compiling a second graph; the run learns and says what it chose."""
    cfg = tiny_config(tmp_path, max_steps=66, eval_every=66, compile=True)
    trainer = make_trainer(cfg, mnist_slice)
    summary = trainer.run()
    assert summary["compile"] == "compiled" and trainer.step_plan.compiled is not None
    assert "compile: compiled (compile=compiled is forced)" in capsys.readouterr().out
    assert summary["test_accuracy"] > 0.3


@pytest.mark.slow
def test_a_short_run_is_not_worth_measuring_a_compile(tmp_path, mnist_slice, capsys, monkeypatch):
    from anyformer import plan
    monkeypatch.setenv("ANYFORMER_PLAN", "auto")  # the suite forces stock; here the plan decides
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    plan.reset()
    try:
        summary = make_trainer(tiny_config(tmp_path, max_steps=3), mnist_slice).run()
    finally:
        monkeypatch.undo()
        plan.reset()
    assert summary["compile"] == "eager"
    assert "too few to repay a compile" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("spec, compile", [("auto,compile=eager", None), ("auto", False)])
def test_an_fp32_run_settles_one_kernel_for_its_linear_layers(tmp_path, mnist_slice, monkeypatch, capsys,
                                                              spec, compile):
    """The plan times the run's fp32 step with its linear layers all on F.linear, each as planned,
    all on oneDNN and all mixed (anyformer.plan.linears); the layers keep the choice for the run.
    An eager run settles it whether the plan or --no-compile keeps it eager."""
    from anyformer import plan
    from anyformer.plan.layers import PlannedLinear
    monkeypatch.setenv("ANYFORMER_PLAN", spec)
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    plan.reset()
    try:
        cfg = tiny_config(tmp_path, max_steps=210, eval_every=210, amp="none", compile=compile)
        trainer = make_trainer(cfg, mnist_slice)
        summary = trainer.run()
        records = [e for k, e in plan.planner().snapshot()["entries"].items() if k.startswith("linears ")]
    finally:
        monkeypatch.undo()
        plan.reset()
    kernels = {m.training_kernel for m in trainer.model.modules() if isinstance(m, PlannedLinear)}
    if plan.onednn_linear_op() is None:  # nothing but F.linear: nothing to time
        assert summary["linears"] == "per-shape" and records == [] and kernels == {"stock"}
        return
    (record,) = records
    assert summary["linears"] == record["choice"] and set(record["times"]) == {"stock", "per-shape", "onednn", "mixed"}
    assert f"linears: {record['choice']} (measured on the whole step: stock " in capsys.readouterr().out
    planned = {m.planned_training for m in trainer.model.modules() if isinstance(m, PlannedLinear)}
    assert kernels == (planned if record["choice"] == "per-shape" else {record["choice"]})


@pytest.mark.slow
@pytest.mark.skipif(not __import__("anyformer").plan.onednn_linear_op(), reason="no oneDNN: nothing to time")
def test_a_cold_and_a_warm_plan_cache_train_the_same_bits(tmp_path, mnist_slice, monkeypatch):
    """The plan is measured on the step's forward and backward, never by taking the run's own steps
    under each candidate: with an empty plan cache, then with the cache the first run left, the same
    seed gives the same weights, metrics and plan, bit for bit."""
    from anyformer import plan
    monkeypatch.setenv("ANYFORMER_PLAN", "auto,compile=eager")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    try:
        for name in ("cold", "warm"):
            plan.reset()  # as a new process: the plan file is read again
            summary = make_trainer(tiny_config(tmp_path / name, max_steps=260, eval_every=130, amp="none",
                                               batch_size=8), mnist_slice).run()
            assert summary["steps"] == 260 and summary["linears"] is not None
        (record,) = [e for k, e in plan.planner().snapshot()["entries"].items() if k.startswith("linears ")]
    finally:
        monkeypatch.undo()
        plan.reset()
    assert record["timed"] == "forward+backward"
    assert_same_weights(tmp_path / "cold" / "run", tmp_path / "warm" / "run")
    strip = lambda p: [{k: v for k, v in json.loads(l).items() if k not in ("time", "images_per_s", "flops_per_s")}
                       for l in p.read_text().splitlines()]
    assert strip(tmp_path / "cold" / "run" / "metrics.jsonl") == strip(tmp_path / "warm" / "run" / "metrics.jsonl")
    cold, warm = (json.loads((tmp_path / n / "run" / "plan.json").read_text()) for n in ("cold", "warm"))
    assert (cold["compile"], cold["linears"]) == (warm["compile"], warm["linears"]) == ("eager", summary["linears"])
    # What the cold run was answered while it measured (each layer's shape, for the "per-shape"
    # candidate) is in its plan only where "per-shape" won: both runs record the same answers
    # (tests/plan/test_linears.py holds the other outcomes to it).
    assert len(warm["answers"]) > 3 and cold["answers"] == warm["answers"]


@pytest.mark.slow
def test_resume_continues_the_same_run_exactly(tmp_path, mnist_slice):
    full = make_trainer(tiny_config(tmp_path / "a", max_steps=24, eval_every=8, augment="digits"), mnist_slice)
    full.run()
    cut = make_trainer(tiny_config(tmp_path / "b", max_steps=24, eval_every=8, augment="digits"), mnist_slice)
    interrupt_at(cut, 13)
    with pytest.raises(Interrupted, match="after step 13"):
        cut.run()
    resumed = make_trainer(tiny_config(tmp_path / "b", max_steps=24, eval_every=8, augment="digits", resume=True),
                           mnist_slice)
    assert resumed.step == 0
    resumed.run()
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert_same_checkpoints(tmp_path / "a" / "run", tmp_path / "b" / "run")
    strip = lambda p: [{k: v for k, v in json.loads(l).items() if k not in ("time", "images_per_s")}
                       for l in p.read_text().splitlines()]
    assert strip(tmp_path / "a" / "run" / "metrics.jsonl") == strip(tmp_path / "b" / "run" / "metrics.jsonl")


@pytest.mark.slow
def test_same_seed_gives_identical_metrics(tmp_path, mnist_slice):
    runs = []
    for name in ("x", "y"):
        make_trainer(tiny_config(tmp_path / name, max_steps=10, eval_every=5), mnist_slice).run()
        runs.append([{k: v for k, v in json.loads(l).items() if k not in ("time", "images_per_s")}
                     for l in (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()])
    assert runs[0] == runs[1]


def test_a_run_without_plots_draws_nothing_and_trains_the_same_bits(tmp_path, mnist_slice):
    for name, plots in (("drawn", True), ("plain", False)):
        make_trainer(tiny_config(tmp_path / name, max_steps=10, eval_every=5, plots=plots), mnist_slice).run()
    drawn, plain = tmp_path / "drawn" / "run", tmp_path / "plain" / "run"
    assert {p.name for p in drawn.glob("*.png")} == {"curves.png", "confusion.png", "attention.png"}
    assert not list(plain.glob("*.png"))
    assert (drawn / "model.safetensors").read_bytes() == (plain / "model.safetensors").read_bytes()


def test_non_finite_loss_stops_with_the_step_named(tmp_path, mnist_slice):
    trainer = make_trainer(tiny_config(tmp_path, max_steps=20, eval_every=10, checkpoint_every=5), mnist_slice)
    real_loss = trainer.task.loss

    def loss_that_breaks(model, batch):  # a NaN in the 8th step, as a bad batch or lr would cause
        loss, stats = real_loss(model, batch)
        return (loss * float("nan") if trainer.step == 7 else loss), stats
    trainer.task.loss = loss_that_breaks
    with pytest.raises(TrainingError, match=r"the loss became nan at step 8; stopping"):
        trainer.run()
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["step-000000005.pt"], "the last good checkpoint is kept, nothing after it"


def test_weight_decay_only_on_matrices():
    vit = af.ViT.preset("vit-mnist", depth=1)
    decay, no_decay = param_groups(vit, 0.1)
    names = {id(p): n for n, p in vit.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert "pos.pos_embed" not in decayed and "prefix.cls_token" not in decayed
    assert not any("norm" in n or n.endswith("bias") for n in decayed)
    assert "backbone.blocks.0.attn.qkv.weight" in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(vit.parameters()))


def test_warmup_then_cosine(tmp_path):
    cfg = tiny_config(tmp_path, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, 100, cfg) == pytest.approx(0.1)
    assert lr_at(9, 100, cfg) == pytest.approx(1.0)
    assert lr_at(55, 100, cfg) == pytest.approx(0.55)
    assert lr_at(100, 100, cfg) == pytest.approx(0.1)
