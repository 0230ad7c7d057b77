"""Time-series classification: archive splits in memory, standardised per channel, augmented per
series, a cross-entropy loss and accuracy; a confusion matrix and attention over time at the end.

Data without a test split (a single CSV, .tsv, .npy or .npz) has a seeded, stratified share of it
held out and scored as validation (`data/split.py`): the same share from the same data, seed and
--val-fraction, so that a resumed run and `anyformer eval` score exactly the series training never saw.

One recipe serves every dataset of the archive because what differs between datasets is derived
from the data here (`derive`): the patch from the length, the batch from the number of training
series (capped by --batch-size), the model's width and depth from the same count. The number of
updates is the recipe's; epochs follow from it and the batch.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.errors import DataError
from ..data.series.augment import augment_series, resample_to
from ..data.series.dataset import SeriesDataset, SeriesPreprocess, load_series_data
from ..data.split import check_classes, holdout_fraction, stratified_holdout
from .batches import epoch_order, rank_share, step_generator
from .config import TrainConfig
from .protocol import scores_other_data
from .scoring import ClassifierReport, score_classifier

# Patch starts per series the stride is chosen for: attention's cost grows with their square.
PATCH_STARTS = 32
# The most memory the kernel stem's features of one split may keep (they are computed once per series
# where they fit: 33 tokens of 10,000 proportions are 1.3 MB a series, so about 1,600 series fit).
CACHE_BYTES = 2 * 2 ** 30


def derive(n_train: int, channels: int, length: int, patching: str, batch_cap: int, stem: str = "patches",
           seed: int = 0) -> dict[str, Any]:
    """The sizes one recipe needs on any archive dataset, from the training split's shape alone."""
    kernels = stem == "kernels"
    per_step = channels if patching == "channel" and not kernels else 1
    # Patches twice as long as the stride, so each overlaps its neighbours by half, as PatchTST's
    # 16-step patches every 8 steps (Nie et al. 2023): about 32 tokens a series. On ArrowHead (seed 0)
    # this scored 0.783 where 64 non-overlapping 4-step patches scored 0.709, 32 of 8 steps 0.669 and
    # 64 half-overlapping ones 0.657: a token wide enough to hold a piece of shape, and shift-tolerant.
    stride = max(1, math.ceil(length * per_step / PATCH_STARTS))
    # About four updates per epoch on the smallest sets (tens of series), larger batches on larger ones.
    # Never more than a quarter of the training series: the floor of 8 this had once gave 20 series
    # three batches an epoch (the last short) and 8 series one batch of all of them. From 29 series up
    # a quarter is 8 or more anyway, so the archive's sets of 36 and more get the batches they always had.
    batch = int(max(1, min(batch_cap, math.ceil(n_train / 4))))
    big = n_train >= 1000  # a wider, deeper model only where there are enough series to fit it
    sizes = {"patch_size": 2 * stride, "patch_stride": stride, "patching": "across" if kernels else patching,
             "width": 128 if big else 64, "depth": 4 if big else 3, "heads": 4, "mlp_hidden": 256 if big else 128,
             "batch": batch}
    if kernels:
        # The kernels read every channel and make their own slopes; their random draws (channel subsets,
        # the series biases come from) follow the run's seed, as MiniRocket's follow its random_state.
        return {**sizes, "stem": "kernels", "difference": False, "position": "learned", "kernel_seed": seed}
    # Rotary positions are relative: on ArrowHead (36 series) they scored 0.686 where learned ones scored
    # 0.64-0.66, with a lower test loss; per-channel tokens are not in time order, so they keep learned ones.
    # Each token also reads the first differences of its steps (the second representation of
    # MultiRocket, Tan et al. 2022): the slope beside the level.
    return {**sizes, "difference": True, "position": "rotary" if patching == "across" else "learned"}


def fit_length(ds: SeriesDataset, length: int) -> SeriesDataset:
    """Series longer than `length` (the model's) resampled down to it; shorter ones kept as they are."""
    if ds.length <= length:
        return ds
    long = ds.lengths > length
    values = ds.values[:, :, :length].clone()
    values[long] = resample_to(ds.values[long], ds.lengths[long], length)
    return SeriesDataset(values, ds.lengths.clamp(max=length), ds.labels, ds.classes, ds.name)


class SeriesClassification(ClassifierReport):
    """Each step slices a shuffled batch, standardises it and augments it (time warp, crop, scale, jitter)."""

    family, unit = "series", "series"
    pictures = ("confusion.png", "attention.png")
    items_per_example = 1

    def __init__(self, cfg: TrainConfig, device: torch.device, train: SeriesDataset | None = None,
                 test: SeriesDataset | None = None, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.val_fraction: float | None = None
        if train is None or test is None:
            if scores_other_data(cfg.data, info):
                train = test = other_data(cfg, info)  # scored only: its first series stand in for training data
            else:
                train, test = self._splits(cfg, info)
        if cfg.limit_train:
            train = train.head(cfg.limit_train)
        if cfg.limit_eval:
            test = test.head(cfg.limit_eval)
        if len(train) == 0 or len(test) == 0:
            raise ValueError(f"dataset {cfg.data!r} has no series in its train or test split")
        # A finished run is scored as trained: its statistics and sizes, not those of what is loaded now.
        # The recipe standardises per channel over the training split, not each series by itself
        # (normalize="series"): per series scored lower on seed 0 (JapaneseVowels 0.797 against 0.986,
        # BasicMotions 0.95 against 1.0, ArrowHead 0.749 against 0.794): level and scale tell classes apart.
        self.preprocess = SeriesPreprocess.from_info(info) if info is not None else SeriesPreprocess.from_dataset(
            train, per_series=cfg.normalize == "series")
        self.length = int(info["length"]) if info is not None else train.length
        patching = cfg.model_overrides.get("patching", "across")
        stem = cfg.model_overrides.get("stem", "patches")
        self.derived = info["derived"] if info is not None else derive(len(train), train.channels, self.length,
                                                                        patching, cfg.batch_size, stem, cfg.seed)
        self.train, self.test = train, fit_length(test, self.length)
        self.classes = train.classes if info is None else list(info["classes"])
        self.batch_size = int(self.derived["batch"])
        self.values = self.preprocess(train.values, train.lengths).to(device)
        self.lengths, self.labels = train.lengths.to(device), train.labels.to(device)
        self.steps_per_epoch = math.ceil(len(train) / self.batch_size)
        # The kernel stem's output, computed once per series where nothing changes a series between
        # epochs (no augmentation): set by fit_model.
        self.train_features: Tensor | None = None
        self.test_features: Tensor | None = None

    def fit_model(self, model: nn.Module) -> None:
        """A kernel stem fitted to the training series (biases, feature statistics); their features,
        and the evaluated series', kept for the run where they fit in CACHE_BYTES each (else each
        batch computes its own: the same numbers, more slowly)."""
        if getattr(model.config, "stem", "patches") != "kernels":
            return
        feats = model.fit_stem(self.values.cpu(), self.lengths.cpu())
        per_series = feats[0].numel() * feats.element_size()
        if self.cfg.augment != "series" and len(feats) * per_series <= CACHE_BYTES:
            self.train_features = feats.to(self.device)
        if len(self.test) * per_series <= CACHE_BYTES:
            test, lengths = self.normalise(self.test, 0, len(self.test))
            with torch.no_grad():
                self.test_features = torch.cat([model.stem_features(test[i:i + 16].cpu(), lengths[i:i + 16].cpu())
                                                for i in range(0, len(test), 16)]).to(self.device)

    def _splits(self, cfg: TrainConfig, info: dict[str, Any] | None) -> tuple[SeriesDataset, SeriesDataset]:
        """(train, evaluated): the data's test split where it has one, else a share held out of it."""
        train, test = load_series_data(cfg.data, cfg.label_column)
        # Before any --limit-train: `anyformer eval` loads one training series, which is one class.
        check_classes(train.labels, train.classes, f"series data {cfg.data!r}")
        if test is not None:
            return train, test
        self.eval_split = "validation"
        # A finished run holds out the share it recorded, whatever the default share may become.
        recorded = (info or {}).get("val_fraction")
        self.val_fraction = float(recorded) if recorded else holdout_fraction(train.labels, cfg.val_fraction)
        keep, held = stratified_holdout(train.labels, self.val_fraction, cfg.seed, train.classes)
        return train.take(keep), train.take(held)

    def model_overrides(self) -> dict[str, Any]:
        fixed = {"num_classes": len(self.classes), "channels": self.train.channels, "length": self.length}
        chosen = {k: v for k, v in self.derived.items() if k != "batch" and k not in self.cfg.model_overrides}
        return {**chosen, **fixed}

    def normalise(self, ds: SeriesDataset, i: int, j: int) -> tuple[Tensor, Tensor]:
        return self.preprocess(ds.values[i:j], ds.lengths[i:j]).to(self.device), ds.lengths[i:j].to(self.device)

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, Tensor, Tensor], int]:
        epoch, i = divmod(step, self.steps_per_epoch)
        rows = slice(i * self.batch_size, (i + 1) * self.batch_size)
        idx = epoch_order(len(self.train), self.cfg.seed, epoch, self.device)[rows]
        if self.train_features is not None:
            share = rank_share(len(idx), rank, world)
            return (self.train_features[idx][share], self.lengths[idx][share], self.labels[idx][share]), len(idx)
        x, lengths = self.values[idx], self.lengths[idx]
        if self.cfg.augment == "series":  # drawn from the lengths on the host: no copy back from the device
            host_lengths = self.train.lengths[epoch_order(len(self.train), self.cfg.seed, epoch)[rows]]
            x = augment_series(x, host_lengths, step_generator(self.cfg.seed, step))
        share = rank_share(len(idx), rank, world)
        return (x[share], lengths[share], self.labels[idx][share]), len(idx)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, dict[str, Any]]:
        x, lengths, y = batch
        # x: the series, or the kernel stem's features of them where those were computed once (fit_model)
        logits = model(None, lengths, features=x) if self.train_features is not None else model(x, lengths)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.cfg.label_smoothing)
        return loss, {"correct": (logits.argmax(-1) == y).sum(), "count": y.numel()}

    def flops_per_item(self, model: nn.Module) -> float:
        return 3.0 * model.forward_flops()

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        """Each rank scores its shard of the test split; the sums are added across ranks."""
        model.eval()
        if self.test_features is not None:
            lengths = self.test.lengths.to(self.device)
            logits = lambda i, j: model(None, lengths[i:j], features=self.test_features[i:j])
        else:
            logits = lambda i, j: model(*self.normalise(self.test, i, j))
        result = score_classifier(logits, self.test.labels, len(self.classes), dist, self.cfg.eval_batch_size,
                                  self.cfg.amp, self.device)
        model.train()
        return result

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"{self.accuracy_words(summary)} after {summary['epochs']} epochs "
                f"in {summary['train_seconds']:.0f}s of training ({summary['series_per_s']:.0f} series/s)")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        """confusion.png, and attention.png: where the class token looks along the first test series."""
        from ..viz import plot_confusion
        from ..viz.series_attention import plot_series_attention
        plot_confusion(result["confusion"], self.classes, run_dir / "confusion.png")
        n = min(4, len(self.test))
        x, lengths = self.normalise(self.test, 0, n)
        plot_series_attention(model, x.cpu(), lengths.cpu(), run_dir / "attention.png", classes=self.classes,
                              truth=self.test.labels[:n].tolist())

    def run_info(self) -> dict[str, Any]:
        """The data's description; `test_examples` counts what evaluation scores (the held-out share where
        `eval_split` is "validation", drawn with `val_fraction` and the run's seed)."""
        return {"kind": "series", "dataset": self.cfg.data, "classes": self.classes,
                "channels": self.train.channels, "length": self.length, "derived": self.derived,
                "train_examples": len(self.train), "test_examples": len(self.test),
                "eval_split": self.eval_split, "val_fraction": self.val_fraction,
                "preprocess": self.preprocess.to_dict()}


def other_data(cfg: TrainConfig, info: dict[str, Any]) -> SeriesDataset:
    """Data other than a finished run's, to score the run on: its test split where it has one, else all
    of it, labelled with the run's class indices; a label or a channel count the run does not know is
    refused in one line."""
    train, test = load_series_data(cfg.data, cfg.label_column)
    scored = test if test is not None else train
    classes = list(info["classes"])
    index = {name: i for i, name in enumerate(classes)}
    names = [scored.classes[k] for k in scored.labels.tolist()]
    unknown = sorted(set(names) - set(index))
    if unknown:
        raise DataError(f"{cfg.data}: label(s) {unknown[:8]} are not among the run's classes {classes[:12]}; "
                        f"expected series of the classes the run was trained on")
    if scored.channels != int(info["channels"]):
        raise DataError(f"{cfg.data}: {scored.channels} channel(s); the run was trained on {info['channels']}")
    labels = torch.tensor([index[n] for n in names], dtype=torch.int64)
    return SeriesDataset(scored.values, scored.lengths, labels, classes, scored.name)
