"""Training curves and the confusion matrix."""
import json

import numpy as np
import pytest
from PIL import Image

from anyformer.viz import plot_confusion, plot_curves, read_metrics


def metrics() -> list[dict]:
    out = [dict(step=s, epoch=s // 50, train_loss=2.3 * 0.99 ** s + 0.05, lr=1e-3 * min(1.0, s / 20),
                images_per_s=2500.0 + s) for s in range(0, 200, 10)]
    out += [dict(step=s, epoch=s // 50, eval_loss=2.0 * 0.99 ** s + 0.1, eval_accuracy=1 - 0.9 * 0.98 ** s)
            for s in (50, 100, 150, 200)]
    return out


def read_png(path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


@pytest.mark.slow
def test_curves_from_a_list(tmp_path):
    px = read_png(plot_curves(metrics(), tmp_path / "curves.png", figsize=(12, 4), dpi=50))
    assert px.shape == (200, 600, 3)
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 20


@pytest.mark.slow
def test_curves_panels_follow_the_keys_present(tmp_path):
    full = read_png(plot_curves(metrics(), tmp_path / "full.png"))
    loss_only = read_png(plot_curves([{"step": i, "train_loss": 1 / (i + 1)} for i in range(5)],
                                     tmp_path / "loss.png"))
    assert full.shape[1] == 4 * loss_only.shape[1]  # loss, accuracy, lr, throughput vs loss alone


def test_curves_from_metrics_jsonl(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps(r) for r in metrics()]
    lines.insert(3, "")
    lines.append(json.dumps({"epoch": 4, "eval_loss": None, "eval_accuracy": float("nan")}))
    path.write_text("\n".join(lines) + "\n")
    assert len(read_metrics(path)) == len(metrics()) + 1
    assert read_png(plot_curves(path, tmp_path / "c.png", dpi=40)).shape[0] == int(3.8 * 40)


def test_curves_without_step_use_epoch(tmp_path):
    recs = [{"epoch": e, "eval_loss": 1.0 / e, "eval_accuracy": 0.5 + e / 20} for e in range(1, 6)]
    assert read_png(plot_curves(recs, tmp_path / "e.png", figsize=(8, 3), dpi=50)).shape == (150, 400, 3)


def test_curves_refuse_bad_input(tmp_path):
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1, "train_loss": 2.0}\n{"step": 2, "train_loss": \n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        plot_curves(bad, tmp_path / "x.png")
    with pytest.raises(ValueError, match="no metrics to plot"):
        plot_curves([{"step": 1, "note": "hi"}], tmp_path / "x.png")
    with pytest.raises(FileNotFoundError, match=r"no metrics file at .*missing\.jsonl \(expected metrics\.jsonl"):
        plot_curves(tmp_path / "missing.jsonl", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_confusion_matrix(tmp_path):
    rng = np.random.default_rng(0)
    cm = rng.integers(0, 30, (10, 10)) + np.diag(rng.integers(800, 1000, 10))
    px = read_png(plot_confusion(cm, [f"class {i}" for i in range(10)], tmp_path / "cm.png",
                                 figsize=(7, 6), dpi=50))
    assert px.shape == (300, 350, 3)
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 20
    assert read_png(plot_confusion(np.eye(3, dtype=int) * 5, None, tmp_path / "small.png")).shape[0] > 0


def test_confusion_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match="square"):
        plot_confusion(np.ones((3, 4)), None, tmp_path / "x.png")
    with pytest.raises(ValueError, match="2 class names"):
        plot_confusion(np.ones((3, 3)), ["a", "b"], tmp_path / "x.png")
    with pytest.raises(ValueError, match="non-negative"):
        plot_confusion(-np.ones((2, 2)), None, tmp_path / "x.png")
