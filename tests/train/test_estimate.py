"""Before the first step of a run derived from an image folder, one line says how long the run expects to
take, from a few of its own steps timed and undone: the same seed trains the same bits with or without it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from anyformer.train import estimate
from tests.cli_runner import run

TINY = ["--set", "width=32", "--set", "depth=1", "--set", "heads=2", "--set", "mlp_hidden=64",
        "--set", "dropout=0.1",  # draws from the global RNG, which the timed steps must leave where it was
        "--no-progress", "--no-plots", "--threads", "1"]


def _folder(root: Path) -> Path:
    for c, cls in enumerate(("ant", "bee", "cow")):
        (root / cls).mkdir(parents=True)
        for i in range(12):
            rng = np.random.default_rng(100 * c + i)
            pixels = (rng.integers(0, 128, (20 + i % 3, 22, 3)) + 40 * c).astype(np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    return root


def _train(data: Path, out: Path, *extra: str) -> str:
    result = run("train", "--data", str(data), "--out", str(out), "--max-steps", "8", *TINY, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("extra", [(), ("--ema", "0.9", "--seed", "3")], ids=["plain", "ema"])
def test_the_estimate_is_said_before_the_first_step_and_changes_no_bit(tmp_path, monkeypatch, extra):
    data = _folder(tmp_path / "pictures")
    said = _train(data, tmp_path / "said", *extra)
    line = next(line for line in said.splitlines() if line.startswith("expected time: about "))
    assert "for 8 steps of" in line and "of the run's own steps, then undone" in line
    assert said.index(line) < said.index("step 5 |")  # before the first evaluation, after the plan
    monkeypatch.setattr(estimate, "wanted", lambda t: False)
    quiet = _train(data, tmp_path / "quiet", *extra)
    assert "expected time" not in quiet
    assert (tmp_path / "said/model.safetensors").read_bytes() == (tmp_path / "quiet/model.safetensors").read_bytes()
    assert _scores(tmp_path / "said") == _scores(tmp_path / "quiet")


def _scores(run_dir: Path) -> list[dict]:
    """Each evaluation's losses and scores (not its seconds, which differ from run to run)."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in ("time", "images_per_s", "flops_per_s")} for line in lines]


def test_a_recipe_run_says_no_estimate(tmp_path):
    data = _folder(tmp_path / "pictures")
    out = run("train", "mnist", "--data", str(data), "--out", str(tmp_path / "run"), "--max-steps", "2",
              "--model", "vit-mnist", *TINY)
    assert out.returncode == 0, out.stderr
    assert "expected time" not in out.stdout


def test_an_evaluation_counts_each_test_time_view():
    """A model scored on each picture and its four one-pixel shifts does five forwards' work a picture: the
    estimate counts them (it was five times short of a grey folder's evaluations without)."""
    from anyformer.models.vit import ViT, ViTConfig
    tiny = dict(image_size=8, patch_size=4, in_chans=1, num_classes=3, width=16, depth=1, heads=2, mlp_hidden=32)
    assert estimate._views(ViT(ViTConfig(**tiny))) == 1
    assert estimate._views(ViT(ViTConfig(**tiny, shift_average=1))) == 5
    assert estimate._views(ViT(ViTConfig(**tiny, flip_average=True))) == 2
    assert estimate._views(ViT(ViTConfig(**tiny, flip_average=True, shift_average=1))) == 6
