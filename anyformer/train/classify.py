"""Image classification: labelled images in memory as uint8, a cross-entropy loss, accuracy, and a
confusion matrix and attention maps drawn at the end of the run.

The data is scored on its test/ split, else its val/ split, else a seeded stratified share of it
held out (`image_splits`); a finished run is scored again on the same examples, or on other data
with its classes (`load_splits` with `info`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import (DataError, ImageDataset, load_image_dataset, random_affine, random_crop_flip, random_elastic,
                    random_erasing, random_resized_crop_flip, random_stroke_width)
from ..data.images.augment import AFFINE_ROTATE_DEG, AFFINE_SCALE, AFFINE_SHIFT, CROP_PAD
from ..data.images.mix import mix_batch
from ..data.images.preprocess import ImagePreprocess
from ..data.images.vision import source_splits, warn_skipped
from ..data.split import check_classes, holdout_fraction, stratified_holdout
from .batches import epoch_order, rank_share, step_generator
from .config import TrainConfig
from .protocol import scores_other_data
from .scoring import ClassifierReport, score_classifier


class ImageClassification(ClassifierReport):
    """Each step slices a shuffled batch, normalises it on the device and augments it."""

    family, unit = "vit", "images"
    pictures = ("confusion.png", "attention.png")
    items_per_example = 1

    def __init__(self, cfg: TrainConfig, device: torch.device, train: ImageDataset | None = None,
                 test: ImageDataset | None = None, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.splits = load_splits(cfg, train, test, info=info)
        self.train, self.test = self.splits.train, self.splits.test
        self.eval_split = self.splits.eval_split  # "validation" where a share of the training data is scored
        # A finished run is scored with the statistics it was trained with, not those of whatever part
        # of the training data is loaded now (`anyformer eval` loads none, or the training part of a
        # held-out split cut to one example).
        if cfg.normalize == "series":
            raise ValueError("normalize='series' standardises each time series by itself; images take 'dataset' "
                             "or 'symmetric'")
        if info is not None:
            self.preprocess = ImagePreprocess.from_info(info)
        elif cfg.normalize == "symmetric":  # pixels scaled to [-1, 1], as Turner's (2023) MNIST ViT trains
            _, c, h, w = self.train.images.shape
            self.preprocess = ImagePreprocess.symmetric(c, (h, w), self.train.images)
        else:
            self.preprocess = ImagePreprocess.from_images(self.train.images)
        # Corners that a warp brings in are filled with what a black pixel becomes.
        black = torch.zeros(self.train.images.shape[1], 1, 1, dtype=torch.uint8)
        self._black = float(self.preprocess(black)[0, 0, 0])
        if cfg.label_fraction is not None and info is None:  # a finished run is scored on its test split alone
            # After the statistics: every training image is there, only labels are scarce (and an MAE saw them all).
            self.train = balanced_subset(self.train, cfg.label_fraction, cfg.seed)
        self.images = self.train.images.to(device)
        self.labels = self.train.labels.to(device)
        self.steps_per_epoch = max(1, math.ceil(len(self.train) / cfg.batch_size))

    def model_overrides(self) -> dict[str, Any]:
        _, c, h, w = self.train.images.shape
        return {"num_classes": len(self.train.classes), "in_chans": c, "image_size": [h, w]}

    def normalise(self, images: Tensor) -> Tensor:
        return self.preprocess(images.to(self.device))

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)
        idx = order[i * self.cfg.batch_size:(i + 1) * self.cfg.batch_size]
        x = self.normalise(self.images[idx])
        g = step_generator(self.cfg.seed, step)
        if self.cfg.random_stroke:  # first, on the picture as drawn: a face's weight, before it is warped or cut
            x = random_stroke_width(x, self.cfg.random_stroke, generator=g)
        if self.cfg.random_elastic:  # the hand's wobble, then where the picture sits (the warp or the crop)
            x = random_elastic(x, self.cfg.random_elastic, generator=g)
        if self.cfg.augment == "digits":
            x = digits_affine(x, self.cfg.augment_strength, g, self._black)
        elif self.cfg.augment == "crop_flip":  # CIFAR's 4-pixel pad at strength 1, scaled by it
            x = random_crop_flip(x, pad=crop_pad(self.cfg.augment_strength, x.shape[-2:]), generator=g)
        elif self.cfg.augment == "resized_crop":
            x = random_resized_crop_flip(x, generator=g)
        if self.cfg.random_erasing:  # after the warp, on normalised pixels: the noise is at the data's scale
            x = random_erasing(x, self.cfg.random_erasing, generator=g)
        y = self.labels[idx]
        if self.cfg.mixup or self.cfg.cutmix:  # the whole batch mixed, then shared out: alike on any world size
            x, y = mix_batch(x, y, len(self.train.classes), self.cfg.mixup, self.cfg.cutmix, g)
        share = rank_share(len(idx), rank, world)
        return (x[share], y[share]), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        """Cross-entropy on class indices, or on target distributions (mixed images); an answer is correct
        where it names the target's largest class."""
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.cfg.label_smoothing)
        truth = y.argmax(-1) if y.is_floating_point() else y
        return loss, {"correct": (logits.argmax(-1) == truth).sum(), "count": truth.numel()}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops()  # forward + backward = 3 x forward (per image)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Each rank scores its shard of the test set; the sums are added across ranks."""
        model.eval()
        result = score_classifier(lambda i, j: model(self.normalise(self.test.images[i:j])), self.test.labels, len(self.test.classes), dist,
                                  self.cfg.eval_batch_size, self.cfg.amp, self.device)
        model.train()
        return result

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"{self.accuracy_words(summary)} after {summary['epochs']} epochs "
                f"in {summary['train_seconds']:.0f}s of training ({summary['images_per_s']:.0f} images/s)")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """confusion.png, and attention.png: where the model looks in the first 8 test images."""
        from ..viz import plot_confusion, plot_digit_attention  # matplotlib only when a run ends
        plot_confusion(result["confusion"], self.test.classes, run_dir / "confusion.png")
        device = next(model.parameters()).device
        images = self.normalise(self.test.images[:8]).to(device)
        plot_digit_attention(model, images, self.test.labels[:8], self.test.classes, run_dir / "attention.png")

    def run_info(self) -> dict[str, Any]:
        """The data's description: classes, channels, image size, statistics, and where the scored
        examples came from (eval_split, and where a share was held out, its fraction and size), so that
        `anyformer eval` of the run scores exactly the same examples."""
        _, c, h, w = self.train.images.shape
        s = self.splits
        info = {"kind": "images", "dataset": self.cfg.data, "classes": self.train.classes,
                "channels": c, "image_size": [h, w], "mean": self.preprocess.mean, "std": self.preprocess.std,
                "train_examples": len(self.train), "test_examples": len(self.test),
                "preprocess": self.preprocess.to_dict(), "eval_split": s.eval_split, "eval_source": s.eval_source}
        if s.held_out_fraction is not None:
            info.update(held_out_fraction=s.held_out_fraction, held_out_examples=s.held_out)
        if s.derived_size is not None:
            info["image_size_derived"] = s.derived_size
        if s.skipped or s.unreadable:
            info.update(skipped_files=len(s.skipped), unreadable_images=[f for f, _ in s.unreadable])
        return info


@dataclass
class ImageSplits:
    """What a classifier trains and is scored on, and where each came from. eval_split: "test" (the
    data's test/ split, or other data a finished run is scored on) or "validation" (its val/ folder,
    or a held-out share of the training data). eval_source: "test", "val", "held out", or the other
    data's part ("test of PATH", "all of PATH"). held_out_fraction and held_out: the share held out
    and how many examples it holds (before limit_eval), where one was. skipped, unreadable and
    derived_size: what decoding left out or chose (ImageDataset's fields, over every split loaded)."""

    train: ImageDataset
    test: ImageDataset
    eval_split: str = "test"
    eval_source: str = "test"
    held_out_fraction: float | None = None
    held_out: int = 0
    skipped: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    derived_size: str | None = None


def image_splits(cfg: TrainConfig, train: ImageDataset | None = None,
                 test: ImageDataset | None = None) -> tuple[ImageDataset, ImageDataset]:
    """The train and eval splits of `cfg.data` (or those given), cut to `limit_train`/`limit_eval`,
    refused in one line when either is empty or their image shapes differ. Image tasks share it.

    The eval split is the data's test/ where it has one, else its val/ (reported as validation),
    else a seeded stratified share of the training data held out (data/split.py): where there is no
    test split, every image is loaded as training data and `cfg.val_fraction` of each class (derived
    from the data where unset) is held out by `cfg.seed`, so a run, its resume and `anyformer eval`
    hold out exactly the same examples. `load_splits` says which it chose."""
    s = load_splits(cfg, train, test)
    return s.train, s.test


def load_splits(cfg: TrainConfig, train: ImageDataset | None = None, test: ImageDataset | None = None, *,
                info: dict[str, Any] | None = None) -> ImageSplits:
    """`image_splits` with where the eval split came from. `info`: a finished run's data section, to
    score it again: its own data's eval split, decoded at the run's image size and channels (the
    training split is then not loaded), or, where `cfg.data` is other data, that data's test split
    (else all of it) with its classes mapped to the run's."""
    if train is None and test is None and scores_other_data(cfg.data, info):
        return _other_data(cfg, info)
    kind, splits = ("given", ("train", "test")) if train is not None and test is not None else source_splits(cfg.data)
    load = _Loader(cfg, kind, info)
    if test is not None or "test" in splits or "val" in splits:
        part = "test" if test is not None or "test" in splits else "val"
        if train is None and info is None:
            train = load(cfg.data, "train")
            check_classes(train.labels, train.classes, f"the training split of {cfg.data}")
            if kind in ("folder", "tar"):  # one colour image in the test split alone must not upset the shapes
                load.channels = train.channels
        test = _run_classes(load(cfg.data, part) if test is None else test, info, cfg.data)
        # A finished run scored again needs no training images: its statistics are saved with it.
        train = _none_of(test) if train is None else _run_classes(train, info, cfg.data)
        out = ImageSplits(train, test, "test" if part == "test" else "validation", part)
    else:
        full = load(cfg.data, "train" if "train" in splits else "all") if train is None else train
        out = _held_out(cfg, _run_classes(full, info, cfg.data), info)
    out.skipped, out.unreadable, out.derived_size = load.report()
    return _limited(cfg, out, trains=info is None or out.held_out_fraction is not None)


def _held_out(cfg: TrainConfig, full: ImageDataset, info: dict[str, Any] | None) -> ImageSplits:
    """All of the training data split into a training part and a held-out share, by (data, seed,
    fraction) alone; the fraction a finished run recorded is the one it is scored with again."""
    check_classes(full.labels, full.classes, f"{cfg.data} (no test/ split: all of it is training data)")
    recorded = (info or {}).get("held_out_fraction")
    fraction = float(recorded) if recorded is not None else holdout_fraction(full.labels, cfg.val_fraction)
    train_idx, held_idx = stratified_holdout(full.labels, fraction, cfg.seed, full.classes)
    return ImageSplits(_take(full, train_idx), _take(full, held_idx), "validation", "held out", fraction,
                       len(held_idx))


def _other_data(cfg: TrainConfig, info: dict[str, Any]) -> ImageSplits:
    """Other data a finished run is scored on: its test split where it has one, else all of it, at the
    run's image size and channels, its classes mapped to the run's (a class the run does not know is
    refused)."""
    kind, splits = source_splits(cfg.data)
    part = "test" if "test" in splits else "all"
    load = _Loader(cfg, kind, info)
    test = _run_classes(load(cfg.data, part), info, cfg.data)
    out = ImageSplits(_none_of(test), test, "test", f"{part} of {cfg.data}")
    out.skipped, out.unreadable, out.derived_size = load.report()
    return _limited(cfg, out, trains=False)


class _Loader:
    """load_image_dataset with the options a split needs: the run's image size and channels where a
    finished run is scored, else the asked image size; what each load skipped gathered to be said
    once (`report`), not once per split. Only options that are set are passed on."""

    def __init__(self, cfg: TrainConfig, kind: str, info: dict[str, Any] | None) -> None:
        self.kind, self.data, self.image_size = kind, cfg.data, cfg.image_size
        self.channels: int | None = None
        if info is not None:
            self.image_size, self.channels = info["image_size"], int(info["channels"])
        self.loaded: list[ImageDataset] = []

    def __call__(self, data: str, split: str) -> ImageDataset:
        opts: dict[str, Any] = {}
        if self.image_size is not None:
            opts["image_size"] = tuple(self.image_size) if isinstance(self.image_size, list) else self.image_size
        if self.channels is not None:
            opts["channels"] = self.channels
        if self.kind in ("folder", "tar"):
            opts["warn"] = False  # said once for all splits, by `report`
        ds = load_image_dataset(data, split, **opts)
        self.loaded.append(ds)
        return ds

    def report(self) -> tuple[list[str], list[tuple[str, str]], str | None]:
        """(stray files, unreadable images, why the size was derived) over every load, warned once each."""
        skipped = list(dict.fromkeys(f for ds in self.loaded for f in ds.skipped))
        unreadable = list(dict.fromkeys(tuple(u) for ds in self.loaded for u in ds.unreadable))
        derived = next((ds.derived_size for ds in self.loaded if ds.derived_size), None)
        if self.kind in ("folder", "tar"):
            warn_skipped(str(Path(self.data).expanduser()), skipped, unreadable)
        return skipped, unreadable, derived


def _run_classes(ds: ImageDataset, info: dict[str, Any] | None, source: str) -> ImageDataset:
    """`ds` labelled by a finished run's classes (by name; a subset is fine), or as it is without a run.
    A class with examples here that the run does not know is refused in one line."""
    if info is None or not info.get("classes"):
        return ds
    known = [str(c) for c in info["classes"]]
    if ds.classes == known:
        return ds
    present = [ds.classes[i] for i in torch.unique(ds.labels).tolist()]
    unknown = [c for c in present if c not in known]
    if unknown:
        raise DataError(f"{source} has {'a class' if len(unknown) == 1 else 'classes'} the run does not know: "
                        f"{', '.join(unknown)}; expected only the run's classes ({', '.join(known)})")
    mapping = torch.tensor([known.index(c) if c in known else -1 for c in ds.classes], dtype=torch.int64)
    return ImageDataset(ds.images, mapping[ds.labels], known, ds.name)


def _limited(cfg: TrainConfig, s: ImageSplits, trains: bool) -> ImageSplits:
    """`s` cut to limit_train/limit_eval (after any hold-out), refused where a part is empty or the
    shapes differ. `trains`: whether the training part must hold examples (not where a finished run
    is only scored)."""
    if cfg.limit_train:
        s.train = _head(s.train, cfg.limit_train)
    if cfg.limit_eval:
        s.test = _head(s.test, cfg.limit_eval)
    if (trains and len(s.train) == 0) or len(s.test) == 0:
        raise ValueError(f"dataset {cfg.data!r} has no examples in its train or {s.eval_source} split "
                         f"({len(s.train)} train, {len(s.test)} {s.eval_split})")
    if s.train.images.shape[1:] != s.test.images.shape[1:]:
        raise ValueError(f"train and {s.eval_split} images differ in shape: {tuple(s.train.images.shape[1:])} "
                         f"vs {tuple(s.test.images.shape[1:])}")
    return s


def _take(ds: ImageDataset, idx: Tensor) -> ImageDataset:
    return ImageDataset(ds.images[idx], ds.labels[idx], ds.classes, ds.name)


def _none_of(ds: ImageDataset) -> ImageDataset:
    """No examples, in `ds`'s shape and classes: the training part of a run that is only scored."""
    return ImageDataset(ds.images[:0], ds.labels[:0], ds.classes, ds.name)


def _head(ds: ImageDataset, n: int) -> ImageDataset:
    return ImageDataset(ds.images[:n], ds.labels[:n], ds.classes, ds.name)


def balanced_subset(ds: ImageDataset, fraction: float, seed: int) -> ImageDataset:
    """`fraction` of the examples, the same number from every class (0.01 of MNIST: 60 of each digit),
    drawn by `seed` alone: a fine-tune and its from-scratch baseline with one seed see the same images."""
    k = len(ds.classes)
    per_class = round(fraction * len(ds) / k)
    if per_class < 1:
        raise ValueError(f"label_fraction {fraction} of {len(ds)} examples leaves no example of each of the "
                         f"{k} classes; expected at least {k / len(ds):.2g}")
    g = torch.Generator().manual_seed(seed)
    picked = []
    for c in range(k):
        members = (ds.labels == c).nonzero().flatten()
        if len(members) < per_class:
            raise ValueError(f"label_fraction {fraction} needs {per_class} examples of class {ds.classes[c]!r}, "
                             f"but the training split has {len(members)}")
        picked.append(members[torch.randperm(len(members), generator=g)[:per_class]])
    idx = torch.cat(picked).sort().values  # in the split's order; each epoch shuffles anyway
    return ImageDataset(ds.images[idx], ds.labels[idx], ds.classes, ds.name)


def digits_affine(x: Tensor, strength: float, generator: torch.Generator, fill: float) -> Tensor:
    """The grey pictures' augmentation (`--augment digits`): random_affine's default shifts, rotations and
    scalings, each range times `strength` (1: its defaults, as measured in the image rounds; 0: none)."""
    return random_affine(x, max_shift=AFFINE_SHIFT * strength, max_rotate_deg=AFFINE_ROTATE_DEG * strength,
                         scale=(1 - AFFINE_SCALE * strength, 1 + AFFINE_SCALE * strength), generator=generator,
                         fill=fill)


def crop_pad(strength: float, size: tuple[int, int]) -> int:
    """The colour pictures' crop (`--augment crop_flip`): CIFAR's 4-pixel pad times `strength`, rounded, and at most
    one pixel under the shorter side (a reflected pad cannot reach further)."""
    return min(round(CROP_PAD * strength), min(size) - 1)
