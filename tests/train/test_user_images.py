"""A classifier on a folder of images as people have it: no test split (a seeded stratified share is
held out and scored as validation), or train/ with val/ or test/; refusals in one line; a finished
run scored again on exactly the same examples, or on other data with its classes; and a picture it
classifies read exactly as the training images were."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import anyformer as af
from anyformer.data import DataError, DataWarning
from anyformer.train import Trainer, TrainConfig
from anyformer.train.classify import ImageClassification, image_splits
from anyformer.train.distributed import Distributed
from anyformer.train.tasks import make_task

CLASSES = ("cat", "dog", "owl")
TINY = dict(width=32, depth=1, heads=2, mlp_hidden=64, head_hidden=None, patch_size=8, final_norm=True)


def _picture(path: Path, w: int, h: int, seed: int, grey: bool = False) -> Path:
    """Random pixels (so no two images are alike), brightened by class so that classes differ."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 128, (h, w) if grey else (h, w, 3), dtype=np.uint8) + np.uint8(40 * (seed % 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path)
    return path


def _folder(root: Path, per_class: int = 10, classes=CLASSES, split: str = "", seed: int = 0,
            grey: bool = False) -> Path:
    """<root>/[split/]<class>/<i>.png (or .jpg), of mixed sizes around 20 pixels."""
    for c, cls in enumerate(classes):
        for i in range(per_class):
            s = seed + 3 * (c * per_class + i) + c  # seed % 3 == class index: the class's brightness
            ext = "png" if i % 2 else "jpg"
            _picture(root / split / cls / f"{i:02d}.{ext}", 18 + i % 5, 20 + i % 7, s, grey)
    return root


def _cfg(tmp_path: Path, data: Path, **kw) -> TrainConfig:
    values = dict(recipe="test", model="vit-mnist", model_overrides=dict(TINY), data=str(data),
                  out=str(tmp_path / "run"), batch_size=8, lr=3e-3, progress=False, plots=False, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def _keys(images: torch.Tensor) -> list[bytes]:
    return [bytes(x.numpy().tobytes()) for x in images]


def _task(cfg: TrainConfig, **kw) -> ImageClassification:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean folder is loaded without a word
        return ImageClassification(cfg, torch.device("cpu"), **kw)


# --------------------------------------------------------------------------- no test split: a held-out share


def test_a_folder_without_a_test_split_holds_out_a_seeded_stratified_share(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    task = _task(_cfg(tmp_path, data, seed=3))
    assert task.eval_split == "validation" and task.splits.eval_source == "held out"
    assert len(task.train) == 24 and len(task.test) == 6  # 20% of each class of 10
    assert torch.bincount(task.test.labels).tolist() == [2, 2, 2]
    train, held = set(_keys(task.train.images)), set(_keys(task.test.images))
    assert len(train) == 24 and len(held) == 6 and not train & held, "an example is on both sides"
    # Sizes differ (18-22 x 20-26): derived 16x16 (median shorter side 20 -> 16), colour.
    assert tuple(task.train.images.shape[1:]) == (3, 16, 16)
    info = task.run_info()
    assert (info["eval_split"], info["held_out_fraction"], info["held_out_examples"]) == ("validation", 0.2, 6)
    assert (info["train_examples"], info["test_examples"]) == (24, 6)
    assert info["image_size_derived"].startswith("16x16: ")
    assert task.summary_fields({"eval_accuracy": 0.5, "eval_loss": 1.0}, []) == {
        "val_accuracy": 0.5, "val_loss": 1.0, "eval_split": "validation"}
    # The same (data, seed, fraction) hold out the same examples; another seed others.
    again = _task(_cfg(tmp_path, data, seed=3))
    assert _keys(again.test.images) == _keys(task.test.images)
    other = _task(_cfg(tmp_path, data, seed=4))
    assert set(_keys(other.test.images)) != held
    assert set(_keys(other.test.images)) | set(_keys(other.train.images)) == train | held
    fifth = _task(_cfg(tmp_path, data, seed=3, val_fraction=0.3))
    assert len(fifth.test) == 9 and fifth.run_info()["held_out_fraction"] == 0.3


def test_limits_cut_after_the_hold_out(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    whole = _task(_cfg(tmp_path, data))
    cut = _task(_cfg(tmp_path, data, limit_train=5, limit_eval=3))
    assert torch.equal(cut.train.images, whole.train.images[:5]) and torch.equal(cut.test.images, whole.test.images[:3])
    assert cut.run_info()["held_out_examples"] == 6
    assert image_splits(_cfg(tmp_path, data, limit_eval=3))[1].images.shape[0] == 3  # the shared entry point too


def test_a_finished_run_is_scored_again_on_exactly_its_held_out_examples(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    trained = _task(_cfg(tmp_path, data, seed=7, limit_eval=5))
    info = json.loads(json.dumps(trained.run_info()))  # as config.json holds it
    scored = _task(TrainConfig.from_dict({**_cfg(tmp_path, data, seed=7, limit_eval=5).to_dict(), "limit_train": 1}),
                   info=info)
    assert torch.equal(scored.test.images, trained.test.images) and torch.equal(scored.test.labels, trained.test.labels)
    assert scored.eval_split == "validation" and scored.preprocess.to_dict() == trained.preprocess.to_dict()


def test_split_folders_choose_the_eval_split(tmp_path: Path) -> None:
    with_val = _folder(_folder(tmp_path / "a", split="train"), per_class=2, split="val", seed=500)
    task = _task(_cfg(tmp_path, with_val))
    assert (task.eval_split, task.splits.eval_source, len(task.train), len(task.test)) == ("validation", "val", 30, 6)
    assert task.run_info().get("held_out_fraction") is None
    with_test = _folder(_folder(with_val, per_class=3, split="test", seed=900), per_class=0)
    task = _task(_cfg(tmp_path, with_test))
    assert (task.eval_split, len(task.train), len(task.test)) == ("test", 30, 9)
    assert "test_accuracy" in task.summary_fields({"eval_accuracy": 1.0, "eval_loss": 0.0}, [])
    only_train = _folder(tmp_path / "b", split="train")
    task = _task(_cfg(tmp_path, only_train))
    assert (task.eval_split, task.splits.eval_source, len(task.test)) == ("validation", "held out", 6)


def test_a_colour_image_in_the_test_split_alone_keeps_the_shapes(tmp_path: Path) -> None:
    data = _folder(tmp_path / "d", split="train", grey=True)
    _folder(data, per_class=1, split="test", grey=True)
    _picture(data / "test" / "cat" / "colour.png", 20, 20, 5)
    task = _task(_cfg(tmp_path, data))
    assert task.train.channels == task.test.channels == 1 and len(task.test) == 4


def test_stray_and_broken_files_are_said_once_for_every_split(tmp_path: Path) -> None:
    data = _folder(_folder(tmp_path / "e", split="train"), per_class=2, split="test")
    (data / "README.txt").write_text("my pets")
    (data / "test" / "dog" / ".DS_Store").write_bytes(b"\0")
    (data / "train" / "owl" / "00.jpg").write_bytes((data / "train" / "owl" / "00.jpg").read_bytes()[:300])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = ImageClassification(_cfg(tmp_path, data), torch.device("cpu"))
    lines = [str(w.message) for w in caught if w.category is DataWarning]
    assert len(caught) == 2 and len(lines) == 2, [str(w.message) for w in caught]
    assert lines[0] == f"skipped 2 files that are not images in {data}: README.txt, test/dog/.DS_Store"
    assert lines[1].startswith(f"skipped 1 unreadable image in {data}: train/owl/00.jpg (")
    assert len(task.train) == 29
    info = task.run_info()
    assert info["skipped_files"] == 2 and info["unreadable_images"] == ["train/owl/00.jpg"]


# --------------------------------------------------------------------------- refusals


def _empty(root: Path) -> Path:
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "notes.txt").write_text("pictures to come")
    return root


@pytest.mark.parametrize("make, message", [
    (_empty, r"^no images found in .*: expected <class>/<image>"),
    (lambda root: _folder(root, classes=("cat",)), r"holds one class only \('cat', 10 examples\)"),
    (lambda root: _folder(_folder(root, classes=("cat", "dog")), per_class=2, classes=("owl",), seed=1000),
     r"^class 'owl' has 2 examples, so a held-out share of 50% gives it 1 for validation .*--val-fraction"),
    (lambda root: _folder(root, split="test"), r"^no train/ images in .*: found only test/; add train/<class>/"),
])
def test_refusals_are_one_line_and_write_nothing(tmp_path: Path, make, message) -> None:
    data = make(tmp_path / "data")
    cfg = _cfg(tmp_path, data, max_steps=1)
    with pytest.raises(DataError, match=message) as caught:
        Trainer(cfg)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- other data


def test_a_run_is_scored_on_other_data_with_its_classes(tmp_path: Path) -> None:
    trained = _task(_cfg(tmp_path, _folder(tmp_path / "pets")))
    info = json.loads(json.dumps(trained.run_info()))
    # Other data: grey, other sizes, two of the run's three classes, no test split: all of it is scored.
    other = _folder(tmp_path / "more", per_class=4, classes=("dog", "owl"), grey=True, seed=3000)
    task = _task(_cfg(tmp_path, other, limit_train=1), info=info)
    assert task.test.classes == list(CLASSES) and sorted(set(task.test.labels.tolist())) == [1, 2]
    assert tuple(task.test.images.shape) == (8, 3, 16, 16)  # the run's channels and size
    assert (task.eval_split, task.splits.eval_source) == ("test", f"all of {other}")
    assert len(task.train) == 0 and task.model_overrides()["num_classes"] == 3
    # With a test split, only that is scored.
    split = _folder(_folder(tmp_path / "split", per_class=2, split="train"), per_class=1, split="test", seed=4000)
    assert len(_task(_cfg(tmp_path, split), info=info).test) == 3
    # A class the run never saw is refused, naming it and the run's classes.
    stranger = _folder(tmp_path / "zoo", per_class=2, classes=("dog", "fox"))
    with pytest.raises(DataError, match=rf"^{stranger} has a class the run does not know: fox; expected only the "
                                        r"run's classes \(cat, dog, owl\)$"):
        ImageClassification(_cfg(tmp_path, stranger), torch.device("cpu"), info=info)


# --------------------------------------------------------------------------- a whole run


def test_train_eval_and_classify_see_the_same_numbers(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    summary = Trainer(_cfg(tmp_path, data, max_steps=6, eval_every=3)).run()
    run = tmp_path / "run"
    meta = json.loads((run / "config.json").read_text())
    assert meta["data"]["eval_split"] == "validation" and "val_accuracy" in summary and "test_accuracy" not in summary
    # As `anyformer eval RUN` scores it: the run's settings, one training example, its data section.
    cfg = TrainConfig.from_dict({**meta["train"], "limit_train": 1})
    task = make_task(cfg, torch.device("cpu"), info=meta["data"])
    loaded = af.open_run(run)
    result = task.evaluate(loaded.model, Distributed())
    assert result["eval_accuracy"] == summary["val_accuracy"]
    assert result["eval_loss"] == pytest.approx(summary["val_loss"], rel=1e-6)
    # A picture of the held-out share, classified from its file, is the tensor the run was scored on.
    files = sorted(p for p in data.rglob("*") if p.is_file())
    held = {k: i for i, k in enumerate(_keys(task.test.images))}
    found = [(f, held[k]) for f in files if (k := bytes(loaded.preprocess.load(f).numpy().tobytes())) in held]
    assert len(found) == len(task.test), "every held-out image is found again from its file"
    f, i = found[0]
    with torch.no_grad():
        logits = loaded.model(loaded.preprocess(task.test.images[i])[None])
    best = loaded.classify(f, top=1)[0]
    assert best[0] == CLASSES[int(logits.argmax())]
    assert best[1] == pytest.approx(float(logits.softmax(-1).max()), abs=1e-6)
