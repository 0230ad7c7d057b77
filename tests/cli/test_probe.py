"""`anyformer probe` on a tiny MAE run trained from the command line, and its one-line errors."""
import json

import pytest

from .test_cli import assert_user_error, run

TINY = ["--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64", "--set", "patch_size=7",
        "--set", "decoder_width=16", "--set", "decoder_depth=1", "--set", "decoder_heads=2",
        "--set", "decoder_mlp_hidden=32"]


@pytest.fixture(scope="module")
def tiny_mae(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "mae"
    r = run("train", "mae-mnist", *TINY, "--max-steps", "12", "--batch-size", "64", "--limit-train", "1000",
            "--limit-eval", "200", "--threads", "1", "--no-progress", "--amp", "none", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "test masked-patch mse" in r.stdout and (out / "reconstruction.png").is_file()
    return out


@pytest.mark.slow
def test_probe_prints_features_and_pixels_and_json(tiny_mae):
    r = run("probe", str(tiny_mae), "--label-fraction", "0.01", "--limit-eval", "500", "--threads", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("linear probe on encoder features (32 dims): test accuracy ")
    assert lines[1].startswith("linear probe on raw pixels (784 dims): test accuracy ")
    result = json.loads(lines[2])
    assert result["train_examples"] == 600 and result["test_examples"] == 500
    # 60 labelled digits of each class: far above chance (0.1) for both, and the line shows the same figure.
    assert result["pixels_accuracy"] > 0.6 and result["features_accuracy"] > 0.3
    assert f"{result['features_accuracy']:.4f}" in lines[0]


@pytest.mark.slow
def test_probe_and_init_from_errors_are_one_line(tiny_mae, tmp_path):
    assert_user_error(run("probe", str(tmp_path)), f"no model in {tmp_path}")
    assert_user_error(run("train", "mnist-finetune", "--init-from", str(tiny_mae), "--max-steps", "1",
                          "--out", str(tmp_path / "ft")),
                      f"--init-from {tiny_mae}: backbone.blocks.0.attn.proj.bias is (32,) in that mae run but (128,)")
