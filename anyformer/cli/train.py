"""`anyformer train`, `tune` and `recipes`: a recipe's settings from the command line."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from .args import duration, image_size, key_value


def add_parsers(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train a recipe (default: mnist) and write a run directory")
    add_train_arguments(t)
    t.set_defaults(handler=train)
    tu = sub.add_parser("tune", help="plan a recipe's training before training it: measure, print and save the "
                                     "choices (replay them with train --plan FILE)")
    add_train_arguments(tu)
    tu.add_argument("--save", metavar="FILE", help="write the plan here (a plan.json for train --plan FILE)")
    tu.set_defaults(handler=tune)
    sub.add_parser("recipes", help="list the training recipes").set_defaults(handler=recipes)


def add_train_arguments(t: argparse.ArgumentParser) -> None:
    """`train`'s options, which `tune` shares: it plans the run that train would run with them."""
    t.add_argument("recipe", nargs="?", default=None, help="a recipe name (see `anyformer recipes`)")
    t.add_argument("--model", help="model preset, e.g. vit-mnist, vit-s/16, shakespeare-char")
    t.add_argument("--set", dest="model_overrides", type=key_value, action="append", metavar="KEY=VALUE",
                   help="override a model config field, e.g. --set depth=4 (repeatable)")
    t.add_argument("--data", help="a dataset name (mnist, fashion-mnist, cifar10, shakespeare, GunPoint) or your "
                                  "own: a folder of class folders of images, a text file or folder, a .csv/.ts/.tsv/"
                                  ".npy of labelled series; with no recipe the task and its settings come from it")
    t.add_argument("--out", help="run directory (default runs/RECIPE)")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=float)
    g.add_argument("--max-steps", type=int)
    t.add_argument("--batch-size", type=int, help="the global batch size")
    t.add_argument("--grad-accum", type=int, help="split each batch into this many accumulated chunks")
    t.add_argument("--lr", type=float)
    t.add_argument("--weight-decay", type=float)
    t.add_argument("--warmup-steps", type=int)
    t.add_argument("--schedule", choices=["cosine", "constant"])
    t.add_argument("--min-lr-ratio", type=float, metavar="R",
                   help="the cosine schedule ends at the rate times R, not at zero (default 0)")
    t.add_argument("--label-smoothing", type=float)
    t.add_argument("--augment-strength", type=float, help="images: --augment digits' shifts (2/28 of the side), "
                   "rotations (10 degrees) and scalings (0.9-1.1), or crop_flip's pad (4 px), times this (default 1)")
    t.add_argument("--mixup", type=float, help="images: mixup's Beta alpha (DeiT: 0.8; 0: off)")
    t.add_argument("--cutmix", type=float, help="images: CutMix's Beta alpha (DeiT: 1.0; 0: off); with --mixup, "
                                                  "each batch takes one of the two")
    t.add_argument("--random-erasing", type=float, metavar="P",
                   help="images: the chance that a picture has one rectangle replaced by noise (DeiT: 0.25; 0: off)")
    t.add_argument("--random-stroke", type=float, metavar="P",
                   help="images: the chance that a picture's strokes are made thicker or thinner, by up to a pixel "
                        "a side, before its other augmentation (0: off, the default)")
    t.add_argument("--random-elastic", type=float, metavar="P",
                   help="images: the chance that a picture is distorted elastically (Simard et al. 2003: a smooth "
                        "random displacement of about 1/20 of the side), before its warp or crop (0: off, the default)")
    t.add_argument("--betas", type=float, nargs=2, metavar=("B1", "B2"),
                   help="AdamW's decay rates of its gradient averages (default: 0.9 0.999, or the recipe's)")
    t.add_argument("--grad-clip", type=float)
    t.add_argument("--sam", type=float, metavar="RHO",
                   help="sharpness-aware minimisation (Foret et al. 2021): each step's gradient taken again at the "
                        "worst point within RHO of the weights (e.g. 0.05; two passes a step; 0: off)")
    t.add_argument("--augment", choices=["none", "digits", "crop_flip", "resized_crop", "series"])
    t.add_argument("--eval-every", type=int, help="steps between evaluations (default: each epoch)")
    t.add_argument("--limit-train", type=int, help="train on the first N examples only")
    t.add_argument("--limit-eval", type=int, help="evaluate on the first N examples only")
    t.add_argument("--seq-len", type=int, help="language models: tokens per training sequence")
    t.add_argument("--tokenizer", help="language models: char, bpe (learned from your corpus, saved with the run), "
                                       "gpt2, or a tokenizer file (tokenizer.json, r50k_base.tiktoken)")
    t.add_argument("--image-size", type=image_size, metavar="N|HxW",
                   help="images: resize every image to this size (default: derived from your images, or as stored)")
    t.add_argument("--val-fraction", type=float, metavar="F",
                   help="data without a test split: the seeded, stratified share held out for validation "
                        "(default: 0.2, raised so that each class holds out at least 2)")
    t.add_argument("--select-fraction", type=float, metavar="F",
                   help="tables: the seeded share of the training rows held back to pick the evaluation whose "
                        "weights the run keeps (0: keep the last; default: derived)")
    t.add_argument("--label-column", metavar="NAME",
                   help="series or a table in a CSV: the column that holds the labels or the target (default: a "
                        "column named label, class, target or y)")
    t.add_argument("--text-column", metavar="NAME[,NAME...]",
                   help="labelled text in a table: the column holding the texts, or several joined by commas (a "
                        "title and a body, read as one text); the data is then read as labelled text (default: "
                        "the column whose values are long and mostly distinct)")
    t.add_argument("--task", dest="objective", choices=["classify", "regress", "text", "table", "lm"],
                   help="tables: predict classes or a number (default: from the target's values, and said); "
                        "text: read a CSV or class folders as labelled text (a text classifier), table: as a "
                        "table, lm: a folder as a corpus for a language model (default: from the files)")
    t.add_argument("--baseline", action="store_true", default=None,
                   help="also fit the classical method a practitioner tries first on the same split (tables: "
                        "LightGBM; images: logistic regression on the pixels; series: MiniRocket; labelled text: "
                        "TF-IDF + logistic regression) and print and record both figures")
    t.add_argument("--eval-iters", type=int, help="language models: validation batches per evaluation")
    t.add_argument("--init-from", metavar="DIR",
                   help="start from a run's weights (a ViT from an MAE run's encoder or a ViT run's trunk)")
    t.add_argument("--label-fraction", type=float, metavar="F",
                   help="train on a seeded, class-balanced fraction of the labels (0.01: 600 MNIST images)")
    t.add_argument("--device", choices=["auto", "cpu", "cuda"])
    t.add_argument("--amp", choices=["none", "bf16", "fp16", "auto"],
                   help="mixed precision; auto = bf16 where the speed plan measured it faster here")
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training step, or not (default: the speed plan times both here)")
    t.add_argument("--plan", metavar="auto|stock|PATH",
                   help="the speed plan: auto (measured here, before the first step; a resumed run replays its own), "
                        "stock (PyTorch's default kernels), or a run's plan.json to replay")
    t.add_argument("--time-budget", type=duration, metavar="TIME",
                   help="end the run within this wall time (e.g. 540, 9m, 1h30m; none: no budget): its steps "
                        "are fitted to the speed measured as it trains, never more than --epochs asks for")
    t.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    t.add_argument("--deterministic", action="store_true", default=None,
                   help="deterministic kernels only: on a GPU the same seed then gives the same bits (slower)")
    t.add_argument("--seed", type=int)
    t.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (besides each evaluation)")
    t.add_argument("--keep-checkpoints", type=int)
    t.add_argument("--resume", action=Resume, nargs="?", default=None, metavar="auto",
                   help="continue from the run's last checkpoint, with the settings the run recorded; "
                        "--resume auto: resume where --out holds a run, else start one (the command for "
                        "torchrun --max-restarts and for relaunching a preempted job)")
    t.add_argument("--overwrite", action="store_true", default=None,
                   help="replace the run that --out holds (without it, train refuses a directory that holds one)")
    t.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    t.add_argument("--no-plots", dest="plots", action="store_false", default=None,
                   help="write no pictures (curves.png, the task's): the run's files and results are otherwise the same")
    t.add_argument("--fsdp", action="store_true", default=None,
                   help="under torchrun, shard the model across processes (FSDP2) instead of copying it (DDP)")
    t.add_argument("--log", choices=["jsonl", "tensorboard"],
                   help="tensorboard: also write the metrics to RUN/tensorboard/ (needs the tensorboard package)")
    t.add_argument("--ema", type=float, help="keep an exponential moving average of the weights (e.g. 0.999)")
    t.add_argument("--label-dropout", type=float, help="generators: share of labels shown as no class")
    t.add_argument("--judge", metavar="CLASSIFIER_RUN",
                   help="generators: a classifier run that scores samples at each evaluation")
    t.add_argument("--judge-samples", type=int, help="generators: images the judge scores per evaluation")



class Resume(argparse.Action):
    """`--resume` (True) or `--resume auto` ("auto"). `--resume mnist` keeps its old meaning: a word
    other than auto after a bare --resume is the recipe (`recipe_after_resume`, taken by `settings`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, "auto" if values == "auto" else True)
        if values not in (None, "auto"):
            namespace.recipe_after_resume = values


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options as `recipe_config`'s keyword arguments (None: the recipe's own value)."""
    spilled = vars(args).pop("recipe_after_resume", None)
    if spilled is not None and args.recipe is not None:
        raise ValueError(f"two recipes given: {args.recipe} and {spilled}")
    args.recipe = args.recipe if spilled is None else spilled
    values = {k: v for k, v in vars(args).items() if k not in ("command", "handler", "recipe", "save")}
    values["model_overrides"] = dict(args.model_overrides or [])
    return values


def train(args: argparse.Namespace) -> int:
    import os

    from ..train import Trainer, TrainConfig, recipe_config, resolve_choices
    from ..train.resume import settings_to_run
    values = settings(args)
    # --resume continues the run with the settings it recorded; a flag given may not contradict them.
    asked = {k: v for k, v in values.items() if v is not None and v != {}}
    if args.recipe is not None:
        asked["recipe"] = args.recipe
    main = os.environ.get("RANK", "0") == "0"  # under torchrun every rank decides, before any rank writes
    values["resume"], recorded = settings_to_run(run_dir_of(args), asked, args.resume, args.overwrite,
                                                 say=print if main else lambda line: None)
    cfg = (TrainConfig.from_dict(recorded) if recorded is not None
           else resolve_choices(recipe_config(args.recipe, **values)))
    if recorded is None:
        announce_derived(cfg)
    if cfg.baseline:  # its libraries asked for before the run, not after it
        from ..train.baseline import require_baseline
        require_baseline(cfg.task)
    trainer = Trainer(cfg)
    summary = trainer.run()
    if trainer.dist.is_main:  # under torchrun, rank 0 speaks for the run
        print(trainer.task.final_line(summary))
        if cfg.baseline:
            print(baseline_line(trainer, summary))
        print(f"run directory: {cfg.out or f'runs/{cfg.recipe}'}")
    return 0


def baseline_line(trainer: Any, summary: dict[str, Any]) -> str:
    """The classical method on the run's own split, recorded in summary.json's "baseline" and said beside
    the run's own figure."""
    import json

    from ..files import atomic_write_text
    from ..train.baseline import fit_baseline
    base = fit_baseline(trainer.task, trainer.cfg.threads)
    summary["baseline"] = base
    atomic_write_text(trainer.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    key = next(k for k in base if k.endswith(("_accuracy", "_r2")))
    return (f"baseline: {base['method']}: {key.replace('_', ' ')} {base[key]:.4f} against anyformer's "
            f"{summary[key]:.4f}, in {base['seconds']:.1f}s")


def run_dir_of(args: argparse.Namespace) -> str:
    """The run directory train writes: --out, else runs/RECIPE, else (your own data) runs/<its name>."""
    from ..train.recipes import default_out, derives_from_data
    if args.out:
        return args.out
    if derives_from_data(args.recipe, args.data):
        return default_out(str(Path(args.data).expanduser().resolve()))
    return f"runs/{args.recipe or 'mnist'}"


def announce_derived(cfg: Any) -> None:
    """What was derived from the data, and why: one line each (rank 0 under torchrun)."""
    import os
    if not cfg.derived or os.environ.get("RANK", "0") != "0":
        return
    for key, why in cfg.derived.items():
        print(f"derived: {key} = {why}")


def tune(args: argparse.Namespace) -> int:
    """Plan a run before training it, like FFTW's wisdom: the choices, why, and a file to replay."""
    from ..train import Trainer, recipe_config, resolve_choices
    from ..train.runplan import write_plan
    values = settings(args)
    values["resume"] = values["resume"] is True  # "auto" asks nothing of a scratch directory
    with tempfile.TemporaryDirectory(prefix="anyformer-tune-") as scratch:
        values["out"] = str(Path(scratch) / "run")  # a run directory is needed, and nothing is written there
        plan = Trainer(resolve_choices(recipe_config(args.recipe, **values))).tune()
    print(f"plan: compile {plan['compile']}, linears {plan['linears'] or '-'}; {len(plan['answers'])} kernel choices:")
    for key, choice in sorted(plan["answers"].items()):
        print(f"  {choice:<9} {key}")
    if args.save:
        print(f"saved to {write_plan(args.save, plan)}: train with --plan {args.save} to replay it")
    return 0


def recipes(args: argparse.Namespace) -> int:
    from ..train import RECIPES
    width = max(map(len, RECIPES))
    for name, r in RECIPES.items():
        print(f"{name:<{width}}  {r['model']:<16} {r['data']:<14} {r['about']}")
    return 0
