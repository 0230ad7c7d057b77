"""A run's settings from the user's own data: `anyformer train --data PATH` with no recipe.

The task comes from the files (`data.detect`); the settings from what the data holds: how many
training examples, of what size, how much text. Every derived value carries its reason, is printed,
and is recorded in config.json (`TrainConfig.derived`); a flag given on the command line always wins.

Where a recipe is named with someone else's data (`anyformer train cifar10 --data my_photos/`), the
recipe's settings stand, except two that would make the run meaningless on smaller data: the batch is
cut to a quarter of the training set and the warm-up to a tenth of the run (`fit_recipe_to_data`).

The rules below are sized for a 2-core CPU (a fixed work for images, about two passes over the text);
each is a plain function of the data's size, so the same data gives the same run on any machine.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from ..data.split import holdout_fraction
from .sam import passes_per_step

__all__ = ["auto_settings", "fit_recipe_to_data", "image_patch"]

# An image run's length is fixed work, not time: steps = WORK / (batch x tokens x width^2 x depth), the
# step's multiply-adds up to a constant (a block's linears are 12 width^2 a token), at most MAX_IMAGE_STEPS,
# at least MIN_EPOCHS passes. 2e11 was 150-200 s of training on 2 cores whatever the image size; with
# the small model below it scored 73.3 points (mean rank 1.58 of 3) on the six CHOOSE folders' 3 folds
# against 55.1 (2.67) for the earlier ~100,000 images seen, whose 128 x 6 model did not finish CIFAR-10's
# folds in 300 s; on the five others, 74.4 against 66.1 (benchmarks/images_select.py, round 1).
WORK = 2e11
MAX_IMAGE_STEPS = 4000
# The length is worked out at this batch (at most a quarter of the training images), whatever batch trains:
# the passes over the data that round 1 measured. The training batch is at most IMAGE_BATCH: batch 64 at those
# passes, twice the steps of half the images, scored 80.80 points (mean rank 1.33 of 2) on the six CHOOSE
# folders' 3 folds against 80.40 (1.67) for batch 128, ahead on four of them (benchmarks/images_select.py,
# image round 18); the rate follows the batch by the square-root rule below (1.41e-3 at 64).
LENGTH_BATCH = 128
IMAGE_BATCH = 64
MIN_EPOCHS = 5       # as before the rule; no CHOOSE folder's run came near it
# The model: width 64, depth 4 below this many training images. At the fixed work it scored 67.8 points on
# CIFAR-10's 3,333-image folds against 56.1 for width 128, depth 6 (6x the step's work, so a sixth of the
# steps); above it, 192 x 6 as before, which no measurement chose (no CHOOSE folder is that large).
LARGE_FOLDER = 20_000
# The head reads the mean of the patch tokens (no class token) and the positions are fixed 2-D sine-cosine
# ones, as in Beyer, Zhai and Kolesnikov's "Better plain ViT baselines" (2022): on the six CHOOSE folders'
# 3 folds, 75.7 points (ahead on all six) against 73.3 for a class token and learned positions
# (benchmarks/images_select.py, round 2).
PLAIN_HEAD = dict(pool="mean", class_token=False, position="sinusoidal")
TEXT_EPOCHS = 2                # passes over the training text
# At least 300 steps: on Tiny Shakespeare, two passes over its learned BPE's tokens were too few steps,
# and the BPE went on improving well past them (measured: docs/results.md, 'Measurements behind the code's choices').
TEXT_STEPS = (300, 3000)
# A corpus this large learns a BPE; a smaller one reads characters. On Tiny Shakespeare (1.1 MiB) the
# BPE was ahead of characters at equal training time
# (measured: docs/results.md, 'Measurements behind the code's choices').
BPE_FROM_BYTES = 1 << 20
# The patch is chosen so that an image is about this many tokens. A quarter of them (the patch doubled, the same
# passes) halved the runs' time and lost tabler, lowercase and clip art by 1 to 4 points (image round 21).
TOKENS_PER_IMAGE = 64


def auto_settings(data: str, asked: dict[str, Any], series_recipe: dict[str, Any]) -> tuple[str, dict[str, Any],
                                                                                            dict[str, str]]:
    """(what the data is, the recipe-like settings for it, why each derived one was chosen). `asked`
    holds the flags given (None where not): a value given is taken as it is and not derived.
    `series_recipe`: the series recipe's settings, which series data starts from."""
    from ..data.detect import detect_kind  # here: it reads every kind of file, and a named recipe reads none
    kind = detect_kind(data, asked.get("label_column"))
    forced = asked.get("objective")  # --task text / table / lm: the kind of data, as the user says
    flag = f"--task {forced}"
    if asked.get("text_column") and forced is None:  # a text column named: labelled text
        forced, flag = "text", "--text-column"
    if forced in ("text", "table", "lm"):
        kind = _forced_kind(kind, forced, flag)
        asked = {**asked, "objective": None}
    if kind.kind == "labelled-text":
        from .text_settings import text_settings
        what, values, why = text_settings(data, asked, forced=forced == "text")
        return what, values, {k: v for k, v in why.items() if asked.get(k) is None}
    if kind.kind == "series":
        values, why = _series(data, asked, series_recipe)
    elif kind.kind == "table":
        from .tables import table_settings
        what, values, why = table_settings(data, asked)
        return what, values, {k: v for k, v in why.items() if asked.get(k) is None}
    else:
        values, why = (_images if kind.kind == "images" else _text)(data, asked)
    for key in [k for k in why if asked.get(k) is not None]:  # a flag given wins, and is not "derived"
        del why[key]
    return kind.why, values, why


def _forced_kind(kind: Any, forced: str, flag: str) -> Any:
    """--task text (labelled text), table or lm (a corpus for a language model) over what the files suggest."""
    from ..data.detect import DataKind
    name = {"text": "labelled-text", "table": "table", "lm": "text"}[forced]
    return kind if kind.kind == name else DataKind(name, f"{kind.why}, read as {forced} ({flag})")


# ------------------------------------------------------------------------------------------ images

def _image_counts(data: str, asked: dict[str, Any]) -> tuple[Any, int, int, float | None]:
    """(the scan, the images of the training split, those left to train on, the held-out share or
    None where the data has a test/ or val/ folder). Counted from file headers: an image found
    unreadable when it is decoded is still counted here."""
    from ..data.images.scan import scan_images
    scan = scan_images(data)
    train = scan.splits.get("train") or scan.splits.get("all") or {}
    n, fraction = sum(train.values()), None
    if train and not any(s in scan.splits for s in ("test", "val")):
        labels = torch.repeat_interleave(torch.arange(len(train)), torch.tensor(list(train.values())))
        fraction = holdout_fraction(labels, asked.get("val_fraction"))
    held = sum(round(fraction * c) for c in train.values()) if fraction else 0
    return scan, n, n - held, fraction


def _images(data: str, asked: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    from ..data.images.scan import derive_image_size
    scan, n, n_train, fraction = _image_counts(data, asked)
    why: dict[str, str] = {}
    if fraction is not None:
        why["val_fraction"] = (f"{fraction:.2f}: no test/ or val/ folder, so a seeded share of each class is held "
                               f"out ({n - n_train:,} of {n:,} images)")
    size = asked.get("image_size")
    if size is None:
        h, w = derive_image_size(scan.sizes)
        size = [h, w]
        why["image_size"] = _size_reason(scan.sizes, (h, w))
    h, w = (size, size) if isinstance(size, int) else size
    patch = image_patch(h, w)
    tokens = (h // patch) * (w // patch)
    width, depth, heads, mlp = (64, 4, 4, 128) if n_train < LARGE_FOLDER else (192, 6, 6, 384)
    # The conv stem's last stage as wide as the model (not half): ahead on 5 of 6 CHOOSE folders, image round 4.
    # Each stage two 3x3 convolutions (stride 2, then 1), each with BatchNorm (Xiao et al.): 80.3 points against
    # 76.9 on the six CHOOSE folders' 3 folds, ahead on five of them (image round 13).
    # Grey pictures' head reads the patch tokens' attention-weighted mean (Hassani et al.'s sequence pooling: a learned
    # score a token, softmax over the tokens) in place of their plain mean: ahead on three of the four grey CHOOSE
    # folders (the lowercase glyphs 97.77 against 97.46, tabler 63.84 against 63.10, mnist-s 98.17 against 97.50),
    # behind on mnist-8 (94.22 against 94.56); 88.50 points (mean rank 1.25) against 88.15 (1.75), image round 49.
    # Colour pictures keep the plain mean: not measured there.
    weighted = not scan.colour and "pool" not in (asked.get("model_overrides") or {})
    head = {**PLAIN_HEAD, "pool": "attention"} if weighted else PLAIN_HEAD
    overrides = dict(stem="conv", stem_channels=width, stem_convs=2, stem_norm="batch", patch_size=patch, width=width,
                     depth=depth, heads=heads, mlp_hidden=mlp, **head)
    why["model"] = (f"vit-mnist-fast at width {width}, depth {depth}: "
                    + (f"under {LARGE_FOLDER:,} training images (a small model at a fixed work was ahead of a larger "
                       f"one)" if n_train < LARGE_FOLDER else f"{n_train:,} training images (a size not yet measured)")
                    + f"; a conv stem of {int(math.log2(patch))} stages up to {width} channels, each two 3x3 "
                      f"convolutions (stride 2, then 1) with BatchNorm, patch {patch} ({tokens} tokens an image); "
                    + ("the patch tokens' mean weighted by a learned score (sequence pooling)" if weighted
                       else "the mean of the patch tokens")
                    + " into the head, no class token, fixed 2-D sine-cosine positions")
    batch = _batch(n_train, asked, cap=IMAGE_BATCH)
    why["batch_size"] = f"{batch}: at most {IMAGE_BATCH}, and at most a quarter of the {n_train:,} training images"
    # 2e-3 at batch 128 (half and twice it lost, rounds 5 and 6). At batch 64 the unscaled 2e-3 won four CHOOSE
    # folders and lost three, its mean score lower (80.31 points against 80.41), image round 33: the square root stays.
    # Below it, 1e-3 for colour pictures on new folds won one colour folder and lost two (round 35).
    lr = round(2e-3 * math.sqrt(batch / 128), 6)
    why["lr"] = f"{lr:g}: 2e-3 at batch 128, scaled by the square root of the batch"
    per_epoch = math.ceil(n_train / batch)
    at = _batch(n_train, {}, cap=LENGTH_BATCH)  # the batch the length is worked out at
    # A sharpness-aware step (--sam) runs its passes twice: the same work is half the steps.
    passes = passes_per_step(asked.get("sam") or 0.0)
    steps = min(MAX_IMAGE_STEPS, WORK / (at * tokens * width ** 2 * depth)) / passes
    epochs = max(MIN_EPOCHS, round(steps / math.ceil(n_train / at), 2))
    why["epochs"] = (f"{epochs:g}: {round(epochs * per_epoch):,} steps of {batch} images of {tokens} tokens through "
                     f"{depth} blocks of width {width}; the passes of a fixed work of {WORK:.0e} (batch x tokens x "
                     f"width^2 x depth) at batch {at}, at most {MAX_IMAGE_STEPS:,} steps there, and at least "
                     f"{MIN_EPOCHS} passes" + ("; half as many, as --sam runs each step's passes twice"
                                               if passes == 2 else ""))
    total = _asked_length(asked, per_epoch) or round(epochs * per_epoch)
    if scan.colour:
        warmup = max(1, min(per_epoch, total // 10))
        why["warmup_steps"] = f"{warmup}: one epoch, at most a tenth of the run's {total:,} steps"
    else:
        # A tenth of the run (Lee et al.'s share for small-data ViTs), where one epoch of a small folder is a few
        # steps at the full rate: ahead on three of the four grey CHOOSE folders (mnist-8 94.67 against 94.22,
        # the lowercase glyphs 98.04 against 97.77, tabler 65.57 against 63.84), behind on mnist-s (97.50 against
        # 98.17); 88.94 points (mean rank 1.25) against 88.50 (1.75), image round 52. Colour pictures keep one
        # epoch: not measured there.
        warmup = max(1, round(total / 10))
        why["warmup_steps"] = f"{warmup}: a tenth of the run's {total:,} steps"
    eval_every = max(per_epoch, total // 20)
    why["eval_every"] = f"{eval_every}: about 20 evaluations"
    augment = "crop_flip" if scan.colour else "digits"
    if scan.colour and "flip_average" not in (asked.get("model_overrides") or {}):
        # Trained with mirror images, scored on both views: the logits averaged over each image and its mirror
        # image in eval mode. Ahead on two of the three colour CHOOSE folders, level on the grey ones (which see
        # no mirror images and keep one view): 80.40 points (mean rank 1.42) against 80.31 (1.58), image round 16.
        overrides["flip_average"] = True
        why["model"] += "; scored on each image and its mirror image (their logits averaged), as it trains on both"
    shifts = asked.get("augment") in (None, "digits")  # a grey picture trains with small shifts unless asked not to
    if not scan.colour and shifts and "shift_average" not in (asked.get("model_overrides") or {}):
        # Trained with shifts of up to 2 px on 28x28, scored on five views: the logits averaged over each image and
        # its four copies moved by one pixel. Ahead on all four grey CHOOSE folders (the colour ones untouched, level):
        # 80.41 points (mean rank 1.25) against 80.21 (1.75), image round 30. Moved by the largest training shift
        # instead (2 px at 28x28, 3 at 48x48) lost two of three folders (80.29 points), image round 32; the same
        # one-pixel views for colour pictures lost cifar-8 and clip art, image round 31.
        overrides["shift_average"] = 1
        why["model"] += ("; scored on each image and its four copies moved by a pixel (their logits averaged), as it "
                         "trains on small shifts")
    if not scan.colour and "mlp_conv" not in (asked.get("model_overrides") or {}):
        # Each block's MLP also mixes the patch grid (a depthwise 3x3 convolution between its two layers, Mix-FFN):
        # ahead on three of the four grey CHOOSE folders (mnist-8 94.56 against 94.17, tabler 63.10 against 62.85,
        # mnist-s 97.50 against 97.33), behind on the lowercase glyphs (97.46 against 97.88); 88.15 points (mean rank
        # 1.25) against 88.06 (1.75), image round 48. Colour pictures keep token-wise MLPs: not measured there.
        overrides["mlp_conv"] = 3
        why["model"] += "; each MLP also mixes neighbouring patches (a depthwise 3x3 convolution over the grid)"
    why["augment"] = ("crop_flip: colour pictures take crops and mirror images" if scan.colour else
                      "digits: grey images take small shifts, rotations and scalings, no mirror images "
                      "(which would turn writing and digits into other shapes)")
    kind = asked.get("augment") or augment
    # Crops of a picture padded by 2 pixels (reflected), half CIFAR's 4, at every size: ahead on cifar-8 and clip art,
    # level on the textures, behind on cifar-a; 78.92 points (mean rank 1.44) against 78.85 (1.56), image round 37.
    # Round 36's 1/8 of the side (2 px at 16, 8 at 64) won cifar-8 and lost clip art, its mean score lower (78.79).
    strength = 1.0  # the grey pictures' warps: measured on both sides (rounds 11 and 12)
    if kind == "crop_flip":
        strength = 0.5
        why["augment_strength"] = (f"{strength:g}: the crops move a picture by up to 2 pixels (half CIFAR's 4), at "
                                   "every size")
    # DeiT's random erasing on top of either: ahead on five of the eight CHOOSE folders, behind on two, level on
    # one; 79.97 points (mean rank 1.31) against 79.54 (1.69), image round 24.
    erasing = asked.get("random_erasing")
    if erasing is None and asked.get("augment") == "none":  # no augmentation asked for: none of it
        erasing = 0.0
        why["random_erasing"] = "0: --augment none asks for the training pictures as they are"
    elif erasing is None:
        # Half the grey pictures: ahead on mnist-8, the lowercase glyphs and tabler, level on mnist-s (the colour
        # folders untouched); 79.24 points (mean rank 1.31) against 78.92 (1.69), image round 39.
        erasing = 0.25 if scan.colour else 0.5
        share = "a quarter" if scan.colour else "half"
        why["random_erasing"] = (f"{erasing:g}: {share} of the training pictures have one rectangle (2% to 33% of "
                                 f"the picture) replaced by noise, after the {kind} augmentation (DeiT's setting"
                                 + (")" if scan.colour else ", twice as often for grey pictures)"))
    # Scored in forwards of the training batch's size (each picture's test-time views on top: 5 for grey, 2 for
    # colour), the same logits to the bit as at 1,000 with stock kernels: at the default 1,000 a forward, a grey
    # folder's 5,000 view-pictures a forward, their activations many times the caches' size, scored at about half
    # the speed, and a run's 20 evaluations took about a quarter of its time (measured on grey pictures:
    # docs/results.md, 'Measurements behind the code's choices').
    why["eval_batch_size"] = f"{batch}: the training batch, each picture's test-time views on top"
    values = dict(task="classify", model="vit-mnist-fast", data=data, image_size=size, val_fraction=fraction,
                  batch_size=batch, eval_batch_size=batch, lr=lr, epochs=epochs, warmup_steps=warmup,
                  eval_every=eval_every,
                  augment=augment, augment_strength=strength, random_erasing=erasing, weight_decay=0.05,
                  label_smoothing=0.1, grad_clip=1.0, amp="auto", model_overrides=overrides)
    return values, why


def _size_reason(sizes: list[tuple[int, int]], chosen: tuple[int, int]) -> str:
    from ..data.images.scan import describe_image_size, upscale_factor
    if not sizes:
        return f"{chosen[0]}x{chosen[1]}"
    if len(set(sizes)) == 1 and tuple(sizes[0]) == tuple(chosen):
        return f"{chosen[0]}x{chosen[1]}: every image is that size"
    (h0, w0), k = sizes[0], upscale_factor(*sizes[0])
    if len(set(sizes)) == 1 and k > 1 and tuple(chosen) == (k * h0, k * w0):
        return f"{describe_image_size(sizes)}; image round 28 (--image-size to choose)"
    short = sorted(min(s) for s in sizes)[len(sizes) // 2]
    return (f"{chosen[0]}x{chosen[1]}: the median shorter side is {short} px (sizes {min(min(s) for s in sizes)} to "
            f"{max(max(s) for s in sizes)} px), kept within 16 to 64 px; each image scaled to cover it, then "
            f"centre-cropped (--image-size to choose)")


def image_patch(h: int, w: int) -> int:
    """The power-of-two patch (the conv stem's) that tiles (h, w) into about TOKENS_PER_IMAGE tokens."""
    fits = [p for p in (2, 4, 8, 16, 32) if h % p == 0 and w % p == 0]
    if not fits:
        raise ValueError(f"an image size of {h}x{w} has no power-of-two patch that tiles it; choose "
                         f"--image-size with sides divisible by 4 (e.g. {max(4, h // 4 * 4)})")
    return min(fits, key=lambda p: abs(math.log((h // p) * (w // p) / TOKENS_PER_IMAGE)))


def _asked_length(asked: dict[str, Any], per_epoch: int) -> int | None:
    """The run's steps where --max-steps or --epochs gave them (the warm-up and evaluations follow them)."""
    if asked.get("max_steps"):
        return int(asked["max_steps"])
    if asked.get("epochs"):
        return max(1, round(asked["epochs"] * per_epoch))
    return None


def _batch(n_train: int, asked: dict[str, Any], cap: int = 128) -> int:
    return int(asked.get("batch_size") or max(1, min(cap, n_train // 4)))


# ------------------------------------------------------------------------------------------ text

def _text_bytes(data: str) -> int:
    from ..data.text.sources import resolve_text
    return sum(os.path.getsize(p) for p in resolve_text(data, allow_download=False))


def _text(data: str, asked: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    size = _text_bytes(data)
    why: dict[str, str] = {}
    tokenizer = asked.get("tokenizer") or ("bpe" if size >= BPE_FROM_BYTES else "char")
    why["tokenizer"] = (f"bpe: {size / 2**20:.1f} MiB of text is enough to learn a vocabulary of pieces of words"
                        if tokenizer == "bpe" else f"char: {size / 2**10:,.0f} KiB of text, under "
                        f"{BPE_FROM_BYTES >> 20} MiB, reads best as characters")
    # Bytes a token covers, for sizing before the tokenizer exists: about 3.5 for a learned BPE on prose.
    bytes_per_token = 3.5 if tokenizer != "char" else 1.0
    train_tokens = 0.9 * size / bytes_per_token
    width, depth, heads = (128, 4, 4) if size < BPE_FROM_BYTES else (192, 4, 6) if size < 32 * 2**20 \
        else (256, 6, 8)
    seq = int(asked.get("seq_len") or 128)
    overrides = dict(width=width, depth=depth, heads=heads, context=seq, dropout=0.0)
    why["model"] = f"a GPT of width {width}, depth {depth}, context {seq}: sized for {size / 2**20:.1f} MiB of text"
    windows = max(1, int(train_tokens // seq))
    batch = _batch(windows, asked, cap=32)
    why["batch_size"] = f"{batch}: at most 32 sequences, and at most a quarter of the {windows:,} training windows"
    steps = int(min(TEXT_STEPS[1], max(TEXT_STEPS[0], round(TEXT_EPOCHS * train_tokens / (batch * seq)))))
    why["max_steps"] = (f"{steps}: about {TEXT_EPOCHS} passes over ~{train_tokens:,.0f} training tokens, "
                        f"{TEXT_STEPS[0]} to {TEXT_STEPS[1]} steps")
    steps = _asked_length(asked, max(1, round(train_tokens / (batch * seq)))) or steps
    warmup = max(1, min(100, steps // 10))
    why["warmup_steps"] = f"{warmup}: at most 100, and at most a tenth of the run"
    eval_every = max(1, steps // 10)
    why["eval_every"] = f"{eval_every}: 10 evaluations"
    values = dict(task="lm", model="shakespeare-char", data=data, tokenizer=tokenizer, seq_len=seq,
                  max_steps=steps, batch_size=batch, lr=3e-3, min_lr_ratio=0.1, warmup_steps=warmup,
                  betas=(0.9, 0.99), weight_decay=0.1, grad_clip=1.0, eval_every=eval_every, eval_iters=20,
                  amp="auto", model_overrides=overrides)
    return values, why


# ------------------------------------------------------------------------------------------ series

def _series(data: str, asked: dict[str, Any], recipe: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The series recipe, which derives its sizes from the training split itself (train/series.py's
    `derive`); they are worked out here too, to be printed before the run starts."""
    from ..data.series.dataset import load_series_data
    from .series import derive as series_sizes
    values = {k: v for k, v in recipe.items() if k != "about"}
    values["data"] = data
    train, test = load_series_data(data, asked.get("label_column"))
    n_train, why = len(train), {}
    if test is None:
        fraction = holdout_fraction(train.labels, asked.get("val_fraction"))
        held = sum(round(fraction * int(c)) for c in torch.bincount(train.labels) if c)
        n_train -= held
        why["val_fraction"] = (f"{fraction:.2f}: no _TEST file, so a seeded share of each class is held out "
                               f"({held:,} of {len(train):,} series)")
    model = {**values.get("model_overrides", {}), **(asked.get("model_overrides") or {})}
    sizes = series_sizes(n_train, train.channels, train.length, model.get("patching", "across"),
                         asked.get("batch_size") or values["batch_size"], model.get("stem", "patches"))
    why["batch_size"] = f"{sizes['batch']}: about four updates an epoch, at most a quarter of the {n_train:,} training series"
    tokens = "random-kernel features of " if sizes.get("stem") == "kernels" else ""
    why["model"] = (f"series-small at width {sizes['width']}, depth {sizes['depth']}, {tokens}patches of "
                    f"{sizes['patch_size']} steps every {sizes['patch_stride']} (about 32 tokens of a "
                    f"{train.length}-step series)")
    budget = values.get("time_budget")
    why["max_steps"] = (f"{values['max_steps']}: the series recipe's updates"
                        + (f", within its {budget:.0f} s budget" if budget else ", the same on any machine"))
    return values, why


# ------------------------------------------------------------------------------------------ a recipe on other data

def fit_recipe_to_data(values: dict[str, Any], asked: dict[str, Any]) -> dict[str, str]:
    """A recipe run on someone else's data: cut its batch to a quarter of the training set and its
    warm-up to a tenth of the run, where the flags did not set them. Changes `values` in place and
    returns why, for each setting it changed."""
    why: dict[str, str] = {}
    task = values.get("task")
    if task not in ("classify", "lm") or not Path(str(values["data"])).exists():
        return why
    if task == "classify":
        _, _, n_train, _ = _image_counts(values["data"], asked)
        unit = "training images"
    else:
        n_train = int(0.9 * _text_bytes(values["data"]) // max(1, values.get("seq_len") or 256))
        unit = "training windows (estimated)"
    if asked.get("batch_size") is None and values.get("batch_size", 128) > max(1, n_train // 4):
        values["batch_size"] = max(1, n_train // 4)
        why["batch_size"] = f"{values['batch_size']}: the recipe's batch cut to a quarter of the {n_train:,} {unit}"
    per_epoch = math.ceil(n_train / values["batch_size"]) if task == "classify" else None
    total = values.get("max_steps") or (round(values.get("epochs", 10) * per_epoch) if per_epoch else None)
    if total and asked.get("warmup_steps") is None and values.get("warmup_steps", 0) > total // 10:
        values["warmup_steps"] = max(1, total // 10)
        why["warmup_steps"] = f"{values['warmup_steps']}: the recipe's warm-up cut to a tenth of the run's {total:,} steps"
    return why
