"""`anyformer sample` and `anyformer eval` on a generator run; classifier runs refused in one line."""
import numpy as np
import pytest
from PIL import Image

import anyformer as af
from anyformer.train import TrainConfig

from tests.conftest import SHARED_DATA

from .test_cli import assert_user_error, run

TINY = dict(image_size=28, in_chans=1, num_classes=10, patch_size=7, width=32, depth=1, heads=4, mlp_hidden=64,
            time_freq_dim=16, predict="v")


@pytest.fixture(scope="module")
def generator_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "run"
    train = TrainConfig(task="flow", model="dit-mnist", data=str(SHARED_DATA / "mnist"), limit_eval=50,
                        model_overrides=TINY).to_dict()
    data = {"kind": "images", "generator": "flow", "classes": [str(i) for i in range(10)], "channels": 1,
            "image_size": [28, 28], "preprocess": {"kind": "image", "mean": [0.5], "std": [0.5], "channels": 1,
                                                   "image_size": [28, 28]}}
    af.DiT.from_config(TINY).save(out, extra={"train": train, "data": data})
    return out


@pytest.mark.slow
def test_sample_writes_a_grid_and_an_npz(generator_run, tmp_path):
    out = tmp_path / "s"
    result = run("sample", str(generator_run), "--classes", "3,5-6", "--per-class", "2", "--steps", "2",
                 "--cfg", "1.5", "--seed", "4", "--method", "euler", "--out", str(out))
    assert result.returncode == 0, result.stderr
    with np.load(out / "samples.npz") as f:
        images, labels = f["images"], f["labels"]
    assert images.dtype == np.uint8 and images.shape == (6, 28, 28)  # grey: N x H x W
    assert labels.tolist() == [3, 3, 5, 5, 6, 6]
    with Image.open(out / "grid.png") as im:
        rows, cols = 3, 2
        assert im.size == (cols * (56 + 2) + 2, rows * (56 + 2) + 2)  # each image magnified twice, 2-pixel frames
    again = tmp_path / "t"
    run("sample", str(generator_run), "--classes", "3,5-6", "--per-class", "2", "--steps", "2", "--cfg", "1.5",
        "--seed", "4", "--method", "euler", "--out", str(again))
    with np.load(again / "samples.npz") as f:
        assert np.array_equal(f["images"], images)  # a seed gives the same images


@pytest.mark.slow
def test_sample_refuses_a_classifier_run_and_a_foreign_class(generator_run, tmp_path):
    clf = tmp_path / "clf"
    af.ViT.preset("vit-mnist", depth=1, width=32, heads=4, mlp_hidden=32, head_hidden=None).save(clf)
    assert_user_error(run("sample", str(clf), "--out", str(tmp_path / "x")), "holds a vit model, not a generator")
    assert_user_error(run("sample", str(generator_run), "--classes", "8-11", "--out", str(tmp_path / "x")),
                      "class 10 is not one of this model's classes (0-9)")
    assert_user_error(run("sample", str(generator_run), "--classes", "two", "--out", str(tmp_path / "x")),
                      "--classes expects class numbers and ranges such as 0-9 or 3,5,7")


@pytest.mark.slow
def test_eval_of_a_generator_prints_its_held_out_flow_loss(generator_run):
    result = run("eval", str(generator_run))
    assert result.returncode == 0, result.stderr
    assert '"eval_loss": 1.' in result.stdout  # an untrained DiT predicts v = 0: about 1.8 per pixel


@pytest.mark.slow
def test_eval_judge_refuses_a_judge_of_other_classes_and_one_that_is_not_a_classifier(generator_run, tmp_path):
    clf = tmp_path / "fashion-clf"
    fashion = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
    train = TrainConfig(task="classify", model="vit-mnist", data="fashion-mnist").to_dict()
    data = {"kind": "images", "dataset": "fashion-mnist", "classes": fashion, "channels": 1, "image_size": [28, 28],
            "preprocess": {"kind": "image", "mean": [0.3], "std": [0.35], "channels": 1, "image_size": [28, 28]}}
    af.ViT.preset("vit-mnist", depth=1, width=32, heads=4, mlp_hidden=32, head_hidden=None).save(
        clf, extra={"train": train, "data": data})
    judged = ("eval", str(generator_run), "--per-class", "1", "--cfg", "1", "--steps", "1", "--judge")
    assert_user_error(run(*judged, str(clf)), "knows the classes ['T-shirt/top'")
    assert_user_error(run(*judged, str(generator_run)), "not an image classifier")
