"""anyformer on a GPU: every recipe trains, resume and torchrun give the same bits, fp16 trains with
loss scaling, and every command works on a run trained there.

These tests skip without CUDA. `pytest -m gpu tests/gpu` runs them on a GPU machine
(benchmarks/gpu/run.sh does); `ANYFORMER_TEST_DEVICE=cpu pytest -m gpu tests/gpu` runs the same
code on the CPU, with smaller batches, so that the tests themselves are checked where no GPU is.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer import plan
from anyformer.cli import main
from anyformer.plan import compiled, planner
from anyformer.data import read_idx
from anyformer.train import RECIPES, Interrupted, Trainer, recipe_config
from anyformer.train.tasks import ImageClassification
from tests.conftest import REPO, SHARED_DATA, TEST_DEVICE
from tests.train.conftest import assert_same_checkpoints, assert_same_weights, interrupt_at, tiny_config

pytestmark = pytest.mark.gpu
DEVICE = torch.device(TEST_DEVICE)
ON_CPU = DEVICE.type == "cpu"  # the dry run: the same steps with smaller batches
TINY_VIT = ["--set", "width=48", "--set", "depth=2", "--set", "heads=4", "--set", "mlp_hidden=96",
            "--set", "patch_size=7", "--set", "head_hidden=null", "--set", "stem=patch"]


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    monkeypatch.delenv("ANYFORMER_DEBUG", raising=False)


def cli(*args: str) -> None:
    """`anyformer ARGS` in this process; a non-zero exit fails the test with the command."""
    code = main(list(args))
    assert code == 0, f"anyformer {' '.join(args)} exited {code}"


def train(out: Path, *args: str) -> dict:
    cli("train", *args, "--device", DEVICE.type, "--out", str(out), "--no-progress")
    return json.loads((out / "summary.json").read_text())


def losses(run: Path, key: str = "train_loss") -> list[float]:
    return [json.loads(line)[key] for line in (run / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_trains_on_the_device_and_its_loss_falls(recipe, tmp_path):
    """60 steps of each recipe as it is (its model, batch, precision, augmentation), 2,048 training
    examples, evaluated every 20 steps: the held-out loss after step 60 is below that after step 20.
    Held out, not the training loss, which is the mean of a few noisy batches: after 30 steps
    mnist-seed's (batch 16, a slow start) read 2.3038, 2.2978, 2.3067 on an H100. The warm-up is cut
    to 3 steps: a recipe's own (469 for mnist) would keep the rate near zero throughout. The CPU dry
    run caps image batches at 128 (cifar10's and MAE's 256 are slow there; smaller than the recipe's
    left mnist's held-out loss flat after 60 steps) and text batches at 8 sequences (shakespeare-char's
    64 x 256 tokens ran at 1,000 tokens/s on 2 cores)."""
    lm = RECIPES[recipe]["task"] == "lm"
    cap = 8 if lm else 128
    small = ["--batch-size", str(cap)] if ON_CPU and RECIPES[recipe]["batch_size"] > cap else []
    limits = ["--eval-iters", "2"] if lm else ["--limit-train", "2048", "--limit-eval", "256"]
    summary = train(tmp_path / "run", recipe, "--max-steps", "60", "--eval-every", "20", "--warmup-steps", "3",
                    *limits, *small)
    assert summary["device"].startswith(DEVICE.type)
    curve = losses(tmp_path / "run", "eval_loss")
    assert len(curve) == 3 and all(np.isfinite(curve)), curve
    assert all(np.isfinite(losses(tmp_path / "run"))), losses(tmp_path / "run")
    assert curve[-1] < curve[0], f"{recipe}: held-out loss {curve}"


@pytest.mark.parametrize("recipe", ["mnist", "cifar10", "mae-mnist", "mnist-gen", "shakespeare-char"])
def test_a_training_step_never_makes_the_host_wait_for_the_device(recipe, tmp_path):
    """A step of each kind of task (its batch, augmentation, forward, backward, clipping and update)
    queues its work and returns: under CUDA's sync debug mode "error" any call that makes the host
    wait for the device raises, with its place. A copy from pageable host memory is one such call:
    before the indices, the random draws and a count went over queued from page-locked memory, each
    step's batch waited for the last step to finish, so the host could not queue this step's kernels
    while the device ran the last one's. The statistics are read at sync points, not in these steps;
    the plan is stock (a measurement waits for the device by design). Not the series recipe: its
    model reads whether any series leaves a patch empty, to take the attention path without a mask
    when none does (models/series.py), a wait by design. The CPU dry run takes the same steps, with
    smaller batches, and checks nothing about waiting."""
    lm = RECIPES[recipe]["task"] == "lm"
    cap = 8 if lm else 128
    small = {"batch_size": cap} if ON_CPU and RECIPES[recipe]["batch_size"] > cap else {}
    limits = {"eval_iters": 2} if lm else {"limit_train": 2048, "limit_eval": 256}
    cfg = recipe_config(recipe, out=str(tmp_path / "run"), max_steps=10, device=DEVICE.type, progress=False,
                        plots=False, **limits, **small)
    t = Trainer(cfg)
    t.tune()
    t.train_step()  # first calls: cuBLAS and cuDNN handles, the allocator's first blocks
    if not ON_CPU:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            t.train_step()
    finally:
        if not ON_CPU:
            torch.cuda.set_sync_debug_mode("default")
    t.sync()
    assert math.isfinite(t.last_loss), t.last_loss


# ------------------------------------------------------------------------------ resume, fp16, torchrun
@pytest.fixture(scope="module")
def mnist_slice():
    from anyformer.data import load_image_dataset
    return (load_image_dataset(str(SHARED_DATA / "mnist"), "train"),
            load_image_dataset(str(SHARED_DATA / "mnist"), "test"))


def trainer(cfg, data) -> Trainer:
    torch.set_num_threads(cfg.threads)  # as the Trainer will, before the task sums the data's statistics
    return Trainer(cfg, task=ImageClassification(cfg, DEVICE, *data))


@pytest.fixture
def deterministic():
    """Deterministic kernels for the test, as `--deterministic` asks, and the default afterwards."""
    yield
    torch.use_deterministic_algorithms(False)


# What a GPU's plan may choose besides stock: the training step compiled with CUDA graphs and an
# SDPA backend named (math: deterministic, and it takes fp32). On the CPU dry run neither applies.
GPU_PLAN = "stock,compile=graphs,sdpa=math"


@pytest.mark.parametrize("spec", ["stock", GPU_PLAN])
def test_resume_on_the_device_continues_exactly(tmp_path, mnist_slice, deterministic, spec, monkeypatch):
    """Stopped after step 13 and resumed: the same weights, checkpoints and metrics bit for bit as
    the run that never stopped (deterministic kernels; digit augmentation drawn on the CPU), with
    the stock plan and with the GPU's own choices forced (the plan.json of the run says which ran)."""
    monkeypatch.setenv("ANYFORMER_PLAN", spec)
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    planner().reset()

    def cfg(where, **kw):
        return tiny_config(where, max_steps=24, eval_every=8, augment="digits", device=DEVICE.type,
                           deterministic=True, **kw)
    trainer(cfg(tmp_path / "a"), mnist_slice).run()
    cut = trainer(cfg(tmp_path / "b"), mnist_slice)
    interrupt_at(cut, 13)
    with pytest.raises(Interrupted, match="after step 13"):
        cut.run()
    trainer(cfg(tmp_path / "b", resume=True), mnist_slice).run()
    recorded = json.loads((tmp_path / "b" / "run" / "plan.json").read_text())
    if spec == GPU_PLAN and not ON_CPU:
        assert recorded["compile"] == "graphs", recorded
        assert any(k.startswith("sdpa ") and v == "math" for k, v in recorded["answers"].items()), recorded
    assert_same_weights(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert_same_checkpoints(tmp_path / "a" / "run", tmp_path / "b" / "run")
    strip = lambda p: [{k: v for k, v in json.loads(line).items() if k not in ("time", "images_per_s", "flops_per_s")}
                       for line in p.read_text().splitlines()]
    assert strip(tmp_path / "a" / "run" / "metrics.jsonl") == strip(tmp_path / "b" / "run" / "metrics.jsonl")


def test_the_plan_measures_what_the_device_offers(tmp_path, mnist_slice, monkeypatch):
    """With nothing forced, a run on the device plans before its first step: the SDPA backend of its
    attention (on CUDA; the attention kernel on the CPU), AdamW's implementation, and the step's
    compile (with CUDA graphs a candidate on CUDA), each measured, recorded in plan.json, and
    timed in the plan file with the candidates that ran or why they were dropped."""
    monkeypatch.setenv("ANYFORMER_PLAN", "auto")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    # A first compile on CUDA is estimated at 20 s, which these 400 steps could not repay: estimated
    # free here, so that the compile is measured (the CPU dry run keeps its estimate and stays eager).
    monkeypatch.setitem(compiled.FIRST_COMPILE_S, "cuda", 0.0)
    planner().reset()
    cfg = tiny_config(tmp_path, max_steps=400, eval_every=200, device=DEVICE.type, amp="auto")
    summary = trainer(cfg, mnist_slice).run()
    assert summary["device"].startswith(DEVICE.type)
    recorded = json.loads((tmp_path / "run" / "plan.json").read_text())
    entries = planner().snapshot()["entries"]
    by_decision = {e["decision"]: e for e in entries.values()}
    assert "adamw" in by_decision and by_decision["adamw"]["fields"]["device"] == DEVICE.type
    attention = "sdpa" if not ON_CPU else "attention"
    assert any(k.startswith(attention + " ") for k in recorded["answers"]), recorded
    if not ON_CPU:
        sdpa = by_decision["sdpa"]
        assert set(sdpa["times"]) | set(sdpa["dropped"]) == set(plan.decision("sdpa").choices)
        compile_entry = by_decision.get("compile")
        assert compile_entry is not None, f"the step's compile was not measured: {recorded}"
        assert set(compile_entry["times"]) | set(compile_entry["dropped"]) == {"eager", "compiled", "graphs"}
        assert recorded["compile"] == compile_entry["choice"]


@pytest.mark.skipif(ON_CPU, reason="fp16 with loss scaling is CUDA's: the CPU refuses --amp fp16")
def test_fp16_trains_with_loss_scaling(tmp_path, mnist_slice):
    cfg = tiny_config(tmp_path, max_steps=30, eval_every=10, amp="fp16", grad_clip=1.0, device="cuda")
    t = trainer(cfg, mnist_slice)
    assert t.scaler is not None
    summary = t.run()
    assert summary["amp"] == "fp16"
    curve = losses(tmp_path / "run")
    assert all(np.isfinite(curve)) and curve[-1] < curve[0], curve
    from anyformer.train.checkpoint import list_checkpoints, load_checkpoint
    assert load_checkpoint(list_checkpoints(tmp_path / "run")[-1])["scaler"]["scale"] > 0


TORCHRUN_ARGS = ["train", *TINY_VIT, "--set", "bias=false", "--model", "vit-mnist", "--amp", "none",
                 "--augment", "digits", "--max-steps", "20", "--eval-every", "10", "--limit-train", "640",
                 "--limit-eval", "200", "--batch-size", "32", "--lr", "3e-3", "--warmup-steps", "5",
                 "--no-progress", "--deterministic", "--device", DEVICE.type]


def run_anyformer(*args: str, launcher: list[str]) -> None:
    env = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA)}
    env.pop("ANYFORMER_DEBUG", None)
    r = subprocess.run([sys.executable, *launcher, "-m", "anyformer", *args], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_torchrun_on_one_device_equals_one_process(engine, tmp_path):
    """torchrun with one process joins a real group (NCCL on CUDA, gloo on the CPU) and wraps the
    model in DDP or FSDP2: the same weights as the plain process, to rounding."""
    from tests.train.test_distributed import free_port, max_diff
    run_anyformer(*TORCHRUN_ARGS, "--out", str(tmp_path / "one"), launcher=[])
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node=1", f"--master_port={free_port()}"]
    extra = ["--fsdp"] if engine == "fsdp" else []
    run_anyformer(*TORCHRUN_ARGS, *extra, "--out", str(tmp_path / "ranks"), launcher=launcher)
    summary = json.loads((tmp_path / "ranks" / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["device"].startswith(DEVICE.type)
    assert max_diff(tmp_path / "one", tmp_path / "ranks") <= 1e-5


# --------------------------------------------------------------------------- commands on a device's run
@pytest.fixture(scope="module")
def device_runs(tmp_path_factory):
    """A classifier, a language model and a generator, each trained briefly on the device."""
    root = tmp_path_factory.mktemp("device-runs")
    os.environ["ANYFORMER_DATA"] = str(SHARED_DATA)
    try:
        train(root / "vit", "--max-steps", "40", "--eval-every", "40", "--limit-train", "2048", "--limit-eval",
              "256", "--batch-size", "64", *TINY_VIT)
        (root / "text.txt").write_text((SHARED_DATA / "tinyshakespeare" / "input.txt").read_text()[:100_000])
        train(root / "lm", "shakespeare-cpu", "--data", str(root / "text.txt"), "--max-steps", "20", "--eval-every",
              "20", "--batch-size", "8", "--set", "width=64", "--set", "depth=2", "--set", "heads=4")
        train(root / "dit", "mnist-gen", "--max-steps", "10", "--eval-every", "10", "--limit-train", "512",
              "--limit-eval", "64", "--batch-size", "32", "--set", "width=32", "--set", "depth=1", "--set", "heads=2",
              "--set", "mlp_hidden=64", "--judge-samples", "10")
    finally:
        os.environ.pop("ANYFORMER_DATA", None)
    digit = read_idx(SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz")[0]
    Image.fromarray(digit).save(root / "digit.png")
    return root


def test_predict_attention_eval_and_export_work_on_a_device_run(device_runs, tmp_path, capsys):
    vit = device_runs / "vit"
    assert json.loads((vit / "summary.json").read_text())["device"].startswith(DEVICE.type)
    cli("eval", str(vit))
    cli("predict", str(vit), str(device_runs / "digit.png"))
    assert "digit.png" in capsys.readouterr().out
    cli("attention", str(vit), str(device_runs / "digit.png"), "--out", str(tmp_path / "attn.png"))
    assert Image.open(tmp_path / "attn.png").size[0] > 0
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    cli("export", str(vit), "--format", "onnx", "--out", str(tmp_path / "vit.onnx"))
    assert (tmp_path / "vit.onnx").stat().st_size > 0


def test_generate_and_sample_work_on_device_runs(device_runs, tmp_path, capsys):
    cli("generate", str(device_runs / "lm"), "--prompt", "ROMEO:", "--max-new-tokens", "20", "--seed", "1")
    assert capsys.readouterr().out.startswith("ROMEO:")
    cli("sample", str(device_runs / "dit"), "--classes", "0-1", "--per-class", "1", "--steps", "2",
        "--out", str(tmp_path / "samples"))
    assert (tmp_path / "samples" / "grid.png").stat().st_size > 0


def test_serve_answers_for_a_device_run(device_runs):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from starlette.testclient import TestClient
    from anyformer.serve.app import create_app
    with TestClient(create_app(str(device_runs / "vit"))) as client:
        assert client.get("/api/info").json()["family"] == "vit"
        png = (device_runs / "digit.png").read_bytes()
        answer = client.post("/api/predict", content=png, headers={"content-type": "image/png"})
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["top"]) > 0


# ------------------------------------------------------------------------------------------ generation
def test_greedy_generate_cached_equals_uncached_on_the_device():
    """Greedy decoding through the key/value cache gives the tokens of the uncached model (fp32
    products, not TF32: a near tie between two logits must not be decided by rounding)."""
    import anyformer as af
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        gpt = af.GPT.preset("shakespeare-char", vocab_size=65, context=128, dropout=0.0).to(DEVICE).eval()
        prompt = torch.randint(0, 65, (2, 7), generator=torch.Generator().manual_seed(0)).to(DEVICE)
        cached = gpt.generate(prompt, 40, temperature=0)
        uncached = gpt.generate(prompt, 40, temperature=0, use_cache=False)
    finally:
        torch.set_float32_matmul_precision(before)
    assert cached.device.type == DEVICE.type
    assert torch.equal(cached, uncached)


def test_sampling_with_a_cpu_generator_repeats_on_the_device():
    """The CLI and the server seed a CPU generator: sampling on the device takes it, and one seed
    gives the same tokens twice."""
    import anyformer as af
    gpt = af.GPT.preset("shakespeare-char", vocab_size=65, context=128, dropout=0.0).to(DEVICE).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=DEVICE)
    draw = lambda: gpt.generate(prompt, 30, temperature=0.8, top_k=20, generator=torch.Generator().manual_seed(3))
    assert torch.equal(draw(), draw())
