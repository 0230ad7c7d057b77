"""A catalogue of bad inputs, through the API and the command line. Each ends in a clear error: a
ValueError or TypeError that says what was expected and what came, or on the command line one
line, exit code 2, and no traceback.

NaN images: the model does not look for them. A check would cost a reduction over every input in
every forward, and NaN cannot arrive by the ordinary paths: datasets and `anyformer predict` read
uint8 pixels, and an ImageDataset refuses anything else. A NaN passed to a model by hand stays in
its own row of the output (each image is computed independently), and in training it makes the loss
non-finite, which stops the run with the step named (tests/train/test_trainer.py).
"""
import json
import re
import subprocess
import sys

import pytest
import torch

import anyformer as af
from anyformer.cli import main
from anyformer.data import DataError, ImageDataset, load_image_dataset
from anyformer.train import TrainConfig
from anyformer.train.tasks import ImageClassification
from anyformer.train.trainer import build_model
from tests.conftest import REPO, SHARED_DATA


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see tests/conftest.py


@pytest.fixture(scope="module")
def vit():
    return af.ViT.preset("vit-mnist", depth=1, width=32, heads=4, mlp_hidden=32).eval()


@pytest.fixture(scope="module")
def gpt():
    return af.GPT.preset("shakespeare-char", depth=1, width=32, heads=4, context=16, dropout=0.0).eval()


# ------------------------------------------------------------------------------------------ API
@pytest.mark.parametrize("images, error, message", [
    (torch.randn(2, 3, 28, 28), ValueError, r"expected 1 image channels, got 3"),
    (torch.randn(2, 1, 32, 32), ValueError, r"expected images of size 28x28 .*got 32x32"),
    (torch.randn(1, 28, 28), ValueError, r"expected images of shape \(B, C, H, W\), got a tensor of rank 3"),
    (torch.zeros(2, 1, 28, 28, dtype=torch.uint8), TypeError, r"floating-point tensor, got dtype torch.uint8"),
])
def test_vit_rejects_bad_images(vit, images, error, message):
    with pytest.raises(error, match=message):
        vit(images)


@pytest.mark.parametrize("ids, error, message", [
    (torch.rand(2, 5), TypeError, r"integer tensor, got dtype torch.float32"),
    (torch.tensor([[1, 2, 65]]), ValueError, r"must lie in \[0, 65\); got values in \[1, 65\]"),
    (torch.tensor([[-1, 2]]), ValueError, r"must lie in \[0, 65\)"),
    (torch.tensor([1, 2, 3]), ValueError, r"shape \(B, T\), got \(3,\)"),
    (torch.zeros(1, 17, dtype=torch.long), ValueError, r"17 tokens is longer than the model's context \(16\)"),
])
def test_gpt_rejects_bad_token_ids(gpt, ids, error, message):
    with pytest.raises(error, match=message):
        gpt(ids)


def test_generate_rejects_impossible_requests(gpt):
    prompt = torch.zeros(1, 4, dtype=torch.long)
    assert gpt.generate(prompt, 13).shape == (1, 17)  # past the context of 16: the window slides
    with pytest.raises(ValueError, match=r"max_new_tokens and temperature must be >= 0"):
        gpt.generate(prompt, -1)
    with pytest.raises(ValueError, match=r"top_p in \(0, 1\]"):
        gpt.generate(prompt, 2, top_p=0.0)
    with pytest.raises(ValueError, match=r">= 0"):
        gpt.generate(prompt, 2, temperature=-1.0)


def test_backbone_and_encoder_reject_bad_shapes_and_masks():
    trunk = af.Transformer(width=32, depth=1, heads=4)
    with pytest.raises(ValueError, match=r"expected tokens of shape \(B, N, 32\), got \(2, 5, 16\)"):
        trunk(torch.randn(2, 5, 16))
    with pytest.raises(TypeError, match=r"mask must be a bool tensor .*got dtype torch.float32"):
        trunk(torch.randn(2, 5, 32), mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"key-padding mask must have shape \(B, Nk\) = \(2, 5\), got \(2, 4\)"):
        trunk(torch.randn(2, 5, 32), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attention layers must be ints in \[-1, 1\); got 3"):
        trunk(torch.randn(2, 5, 32), return_attention=[3])
    enc = af.TextEncoder.from_config(dict(vocab_size=50, width=32, depth=1, heads=4, mlp_hidden=32))
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids \(2, 5\), got \(2, 4\)"):
        enc(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4, dtype=torch.long))


@pytest.mark.parametrize("overrides, message", [
    (dict(width=-1), r"width must be a positive integer, got -1"),
    (dict(depth=0), r"depth must be a positive integer, got 0"),
    (dict(heads=5), r"width must be divisible by heads: got width=128, heads=5"),
    (dict(patch_size=5), r"image size 28x28 is not divisible by the patch size 5x5"),
    (dict(position="hexagonal"), r"unknown ViT position 'hexagonal'"),
    (dict(pool="max"), r"unknown pooling 'max'"),
    (dict(class_token=False), r"pool='cls' needs a class token"),
    (dict(colour=3), r"unknown ViTConfig option\(s\) \['colour'\]"),
])
def test_bad_model_settings(overrides, message):
    with pytest.raises(ValueError, match=message):
        af.ViT.preset("vit-mnist", **overrides)


def test_absurd_sizes_are_refused_before_any_memory_is_taken(tmp_path):
    """An image of 10**6 pixels a side, or a width of a million: a clear refusal, at once."""
    train = ImageDataset(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.arange(4) % 2, ["a", "b"], "t")
    base = dict(out=str(tmp_path), max_steps=1, threads=1, progress=False)
    cfg = TrainConfig(model_overrides=dict(image_size=10**6), **base)
    with pytest.raises(ValueError, match=r"image_size=1000000 contradicts the data, which needs image_size=\[28, 28\]"):
        build_model(cfg, ImageClassification(cfg, torch.device("cpu"), train, train))
    cfg = TrainConfig(model_overrides=dict(width=10**6, heads=8), **base)
    with pytest.raises(ValueError, match=r"this model has [\d,]+ parameters and needs about [\d,.]+ GiB to train"):
        build_model(cfg, ImageClassification(cfg, torch.device("cpu"), train, train))
    cfg = TrainConfig(model_overrides=dict(depth=2.5), **base)
    with pytest.raises(ValueError, match=r"--set depth=2.5: expected an integer"):
        build_model(cfg, ImageClassification(cfg, torch.device("cpu"), train, train))


@pytest.mark.parametrize("settings, message", [
    (dict(batch_size=0), r"batch_size and grad_accum must be >= 1, got 0, 1"),
    (dict(batch_size=32, grad_accum=3), r"batch_size \(32\) must be divisible by grad_accum \(3\)"),
    (dict(epochs=0), r"give a positive --epochs or --max-steps"),
    (dict(lr=-1.0), r"lr must be > 0"),
    (dict(amp="fp8"), r"unknown amp 'fp8'"),
    (dict(fsdp="yes"), r"fsdp must be true or false, got 'yes'"),
])
def test_bad_training_settings(settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        TrainConfig(**settings)


def test_empty_and_malformed_datasets(tmp_path):
    (tmp_path / "empty" / "train" / "cat").mkdir(parents=True)
    with pytest.raises(DataError, match=r"no images found in"):
        load_image_dataset(str(tmp_path / "empty"), "train")
    some = ImageDataset(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long), ["a"], "s")
    nan_images = torch.full((2, 1, 28, 28), float("nan"))
    with pytest.raises(DataError, match=r"images must be a uint8 tensor \(N, C, H, W\), got torch.float32"):
        ImageDataset(nan_images, torch.zeros(2, dtype=torch.long), ["a"], "nan")
    with pytest.raises(DataError, match=r"labels span \[0, 3\] but there are 2 classes"):
        ImageDataset(some.images, torch.tensor([0, 1, 2, 3]), ["a", "b"], "labels")


def test_a_nan_image_stays_in_its_own_row(vit):
    images = torch.randn(3, 1, 28, 28)
    clean = vit(images)
    images[1, 0, 5, 5] = float("nan")
    with torch.no_grad():
        out = vit(images)
    assert torch.isnan(out[1]).all()
    assert torch.isfinite(out[[0, 2]]).all() and torch.allclose(out[[0, 2]], clean[[0, 2]], atol=1e-6)


def test_loading_damaged_or_foreign_model_files(vit, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no model in .*expected .*config.json"):
        af.load(tmp_path / "nothing")
    vit.save(tmp_path / "ok")
    (tmp_path / "ok" / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match=r"model.safetensors is not a readable safetensors file"):
        af.load(tmp_path / "ok")
    vit.save(tmp_path / "other")
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    config["config"]["width"] = 64
    (tmp_path / "other" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"does not fit the model in config.json"):
        af.load(tmp_path / "other")
    (tmp_path / "other" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON"):
        af.load(tmp_path / "other")


# ------------------------------------------------------------------------------ command line
TINY = ["--model", "vit-mnist", "--set", "width=48", "--set", "depth=2", "--set", "heads=4", "--set", "mlp_hidden=96",
        "--set", "patch_size=7", "--max-steps", "2", "--limit-train", "64", "--limit-eval", "32", "--no-progress", "--threads", "1"]

CLI_CASES = {
    "batch size 0": (["--batch-size", "0"], "batch_size and grad_accum must be >= 1, got 0"),
    "negative width": (["--set", "width=-1"], "width must be a positive integer, got -1"),
    "fractional depth": (["--set", "depth=2.5"], "--set depth=2.5: expected an integer"),
    "text for a number": (["--set", "width=abc"], '--set width="abc": expected an integer'),
    "image size 10**6": (["--set", "image_size=1000000"], "contradicts the data, which needs image_size=[28, 28]"),
    "a million wide": (["--set", "width=1000000", "--set", "heads=8"], "GiB to train"),
    "heads not dividing": (["--set", "heads=5"], "width must be divisible by heads: got width=48, heads=5"),
    "unknown model option": (["--set", "colour=3"], "unknown ViTConfig option(s) ['colour']"),
    "wrong model family": (["--model", "gpt2"], "model 'gpt2' is a gpt model, but task 'classify' trains vit"),
    "zero threads": (["--threads", "0"], "threads must be >= 1, got 0"),
    "lr below zero": (["--lr", "-1"], "lr must be > 0"),
    "unknown option": (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    "not a number": (["--batch-size", "many"], "argument --batch-size: invalid int value: 'many'"),
    "unknown choice": (["--amp", "fp8"], "argument --amp: invalid choice: 'fp8'"),
    "no such data": (["--data", "/nonexistent/digits"], "no dataset '/nonexistent/digits'"),
    "empty data folder": (["--data", "{empty}"], "is empty (hidden files aside); expected class folders of images"),
    "unreadable data file": (["--data", "{garbage}"], "unsupported dataset file"),
    "out under a file": (["--out", "{garbage}/run"], "cannot create the run directory {garbage}/run: Not a directory"),
    "fp16 on a CPU": (["--amp", "fp16", "--device", "cpu"], "--amp fp16 needs a CUDA device"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_the_command_line_answers_bad_input_in_one_line(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.tar").write_bytes(b"this is not a tar file")
    extra, fragment = CLI_CASES[case]
    extra = [a.format(empty=tmp_path / "empty", garbage=tmp_path / "garbage.tar") for a in extra]
    try:
        code = main(["train", *TINY, "--out", str(tmp_path / "run"), *extra])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out = capsys.readouterr()
    assert code == 2, out
    assert out.err.count("\n") == 1 and out.err.startswith("anyformer: error: "), out.err
    assert fragment.format(garbage=tmp_path / "garbage.tar") in out.err


def test_eval_and_predict_of_damaged_runs(vit, tmp_path, capsys):
    vit.save(tmp_path / "run")
    (tmp_path / "run" / "model.safetensors").write_bytes(b"garbage")
    weights = tmp_path / "run" / "model.safetensors"
    nowhere = tmp_path / "nowhere"
    for argv, message in (
            (["eval", str(tmp_path / "run")], f"{weights} is not a readable safetensors file"),
            (["predict", str(tmp_path / "run"), "x.png"], f"{weights} is not a readable safetensors file"),
            (["generate", str(nowhere), "--prompt", "hi"],
             f"no model in {nowhere}: expected {nowhere / 'config.json'}")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"anyformer: error: {message}"), err


def test_eval_and_predict_of_a_model_without_its_run(vit, tmp_path, capsys):
    """A model saved by `model.save` has no training settings or data: eval and predict say so."""
    vit.save(tmp_path / "plain")
    assert main(["eval", str(tmp_path / "plain")]) == 2
    assert capsys.readouterr().err == (f"anyformer: error: {tmp_path / 'plain'} holds a model but no training "
                                       f"settings; `anyformer eval` needs a run directory written by "
                                       f"`anyformer train`\n")
    assert main(["predict", str(tmp_path / "plain"), "x.png"]) == 2
    assert capsys.readouterr().err == (f"anyformer: error: {tmp_path / 'plain'} is not an image classifier run "
                                       f"(its data kind is None)\n")


def test_a_real_process_prints_one_line_and_no_usage():
    r = subprocess.run([sys.executable, "-m", "anyformer", "train", "--epochs", "many"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2
    assert r.stderr == ("anyformer: error: argument --epochs: invalid float value: 'many' "
                        "(see `anyformer train --help`)\n")


@pytest.mark.parametrize("field, value, fragment", [
    ("label_smoothing", 5.0, "label_smoothing must be in [0, 1)"),
    ("limit_train", 0, "limit_train must be >= 1"),
    ("keep_checkpoints", 0, "keep_checkpoints must be >= 1"),
    ("warmup_steps", -1, "warmup_steps must be >= 0"),
    ("grad_clip", 0.0, "grad_clip must be > 0"),
    ("min_lr_ratio", 2.0, "min_lr_ratio must be in [0, 1]"),
])
def test_training_settings_out_of_range_are_named(field, value, fragment):
    from anyformer.train import TrainConfig
    with pytest.raises(ValueError, match=re.escape(fragment)):
        TrainConfig(**{field: value})


def test_an_empty_dataset_given_by_the_caller_is_refused_not_replaced():
    import torch
    from anyformer.data import ImageDataset
    from anyformer.train import TrainConfig
    from anyformer.train.tasks import ImageClassification
    empty = ImageDataset(torch.zeros(0, 1, 28, 28, dtype=torch.uint8), torch.zeros(0, dtype=torch.long),
                         [str(i) for i in range(10)], "empty")
    with pytest.raises(ValueError, match=re.escape("dataset 'mnist' has no examples in its train or test split "
                                                   "(0 train, 0 test)")):
        ImageClassification(TrainConfig(), torch.device("cpu"), empty, empty)
