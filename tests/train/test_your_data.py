"""`anyformer train --data PATH` with no recipe: what the data is, the settings derived from it (each
printed and recorded with its reason, each overridden by a flag), a run kept by absolute path and
scored from another directory, and a finished run continued past its end."""
import json

import pytest

from anyformer.cli import main
from anyformer.data import DataError
from anyformer.data.detect import detect_kind
from anyformer.train import recipe_config
from anyformer.train.derive import image_patch


def test_the_kind_of_data_comes_from_its_files(tmp_path):
    (tmp_path / "notes.txt").write_text("Grüße aus Köln — 日本語も\n" * 50, encoding="utf-8")
    (tmp_path / "utf16.txt").write_text("hello\n" * 20, encoding="utf-16")
    (tmp_path / "series.csv").write_text("label,t0,t1\na,1,2\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 10)
    assert detect_kind(tmp_path / "notes.txt").kind == "text"
    assert detect_kind(tmp_path / "utf16.txt").kind == "text"
    assert detect_kind(tmp_path / "series.csv").kind == "series"
    with pytest.raises(DataError, match="is neither text"):
        detect_kind(tmp_path / "blob.bin")
    photos = tmp_path / "photos"
    for cls in ("cats", "dogs"):
        (photos / cls).mkdir(parents=True)
        (photos / cls / "a.png").write_bytes(b"\x89PNG")  # names decide here; the pixels are read later
    (photos / ".DS_Store").write_bytes(b"\0")
    (photos / "README.txt").write_text("my photos")
    kind = detect_kind(photos)
    assert kind.kind == "images" and "2 images in 2 folders" in kind.why
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="is empty"):
        detect_kind(tmp_path / "empty")
    with pytest.raises(DataError, match="is one image"):
        detect_kind(photos / "cats" / "a.png")


def test_the_patch_tiles_the_image_into_about_64_tokens():
    assert image_patch(28, 28) == 4 and image_patch(32, 32) == 4 and image_patch(64, 64) == 8
    assert image_patch(48, 64) == 8 and image_patch(16, 16) == 2
    with pytest.raises(ValueError, match="sides divisible by 4"):
        image_patch(27, 27)


def test_text_settings_follow_the_corpus_and_flags_win(tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("the quick brown fox jumps over the lazy dog\n" * 2000)  # 88 KB
    cfg = recipe_config(None, data=str(small))
    assert cfg.task == "lm" and cfg.tokenizer == "char" and cfg.data == str(small.resolve())
    windows = int(0.9 * small.stat().st_size) // cfg.seq_len
    assert cfg.batch_size <= windows // 4 and cfg.warmup_steps <= cfg.max_steps // 10
    assert set(cfg.derived) >= {"task", "tokenizer", "model", "batch_size", "max_steps", "warmup_steps"}
    assert cfg.out == "runs/small"
    given = recipe_config(None, data=str(small), batch_size=4, max_steps=50, tokenizer="gpt2")
    assert (given.batch_size, given.max_steps, given.tokenizer) == (4, 50, "gpt2")
    assert not {"batch_size", "max_steps", "tokenizer"} & set(given.derived)
    assert given.warmup_steps <= 5  # a tenth of the 50 steps asked for, not of the derived length
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (1 << 20))
    assert recipe_config(None, data=str(big)).tokenizer == "bpe"


def test_a_named_dataset_is_a_name_and_the_default_job_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mnist").mkdir()  # a folder named like the dataset does not turn the name into a path
    cfg = recipe_config(None)
    assert (cfg.recipe, cfg.data, cfg.batch_size, cfg.warmup_steps, cfg.derived) == ("mnist", "mnist", 128, 469, {})


@pytest.mark.slow
def test_a_text_run_is_derived_scored_from_elsewhere_and_continued_past_its_end(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "data" / "lieder.txt"
    corpus.parent.mkdir()
    corpus.write_text("Sah ein Knab ein Röslein stehn, Röslein auf der Heiden.\n" * 400, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    tiny = ["--set", "depth=1", "--set", "width=32", "--set", "heads=2", "--no-progress", "--no-plots"]
    assert main(["train", "--data", "../data/lieder.txt", "--max-steps", "6", *tiny]) == 0
    out = capsys.readouterr().out
    assert "derived: task = lm: a text file" in out and "derived: tokenizer = char" in out
    run = work / "runs" / "lieder"
    meta = json.loads((run / "config.json").read_text())
    assert meta["train"]["data"] == str(corpus.resolve()) and meta["train"]["derived"]["tokenizer"].startswith("char")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["eval", str(run)]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = json.loads((run / "summary.json").read_text())
    assert scored["eval_loss"] == pytest.approx(summary["val_loss"], rel=1e-5)

    assert main(["train", "--out", str(run), "--resume", "--max-steps", "10", "--no-progress", "--no-plots"]) == 0
    assert "continuing" in capsys.readouterr().out
    meta = json.loads((run / "config.json").read_text())
    assert meta["train"]["max_steps"] == 10 and meta["train"]["extended"][0]["from_step"] == 6
    steps = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 10 and json.loads((run / "summary.json").read_text())["steps"] == 10
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "8"]) == 2
    assert "must be past that" in capsys.readouterr().err


def photos(root, sizes, colour=True, per_class=12, classes=("cat", "dog", "owl")):
    """A made-up folder of class folders: mixed sizes and formats, no split, stray files."""
    from PIL import Image
    import numpy as np
    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            h, w = sizes[(c * per_class + i) % len(sizes)]
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            a[..., c] = 255  # each class leans to a colour
            im = Image.fromarray(a) if colour else Image.fromarray(a[..., c]).convert("L")
            # Grey as PNG or JPEG: a WebP holds no grey mode (Pillow writes it as RGB, read back as colour).
            formats = ("png", "jpg", "webp", "bmp") if colour else ("png", "jpg")
            im.save(root / name / f"{i}.{formats[i % len(formats)]}")
    (root / ".DS_Store").write_bytes(b"\0")
    (root / "README.txt").write_text("my pictures")
    return root


def test_image_settings_are_derived_from_the_folder(tmp_path):
    folder = photos(tmp_path / "pics", [(40, 60), (52, 70), (50, 50), (60, 100)])
    cfg = recipe_config(None, data=str(folder))
    assert cfg.task == "classify" and cfg.val_fraction == pytest.approx(0.2) and cfg.augment == "crop_flip"
    assert cfg.image_size == [48, 48]  # the median shorter side, 52 px, rounded down to a multiple of 8
    n_train = 3 * (12 - round(0.2 * 12))
    per_epoch = -(-n_train // cfg.batch_size)
    assert cfg.batch_size == n_train // 4 and cfg.warmup_steps <= cfg.epochs * per_epoch // 10
    assert cfg.warmup_steps == min(per_epoch, round(cfg.epochs * per_epoch) // 10)  # colour: one epoch
    # scored in forwards of the training batch (its test-time views on top), not the default 1,000 pictures
    assert cfg.eval_batch_size == cfg.batch_size and cfg.derived["eval_batch_size"].startswith(f"{cfg.batch_size}: ")
    assert cfg.model_overrides["patch_size"] == 8 and cfg.derived["image_size"].startswith("48x48")
    assert cfg.model_overrides["stem_channels"] == cfg.model_overrides["width"] == 64  # image round 4
    assert (cfg.model_overrides["stem_convs"], cfg.model_overrides["stem_norm"]) == (2, "batch")  # image round 13
    assert ("a conv stem of 3 stages up to 64 channels, each two 3x3 convolutions (stride 2, then 1) with "
            "BatchNorm, patch 8 (36 tokens" in cfg.derived["model"])
    grey = recipe_config(None, data=str(photos(tmp_path / "grey", [(28, 28)], colour=False)))
    assert grey.image_size == [28, 28] and grey.augment == "digits" and grey.model_overrides["patch_size"] == 4
    # grey pictures warm up over a tenth of the run, not one epoch of a few steps (image round 52)
    grey_per_epoch = -(-n_train // grey.batch_size)  # the same 30 training images
    grey_total = round(grey.epochs * grey_per_epoch)
    assert grey.warmup_steps == round(grey_total / 10) > grey_per_epoch  # more than the epoch colour takes
    assert grey.derived["warmup_steps"].startswith(f"{grey.warmup_steps}: a tenth of the run")
    # colour pictures train with mirror images and are scored on both views; grey ones on one (image round 16)
    assert cfg.augment == "crop_flip" and cfg.model_overrides["flip_average"] is True
    assert "scored on each image and its mirror image" in cfg.derived["model"]
    assert "flip_average" not in grey.model_overrides and "mirror image" not in grey.derived["model"]
    one_view = recipe_config(None, data=str(folder), model_overrides={"flip_average": False})
    assert one_view.model_overrides["flip_average"] is False and "mirror image" not in one_view.derived["model"]
    # grey pictures train with small shifts and are scored on five views: the image and its one-pixel shifts
    # (image round 30); colour ones on their two
    assert grey.model_overrides["shift_average"] == 1 and "moved by a pixel" in grey.derived["model"]
    assert "shift_average" not in cfg.model_overrides
    unshifted = recipe_config(None, data=str(tmp_path / "grey"), augment="none")
    assert "shift_average" not in unshifted.model_overrides
    one_grey_view = recipe_config(None, data=str(tmp_path / "grey"), model_overrides={"shift_average": 0})
    assert one_grey_view.model_overrides["shift_average"] == 0 and "moved by" not in one_grey_view.derived["model"]
    # grey pictures' MLPs mix the patch grid (image round 48); colour ones stay token-wise; a --set wins
    assert grey.model_overrides["mlp_conv"] == 3 and "depthwise 3x3 convolution" in grey.derived["model"]
    assert "mlp_conv" not in cfg.model_overrides and "depthwise" not in cfg.derived["model"]
    token_wise = recipe_config(None, data=str(tmp_path / "grey"), model_overrides={"mlp_conv": 0})
    assert token_wise.model_overrides["mlp_conv"] == 0 and "depthwise" not in token_wise.derived["model"]
    # grey pictures' head reads the patch tokens' attention-weighted mean (image round 49); colour ones the plain
    # mean; a --set wins
    assert grey.model_overrides["pool"] == "attention" and "sequence pooling" in grey.derived["model"]
    assert cfg.model_overrides["pool"] == "mean" and "the mean of the patch tokens into" in cfg.derived["model"]
    plain = recipe_config(None, data=str(tmp_path / "grey"), model_overrides={"pool": "mean"})
    assert plain.model_overrides["pool"] == "mean" and "sequence pooling" not in plain.derived["model"]
    # The same work under --sam, whose steps each run two forward and backward passes: half the steps.
    grey_sam = recipe_config(None, data=str(tmp_path / "grey"), sam=0.05)
    assert grey_sam.epochs == pytest.approx(grey.epochs / 2, abs=0.01) and grey_sam.sam == 0.05
    assert "half as many, as --sam runs each step's passes twice" in grey_sam.derived["epochs"]
    assert "--sam" not in grey.derived["epochs"]
    # DeiT's random erasing on a quarter of the colour pictures (image round 24), half the grey ones (round 39);
    # a flag wins, 0 turns it off
    assert cfg.random_erasing == 0.25 and "after the crop_flip" in cfg.derived["random_erasing"]
    assert grey.random_erasing == 0.5 and grey.derived["random_erasing"].startswith("0.5: half of the training")
    flagged = recipe_config(None, data=str(folder), image_size=32, batch_size=5, val_fraction=0.25, random_erasing=0.0)
    assert (flagged.image_size, flagged.batch_size, flagged.val_fraction) == (32, 5, 0.25)
    assert flagged.random_erasing == 0.0
    assert not {"image_size", "batch_size", "val_fraction", "random_erasing"} & set(flagged.derived)
    plain = recipe_config(None, data=str(folder), augment="none")
    assert (plain.augment, plain.random_erasing) == ("none", 0.0)
    assert "--augment none" in plain.derived["random_erasing"]
    cropped = recipe_config(None, data=str(folder), augment="resized_crop")
    assert cropped.random_erasing == 0.25 and "after the resized_crop" in cropped.derived["random_erasing"]
    # Colour crops move a picture by up to 2 pixels (image round 37); grey pictures' warps keep strength 1; a flag wins
    assert cfg.augment_strength == 0.5 and "2 pixels" in cfg.derived["augment_strength"]
    assert grey.augment_strength == 1.0 and "augment_strength" not in grey.derived
    assert cropped.augment_strength == 1.0
    strong = recipe_config(None, data=str(folder), augment_strength=2.0)
    assert strong.augment_strength == 2.0 and "augment_strength" not in strong.derived


def test_tiny_pictures_are_scaled_up_to_give_the_tokens_of_larger_ones(tmp_path):
    # 8x8 pictures at the smallest patch give 16 tokens; scaled up to 16x16 they give 64 (image round 28)
    tiny = recipe_config(None, data=str(photos(tmp_path / "tiny", [(8, 8)], colour=False)))
    assert tiny.image_size == [16, 16] and tiny.model_overrides["patch_size"] == 2
    assert "patch 2 (64 tokens" in tiny.derived["model"]
    assert tiny.derived["image_size"].startswith("16x16: every image is 8x8, scaled up 2x")
    asked = recipe_config(None, data=str(tmp_path / "tiny"), image_size=8)
    assert asked.image_size == 8 and "(16 tokens" in asked.derived["model"]  # a size asked for is kept
    # scaled up 2x, 8x40 would be 16x80, past 64: the square of the median shorter side, not a scaling
    strip = recipe_config(None, data=str(photos(tmp_path / "strip", [(8, 40)], colour=False)))
    assert strip.image_size == [16, 16] and "scaled up" not in strip.derived["image_size"]


def test_a_recipe_on_your_images_fits_its_batch_and_warm_up_to_them(tmp_path):
    folder = photos(tmp_path / "pics", [(32, 32)])
    cfg = recipe_config("cifar10", data=str(folder))
    n_train = 3 * (12 - round(0.2 * 12))
    assert cfg.batch_size == n_train // 4 and "batch_size" in cfg.derived  # the recipe's 256 is over the data
    total = cfg.epochs * -(-n_train // cfg.batch_size)
    assert cfg.warmup_steps == total // 10 and "warmup_steps" in cfg.derived  # the recipe's 500 is over the run
    assert recipe_config("cifar10", data=str(folder), batch_size=64).batch_size == 64  # a flag still wins


def test_a_csv_is_a_table_unless_its_columns_are_named_as_a_series_is(tmp_path):
    cases = {"shop.csv": "species,island,bill,label\nA,x,1.5,a\n",       # words and numbers under names
             "steps.csv": "label,t0,t1,t2\na,1,2,3\n",                 # steps named by a prefix and a count
             "numbered.csv": "class,1,2,3,4\na,1,2,3,4\n",
             "long.csv": "id,time,value,label\ns,0,1.5,a\n",          # a long series
             "features.csv": "age,bmi,s1,s2,target\n1,2,3,4,5\n",     # s1, s2 beside other names: a table
             "x.csv": "x1,x2,x3,y\n1,2,3,4\n",                        # a few numbered features: a table
             "many.csv": "label," + ",".join(f"x{i}" for i in range(8)) + "\na" + ",1" * 8 + "\n"}  # 8: series
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    kinds = {name: detect_kind(tmp_path / name).kind for name in cases}
    assert kinds == {"shop.csv": "table", "steps.csv": "series", "numbered.csv": "series", "long.csv": "series",
                     "features.csv": "table", "x.csv": "table", "many.csv": "series"}
    pair = tmp_path / "pair"
    pair.mkdir()
    for split in ("TRAIN", "TEST"):
        (pair / f"shop_{split}.csv").write_text(cases["shop.csv"])
    assert detect_kind(pair).kind == "table" and "2 table files" in detect_kind(pair).why
