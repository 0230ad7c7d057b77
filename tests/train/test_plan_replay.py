"""The plan a run trains with is recorded (plan.json, and in every checkpoint) and replayed: by
--resume from the run's own, by --plan PATH from another's; --plan stock takes PyTorch's kernels."""
import json

import pytest

from anyformer import plan
from anyformer.train import Interrupted
from anyformer.train.checkpoint import list_checkpoints, load_checkpoint

from tests.conftest import skip_unless_runnable

from .conftest import assert_same_weights, interrupt_at, make_trainer, tiny_config

NON_STOCK = "linear=onednn,attention=native,gelu=native,compile=eager"


@pytest.fixture
def planning(tmp_path, monkeypatch):
    """The suite runs stock (tests/conftest.py); these tests plan, with a plan cache of their own."""
    monkeypatch.setenv("ANYFORMER_PLAN", "auto")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    plan.reset()
    yield
    monkeypatch.undo()
    plan.reset()


def strip(path):
    return [{k: v for k, v in json.loads(line).items() if k not in ("time", "images_per_s", "flops_per_s")}
            for line in path.read_text().splitlines()]


@pytest.fixture
def non_stock_plan(tmp_path, mnist_slice, monkeypatch, planning):
    """A plan.json whose answers are the private kernels (recorded from a run that forced them)."""
    monkeypatch.setenv("ANYFORMER_PLAN", NON_STOCK)
    plan.reset()
    make_trainer(tiny_config(tmp_path / "source", max_steps=3, eval_every=3, amp="none"), mnist_slice).run()
    monkeypatch.setenv("ANYFORMER_PLAN", "auto")
    plan.reset()
    recorded = json.loads((tmp_path / "source" / "run" / "plan.json").read_text())
    assert any(v in ("onednn", "native") for v in recorded["answers"].values()), recorded
    return tmp_path / "source" / "run" / "plan.json"


@pytest.mark.slow
def test_resume_under_a_non_stock_plan_continues_bit_for_bit(tmp_path, mnist_slice, non_stock_plan, capsys):
    """Both runs replay the same non-stock plan (--plan PATH); one is stopped after step 13, and its
    resume replays the plan its checkpoint and plan.json hold: the same weights and metrics."""
    kw = dict(max_steps=24, eval_every=8, augment="digits", amp="none", plan=str(non_stock_plan))
    make_trainer(tiny_config(tmp_path / "a", **kw), mnist_slice).run()
    cut = make_trainer(tiny_config(tmp_path / "b", **kw), mnist_slice)
    interrupt_at(cut, 13)
    with pytest.raises(Interrupted):
        cut.run()
    state = load_checkpoint(list_checkpoints(tmp_path / "b" / "run")[-1])
    assert state["plan"]["answers"] == json.loads((tmp_path / "b" / "run" / "plan.json").read_text())["answers"]
    capsys.readouterr()
    make_trainer(tiny_config(tmp_path / "b", resume=True, **kw), mnist_slice).run()
    assert "plan: replaying" in capsys.readouterr().out
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert strip(tmp_path / "a" / "run" / "metrics.jsonl") == strip(tmp_path / "b" / "run" / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("recorded_linears, replayed", [("mixed", "mixed"), ("planned", "per-shape")])
def test_resume_replays_the_runs_own_plan_not_what_the_cache_says(tmp_path, mnist_slice, planning, capsys,
                                                                  recorded_linears, replayed):
    """("planned": the per-shape choice's name in plans written before it was renamed.)"""
    cfg = dict(max_steps=12, eval_every=6, amp="none")
    cut = make_trainer(tiny_config(tmp_path, **cfg), mnist_slice)
    interrupt_at(cut, 6)
    with pytest.raises(Interrupted):
        cut.run()
    path = tmp_path / "run" / "plan.json"
    recorded = json.loads(path.read_text())
    recorded["linears"] = recorded_linears  # what this run "chose": the resume must take it, whatever is measured now
    path.write_text(json.dumps(recorded))
    summary = make_trainer(tiny_config(tmp_path, resume=True, **cfg), mnist_slice).run()
    out = capsys.readouterr().out
    if plan.onednn_linear_op() is not None:
        assert summary["linears"] == replayed and f"linears: {replayed} (replayed from the recorded plan)" in out


@pytest.mark.slow
def test_plan_stock_answers_every_decision_with_pytorchs_default(tmp_path, mnist_slice, planning):
    summary = make_trainer(tiny_config(tmp_path, max_steps=3, eval_every=3, amp="none", plan="stock"),
                           mnist_slice).run()
    recorded = json.loads((tmp_path / "run" / "plan.json").read_text())
    stock = {"linear": "stock", "attention": "fused", "gelu": "stock", "adamw": "foreach", "amp": "none"}
    for key, choice in recorded["answers"].items():
        name = key.split(" ")[0]
        assert choice == stock.get(name, choice), key
    assert summary["plan"] == "stock" and recorded["linears"] in (None, "per-shape")


def test_a_plan_file_that_is_not_one_is_refused_in_one_line(tmp_path, mnist_slice):
    bad = tmp_path / "plan.json"
    bad.write_text('{"answers": [1, 2]}')
    with pytest.raises(ValueError, match=r"is not a plan: expected \{\"format\": 1, \"answers\""):
        make_trainer(tiny_config(tmp_path, max_steps=3, plan=str(bad)), mnist_slice)
    with pytest.raises(FileNotFoundError, match="no plan at"):
        make_trainer(tiny_config(tmp_path, max_steps=3, plan=str(tmp_path / "nowhere.json")), mnist_slice)


@pytest.mark.slow
def test_tune_plans_before_training_and_train_replays_its_file(tmp_path, planning, capsys, monkeypatch):
    from anyformer.cli import main
    from tests.conftest import SHARED_DATA
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    tiny = ["--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64", "--set",
            "patch_size=7", "--set", "stem=patch", "--limit-train", "512", "--limit-eval", "100", "--amp", "none",
            "--threads", "1", "--no-progress"]
    saved = tmp_path / "tuned.json"
    assert main(["tune", "mnist", "--max-steps", "6", *tiny, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    tuned = json.loads(saved.read_text())
    assert f"saved to {saved}" in out and len(tuned["answers"]) >= 3
    assert all(f"{choice:<9} {key}" in out for key, choice in tuned["answers"].items())
    assert main(["train", "mnist", "--max-steps", "6", "--eval-every", "6", *tiny, "--plan", str(saved),
                 "--out", str(tmp_path / "run")]) == 0
    assert "plan: replaying" in capsys.readouterr().out
    used = json.loads((tmp_path / "run" / "plan.json").read_text())["answers"]
    assert {k: used[k] for k in tuned["answers"]} == tuned["answers"]


# Every private kernel the plan may choose, and the compiled step, forced in turn: the suite otherwise
# runs stock, and what users get must resume as exactly as stock does (dropout and augmentation on).
FORCED = ["linear=onednn", "linear=mixed", "attention=native", "gelu=native", "linears=onednn", "compile=compiled"]


@pytest.mark.slow
@pytest.mark.parametrize("forced", FORCED)
def test_resume_is_bit_exact_with_each_private_kernel(forced, tmp_path, mnist_slice, monkeypatch):
    skip_unless_runnable(forced)
    monkeypatch.setenv("ANYFORMER_PLAN", f"stock,{forced}")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    plan.reset()
    try:
        # Heads of 16 (the native attention's sizes); dropout where it leaves attention whole to the kernel.
        shape = {"width": 64, "mlp_hidden": 128, "dropout": 0.0 if "attention" in forced else 0.1}
        kw = dict(max_steps=16, eval_every=8, augment="digits", amp="none",
                  model_overrides={**tiny_config(tmp_path).model_overrides, **shape})
        make_trainer(tiny_config(tmp_path / "a", **kw), mnist_slice).run()
        cut = make_trainer(tiny_config(tmp_path / "b", **kw), mnist_slice)
        interrupt_at(cut, 9)
        with pytest.raises(Interrupted):
            cut.run()
        make_trainer(tiny_config(tmp_path / "b", resume=True, **kw), mnist_slice).run()
        used = json.loads((tmp_path / "b" / "run" / "plan.json").read_text())
    finally:
        monkeypatch.undo()
        plan.reset()
    name, choice = forced.split("=")
    assert choice in set(used["answers"].values()) | {used["linears"], used["compile"]}, used  # the kernel did run
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert strip(tmp_path / "a" / "run" / "metrics.jsonl") == strip(tmp_path / "b" / "run" / "metrics.jsonl")


@pytest.mark.slow
def test_the_plan_times_stand_ins_not_the_runs_examples(tmp_path, mnist_slice, planning, monkeypatch):
    """Every forward the trainer's planning runs (linears, compile) sees stand-ins of the first
    batch's shapes: noise for the images, zeros for the labels; never the examples it trains on."""
    import torch
    from anyformer.train.runplan import synthetic_like
    trainer = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=2, amp="none"), mnist_slice)
    (x, y), _ = trainer.task.batch(0)
    seen = []
    monkeypatch.setattr(trainer.task, "loss", lambda m, batch, loss=trainer.task.loss: seen.append(batch) or loss(m, batch))
    trainer.tune()
    assert seen, "the plan ran no step"
    for sx, sy in seen:
        assert sx.shape == x.shape and sx.dtype == x.dtype and sy.shape == y.shape
        assert not torch.equal(sx, x) and not (sy == y).all()
        assert (sy == 0).all()
    twice = synthetic_like([x, y], seed=3), synthetic_like([x, y], seed=3)
    assert all(torch.equal(a, b) for a, b in zip(*twice))  # a private generator: the same stand-ins each time


@pytest.mark.slow
def test_a_gpus_plan_replayed_on_the_cpu_says_what_cannot_run_here(tmp_path, mnist_slice, planning, capsys):
    """A plan recorded on a GPU (its step compiled with CUDA graphs, an SDPA backend per shape)
    replayed on the CPU: one line says CUDA graphs cannot run here, the step runs eagerly, and the
    CUDA answers are kept in the record untouched beside the CPU's own."""
    gpu_plan = tmp_path / "gpu-plan.json"
    sdpa_key = ("sdpa device=cuda batch=32 heads=2 q=56 k=56 head_dim=16 dtype=bfloat16 causal=0 "
                "training=1 masked=0")
    gpu_plan.write_text(json.dumps({"format": 1, "answers": {sdpa_key: "cudnn"}, "compile": "graphs",
                                    "linears": None}))
    kw = dict(max_steps=3, eval_every=3, amp="none")
    summary = make_trainer(tiny_config(tmp_path / "gpu", plan=str(gpu_plan), **kw), mnist_slice).run()
    out = capsys.readouterr().out
    assert "compile: eager (compile=graphs cannot run here (CUDA graphs need CUDA); eager)" in out
    recorded = json.loads((tmp_path / "gpu" / "run" / "plan.json").read_text())
    assert recorded["compile"] == "eager" and recorded["answers"][sdpa_key] == "cudnn"
    assert summary["compile"] == "eager" and any(k.startswith("attention ") for k in recorded["answers"])
