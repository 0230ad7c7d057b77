"""Training settings: one dataclass, filled from a recipe and then from command-line overrides."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

SCHEDULES = ("cosine", "constant")
AUGMENTS = ("none", "digits", "crop_flip", "resized_crop", "series")
NORMALIZE = ("dataset", "symmetric", "series")
AMP = ("none", "bf16", "fp16", "auto")
LOGS = ("jsonl", "tensorboard")


@dataclass
class TrainConfig:
    recipe: str = "custom"
    task: str = "classify"                   # a name in tasks.TASKS (checked when the task is made)
    model: str = "vit-mnist"                 # a preset name
    model_overrides: dict[str, Any] = field(default_factory=dict)
    data: str = "mnist"                      # a dataset name or a path
    out: str | None = None                   # run directory (default runs/<recipe>)
    epochs: float | None = 10
    max_steps: int | None = None             # overrides epochs when given
    batch_size: int = 128                    # the global batch, whatever the number of processes
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.0                # cosine ends at lr * min_lr_ratio
    weight_decay: float = 0.05
    decay_all: bool = False                  # Keras's Adam decays every variable; we decay matrices only
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "cosine"
    warmup_steps: int = 0
    label_smoothing: float = 0.0
    grad_clip: float | None = None
    sam: float = 0.0                         # sharpness-aware minimisation's radius (train/sam.py); 0: off
    augment: str = "none"
    augment_strength: float = 1.0            # images: digits' shifts, rotations and scalings, or crop_flip's pad,
                                             # times this
    mixup: float = 0.0                       # images: mixup's Beta alpha (0: off; data/images/mix.py)
    cutmix: float = 0.0                      # images: CutMix's Beta alpha (0: off; with mixup, even odds a batch)
    random_erasing: float = 0.0              # images: the chance that a picture has a rectangle replaced by noise
                                             # (DeiT: 0.25; 0: off; data/images/augment.py random_erasing)
    random_stroke: float = 0.0               # images: the chance that a picture's strokes are made thicker or
                                             # thinner (0: off; data/images/augment.py random_stroke_width)
    random_elastic: float = 0.0              # images: the chance that a picture is distorted elastically
                                             # (Simard et al. 2003; 0: off; data/images/augment.py random_elastic)
    normalize: str = "dataset"               # dataset: per-channel mean/std; symmetric: pixels in [-1, 1];
                                             # series (time series only): then each series by its own
    eval_every: int = 0                      # steps between evaluations; 0 = each epoch
    eval_batch_size: int = 1000
    limit_train: int | None = None           # use only the first N training examples (tests, smoke runs)
    limit_eval: int | None = None
    seq_len: int | None = None               # language models: tokens per training sequence
    eval_iters: int = 50                     # language models: validation batches per evaluation
    tokenizer: str = "char"                  # language models: char | bpe (learned from the corpus) | gpt2 | a file
    image_size: int | list[int] | None = None  # images: resize every image to this (N or [H, W]); None: as stored
    val_fraction: float | None = None        # classification data without a test split: the seeded, stratified
                                             # share of it held out for validation (None: derived from the data)
    label_column: str | None = None          # series or a table in a CSV: the column holding the labels or the target
                                             # (None: found by name)
    text_column: str | None = None           # labelled text in a table: its text column, or several joined by commas
                                             # (None: the column whose values are texts)
    objective: str | None = None             # tables: classify or regress (--task; None: from the target's cells)
    baseline: bool = False                   # also fit the classical method on the same split (tables: LightGBM)
    select_fraction: float | None = None     # tables: the share of the training rows held back to pick the
                                             # evaluation whose weights the run keeps (None: the last ones)
    label_fraction: float | None = None      # classification: a seeded, class-balanced share of the training labels
    init_from: str | None = None             # a run directory whose trunk (an MAE's encoder, a ViT's) starts the model
    device: str = "auto"
    amp: str = "none"                        # auto: bf16 where the speed plan measured it faster
    compile: bool | None = None              # None: the speed plan measures eager against torch.compile
    plan: str = "auto"                       # auto: plan here (replayed on resume); stock; or a plan.json to replay
    seed: int = 0
    threads: int | None = None
    deterministic: bool = False              # deterministic kernels only (CUDA: bitwise-repeatable steps, slower)
    checkpoint_every: int = 0                # steps; 0 = only at evaluations
    keep_checkpoints: int = 2
    resume: bool | str = False               # True: continue the run in `out`; "auto": where it holds one
    overwrite: bool = False                  # replace the run that `out` holds (else refused, unless resuming)
    progress: bool = True
    plots: bool = True                       # draw curves.png and the task's pictures (the results do not depend on it)
    fsdp: bool = False                       # under torchrun: shard weights, gradients and optimiser state (FSDP2)
    log: str = "jsonl"                       # jsonl: metrics.jsonl; tensorboard: also RUN/tensorboard/
    time_budget: float | None = None         # seconds: fit the run's steps so that its loop ends within them
                                             # (None or 0: no budget)
    ema: float | None = None                 # keep an exponential moving average of the weights (decay, e.g. 0.999):
                                             # it is what evaluation scores and model.safetensors holds
    label_dropout: float = 0.1               # generators: share of labels shown as "no class" (for guidance)
    judge: str | None = None                 # generators: a classifier run that scores samples at each evaluation
    judge_samples: int = 500                 # generators: images sampled for the judge, spread evenly over classes
    derived: dict[str, str] = field(default_factory=dict)  # settings derived from the data: name -> why
                                                           # (`anyformer train --data PATH` with no recipe)
    extended: list[dict[str, Any]] = field(default_factory=list)  # a finished run continued with --resume
                                                           # --max-steps N: {from_step, to_step, schedule} each

    def __post_init__(self) -> None:
        for name, valid in (("schedule", SCHEDULES), ("augment", AUGMENTS), ("normalize", NORMALIZE), ("amp", AMP),
                            ("device", ("auto", "cpu", "cuda")), ("log", LOGS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; expected one of {valid}")
        if not 0 <= self.augment_strength < 7:  # at 7 a shift reaches half the side and a scaling 0.3
            raise ValueError(f"augment_strength scales the shifts, rotations and scalings or the crop's pad: expected "
                             f"0 to 7, got {self.augment_strength}")
        if self.mixup < 0 or self.cutmix < 0:
            raise ValueError(f"mixup and cutmix take a Beta alpha >= 0 (0: off), got {self.mixup} and {self.cutmix}")
        if not 0 <= self.random_erasing <= 1:
            raise ValueError(f"random_erasing is the chance that a picture is erased in part: expected 0 to 1, got "
                             f"{self.random_erasing}")
        if not 0 <= self.random_stroke <= 1:
            raise ValueError(f"random_stroke is the chance that a picture's strokes change width: expected 0 to 1, "
                             f"got {self.random_stroke}")
        if not 0 <= self.random_elastic <= 1:
            raise ValueError(f"random_elastic is the chance that a picture is distorted elastically: expected 0 to "
                             f"1, got {self.random_elastic}")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError(f"batch_size and grad_accum must be >= 1, got {self.batch_size}, {self.grad_accum}")
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size ({self.batch_size}) must be divisible by grad_accum ({self.grad_accum})")
        if self.max_steps is None and (self.epochs is None or self.epochs <= 0):
            raise ValueError(f"give a positive --epochs or --max-steps (got epochs={self.epochs}, "
                             f"max_steps={self.max_steps})")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0, got lr={self.lr}, weight_decay={self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 (or unset), got {self.grad_clip}")
        if not 0 <= self.sam < float("inf"):
            raise ValueError(f"sam is the radius of sharpness-aware minimisation's ascent step: expected a number >= 0 "
                             f"(e.g. 0.05; 0: off), got {self.sam}")
        for name in ("warmup_steps", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("keep_checkpoints", "eval_batch_size", "eval_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("limit_train", "limit_eval", "seq_len"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (or unset), got {getattr(self, name)}")
        if self.ema is not None and not 0 < self.ema < 1:
            raise ValueError(f"ema must be a decay in (0, 1), e.g. 0.999 (or unset), got {self.ema}")
        if not 0 <= self.label_dropout < 1:
            raise ValueError(f"label_dropout must be in [0, 1), got {self.label_dropout}")
        if self.judge_samples < 1:
            raise ValueError(f"judge_samples must be >= 1, got {self.judge_samples}")
        if self.label_fraction is not None and not 0 < self.label_fraction <= 1:
            raise ValueError(f"label_fraction must be in (0, 1] (or unset), got {self.label_fraction}")
        if self.time_budget is not None and not (isinstance(self.time_budget, (int, float))
                                                 and not isinstance(self.time_budget, bool) and self.time_budget >= 0
                                                 and math.isfinite(self.time_budget)):
            raise ValueError(f"time_budget must be a number of seconds, > 0 (or 0 / unset: no budget), "
                             f"got {self.time_budget!r}")
        if self.objective not in (None, "classify", "regress"):
            raise ValueError(f"unknown task {self.objective!r}; expected classify or regress")
        if self.select_fraction is not None and not 0 <= self.select_fraction < 1:
            raise ValueError(f"select_fraction must lie in [0, 1) (or unset), got {self.select_fraction}")
        if self.val_fraction is not None and not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must lie in (0, 1) (or unset), got {self.val_fraction}")
        if self.image_size is not None:
            sizes = self.image_size if isinstance(self.image_size, (list, tuple)) else [self.image_size]
            if len(sizes) not in (1, 2) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                                   for v in sizes):
                raise ValueError(f"image_size must be a positive size N or [H, W] (or unset), got {self.image_size!r}")
        if self.compile is not None and not isinstance(self.compile, bool):
            raise TypeError(f"compile must be true, false or null (the plan decides), got {self.compile!r}")
        if self.resume not in (True, False, "auto"):
            raise ValueError(f"resume must be true, false or \"auto\", got {self.resume!r}")
        if not isinstance(self.fsdp, bool):
            raise TypeError(f"fsdp must be true or false, got {self.fsdp!r}")
        if not (isinstance(self.betas, (list, tuple)) and len(self.betas) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in self.betas)):
            raise ValueError(f"betas must be two numbers in [0, 1) (AdamW's B1 B2), got {self.betas!r}")
        self.betas = tuple(self.betas)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown training option(s) {unknown}; valid options: {sorted(names)}")
        return cls(**values)
