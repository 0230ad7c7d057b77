"""image_splits and balanced_subset one rule at a time, on small hand-made data: the splits given are
the splits used, a finished run is scored with the fraction it recorded, a tar's stray files are said
once, datasets keep their names, and the label fraction's bounds are exact."""
from __future__ import annotations

import io
import json
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

from anyformer.data import DataWarning, ImageDataset
from anyformer.train import TrainConfig
from anyformer.train.classify import ImageClassification, balanced_subset, image_splits

from .test_user_images import CLASSES, _cfg, _folder, _task


def _images(n: int, classes: int, seed: int, name: str, size: int = 8) -> ImageDataset:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 1, size, size), generator=g, dtype=torch.uint8)
    labels = torch.arange(n) % classes
    return ImageDataset(images, labels, [f"c{i}" for i in range(classes)], name)


def test_the_splits_given_are_the_splits_used(tmp_path: Path) -> None:
    """Given both splits, nothing is read from `data` (which here names nothing at all)."""
    train, test = _images(12, 3, 0, "mine"), _images(6, 3, 1, "mine")
    cfg = TrainConfig(data=str(tmp_path / "nowhere"), limit_train=None, limit_eval=None)
    got_train, got_test = image_splits(cfg, train, test)
    assert torch.equal(got_train.images, train.images) and torch.equal(got_test.images, test.images)
    assert got_train.name == got_test.name == "mine"


def test_a_finished_run_is_scored_with_the_fraction_it_recorded(tmp_path: Path) -> None:
    """The run held out 30%; scored again without --val-fraction (which would derive 20%), it is
    scored on the same 9 examples, not on a fresh 20% share."""
    data = _folder(tmp_path / "pets")
    trained = _task(_cfg(tmp_path, data, seed=5, val_fraction=0.3))
    info = json.loads(json.dumps(trained.run_info()))
    assert info["held_out_fraction"] == 0.3 and len(trained.test) == 9
    again = _task(_cfg(tmp_path, data, seed=5), info=info)
    assert torch.equal(again.test.images, trained.test.images)
    assert again.run_info()["held_out_fraction"] == 0.3


def test_a_single_class_folder_is_named_in_the_refusal(tmp_path: Path) -> None:
    from anyformer.data import DataError
    data = _folder(tmp_path / "cats", classes=("cat",))
    with pytest.raises(DataError, match=rf"^{data} \(no test/ split: all of it is training data\) holds one class"):
        _task(_cfg(tmp_path, data))


def _tar(path: Path, folder: Path) -> Path:
    with tarfile.open(path, "w") as tf:
        tf.add(folder, arcname=folder.name)
        note = b"my pets"
        info = tarfile.TarInfo(f"{folder.name}/NOTES.txt")
        info.size = len(note)
        tf.addfile(info, io.BytesIO(note))
    return path


def test_a_tars_stray_files_are_said_once_for_every_split(tmp_path: Path) -> None:
    folder = _folder(_folder(tmp_path / "pets", per_class=4, split="train"), per_class=2, split="test")
    data = _tar(tmp_path / "pets.tar", folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = ImageClassification(_cfg(tmp_path, data), torch.device("cpu"))
    lines = [str(w.message) for w in caught if w.category is DataWarning]
    assert len(lines) == 1 and "NOTES.txt" in lines[0], lines
    assert (len(task.train), len(task.test)) == (12, 6)


def test_other_data_says_its_stray_files_once(tmp_path: Path) -> None:
    trained = _task(_cfg(tmp_path, _folder(tmp_path / "pets")))
    info = json.loads(json.dumps(trained.run_info()))
    other = _folder(tmp_path / "more", per_class=2, classes=("dog", "owl"), seed=3000)
    (other / "README.txt").write_text("more pets")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = ImageClassification(_cfg(tmp_path, other), torch.device("cpu"), info=info)
    lines = [str(w.message) for w in caught if w.category is DataWarning]
    assert lines == [f"skipped 1 file that is not an image in {other}: README.txt"], lines
    assert len(task.test) == 4


def test_the_parts_of_a_split_keep_the_datasets_name(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    task = _task(_cfg(tmp_path, data))
    assert task.train.name == task.test.name == task.splits.train.name and task.train.name
    info = json.loads(json.dumps(task.run_info()))
    scored = _task(_cfg(tmp_path, _folder(tmp_path / "more", per_class=2, seed=77)), info=info)
    assert len(scored.train) == 0 and scored.train.name == scored.test.name
    full = _images(30, 3, 2, "mine")
    assert balanced_subset(full, 0.5, seed=3).name == "mine"


def test_the_label_fraction_reaches_one_example_per_class_and_a_class_of_exactly_enough() -> None:
    """30 examples of 3 classes: 0.1 asks for exactly 1 of each (allowed), 1.0 for exactly the 10
    each class has (allowed); 0.04 rounds to none and is refused with the smallest fraction that works."""
    full = _images(30, 3, 4, "mine")
    one = balanced_subset(full, 0.1, seed=9)
    assert torch.bincount(one.labels).tolist() == [1, 1, 1]
    assert torch.bincount(balanced_subset(full, 1.0, seed=9).labels).tolist() == [10, 10, 10]
    with pytest.raises(ValueError, match=r"^label_fraction 0\.04 of 30 examples leaves no example of each of the "
                                         r"3 classes; expected at least 0\.1$"):
        balanced_subset(full, 0.04, seed=9)
    lopsided = ImageDataset(full.images, torch.tensor([0] * 20 + [1] * 6 + [2] * 4), full.classes, "mine")
    with pytest.raises(ValueError, match=r"^label_fraction 0\.5 needs 5 examples of class 'c2', but the training "
                                         r"split has 4$"):
        balanced_subset(lopsided, 0.5, seed=9)


def test_the_share_is_drawn_by_the_seed_within_each_class() -> None:
    full = _images(60, 3, 5, "mine")
    a, b = balanced_subset(full, 0.25, seed=1), balanced_subset(full, 0.25, seed=2)
    assert torch.bincount(a.labels).tolist() == [5, 5, 5]
    assert not torch.equal(a.images, b.images)
    picked = {bytes(x.numpy().tobytes()) for x in a.images}
    assert picked <= {bytes(x.numpy().tobytes()) for x in full.images}


def test_the_final_line_names_the_split_the_epochs_the_seconds_and_the_speed(tmp_path: Path) -> None:
    task = _task(_cfg(tmp_path, _folder(tmp_path / "pets")))
    summary = {"val_accuracy": 0.83333, "epochs": 7, "train_seconds": 12.6, "images_per_s": 345.5}
    assert task.final_line(summary) == ("validation accuracy 0.8333 after 7 epochs in 13s of training "
                                        "(346 images/s)")


def test_training_flops_are_three_forwards() -> None:
    class Model:
        def forward_flops(self) -> float:
            return 1234.5
    assert ImageClassification.flops_per_item(None, Model()) == 3 * 1234.5


def test_the_pictures_are_the_confusion_and_the_first_eight_test_images(tmp_path: Path, monkeypatch) -> None:
    import anyformer.viz as viz
    data = _folder(tmp_path / "pets", per_class=12)  # half held out: 18 test images, more than 8
    task = _task(_cfg(tmp_path, data, val_fraction=0.5))
    calls = {}
    monkeypatch.setattr(viz, "plot_confusion", lambda *a: calls.__setitem__("confusion", a))
    monkeypatch.setattr(viz, "plot_digit_attention", lambda *a: calls.__setitem__("attention", a))
    model = torch.nn.Linear(2, 2).to(torch.float64)
    confusion = torch.eye(3)
    task.draw(model, {"confusion": confusion}, tmp_path)
    assert calls["confusion"] == (confusion, list(CLASSES), tmp_path / "confusion.png")
    got_model, images, labels, classes, path = calls["attention"]
    assert got_model is model and classes == list(CLASSES) and path == tmp_path / "attention.png"
    assert len(task.test) > 8 and torch.equal(images, task.normalise(task.test.images[:8]))
    assert torch.equal(labels, task.test.labels[:8])
    task.draw(torch.nn.Linear(2, 2, device="meta"), {"confusion": confusion}, tmp_path)
    assert calls["attention"][1].device.type == "meta"  # the images go where the model's weights are


def test_the_run_info_records_the_statistics_and_where_the_scored_examples_came_from(tmp_path: Path) -> None:
    data = _folder(tmp_path / "pets")
    (data / "notes.txt").write_text("stray")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        task = ImageClassification(_cfg(tmp_path, data), torch.device("cpu"))
    info = task.run_info()
    assert (info["mean"], info["std"]) == (task.preprocess.mean, task.preprocess.std)
    assert (info["eval_split"], info["eval_source"]) == ("validation", "held out")
    assert info["skipped_files"] == 1 and info["unreadable_images"] == []  # a stray file alone is recorded
