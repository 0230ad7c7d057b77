"""The command line: user errors are one line and exit code 2; commands work on a real run."""
import os
import subprocess
import sys

import pytest
from PIL import Image

from tests.conftest import REPO, SHARED_DATA


def run(*args, env_extra=None):
    env = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA), **(env_extra or {})}
    env.pop("ANYFORMER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "anyformer", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


def assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anyformer: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_recipes_lists_the_recipes():
    out = run("recipes")
    assert out.returncode == 0
    for name in ("mnist", "mnist-seed", "fashion-mnist", "cifar10"):
        assert name in out.stdout


def test_unknown_recipe():
    assert_user_error(run("train", "imagenet-22k"), "unknown recipe 'imagenet-22k'", "mnist-seed")


def test_no_such_dataset(tmp_path):
    assert_user_error(run("train", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")), "nowhere")


def test_unknown_model_and_option(tmp_path):
    assert_user_error(run("train", "--model", "vit-z/9", "--out", str(tmp_path / "r")), "unknown model preset 'vit-z/9'")
    assert_user_error(run("train", "--set", "colour=1", "--out", str(tmp_path / "r")), "unknown ViTConfig option")


def test_eval_of_a_missing_run(tmp_path):
    assert_user_error(run("eval", str(tmp_path)), "config.json")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    r = run("train", "--max-steps", "30", "--eval-every", "30", "--limit-train", "1920", "--limit-eval", "300",
            "--set", "depth=2", "--set", "width=32", "--set", "heads=4", "--set", "mlp_hidden=64", "--set", "patch_size=7", "--set", "stem=patch",
            "--out", str(out), "--no-progress", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "test accuracy" in r.stdout
    return out


def test_predict_prints_top_classes_for_any_image(trained_run, tmp_path):
    img = tmp_path / "digit.png"
    Image.new("RGB", (50, 40), (255, 255, 255)).save(img)  # any size and mode is converted
    r = run("predict", str(trained_run), str(img), "--top", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(",") == 1 and str(img) in r.stdout


def test_predict_bad_image_file(trained_run, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    assert_user_error(run("predict", str(trained_run), str(bad)), "bad.png")


def test_eval_a_run(trained_run):
    r = run("eval", str(trained_run))
    assert r.returncode == 0, r.stderr
    assert "eval_accuracy" in r.stdout


def test_attention_draws_an_image_run(trained_run, tmp_path):
    from anyformer.data import read_idx
    digit = tmp_path / "seven.png"
    Image.fromarray(read_idx(SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz")[0]).save(digit)
    out = tmp_path / "attn.png"
    r = run("attention", str(trained_run), str(digit), "--out", str(out), "--layers", "0", "1", "--heads", "0", "1")
    assert r.returncode == 0, r.stderr
    with Image.open(out) as im:
        assert im.width > 400 and im.height > 300
