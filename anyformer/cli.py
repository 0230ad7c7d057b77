"""The `anyformer` command. User errors end with one line on stderr and exit code 2.

Set ANYFORMER_DEBUG=1 to see the full traceback instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from . import doctor, runtime


def _kv(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, like every other user error; the usage is in --help
        self.exit(2, f"anyformer: error: {message} (see `{self.prog} --help`)\n")


def _duration(text: str) -> float:
    """'540' or '540s', '9m', '1h30m', '2h' -> seconds; 'none' (or 0) -> 0: no budget."""
    import re
    if text.strip().lower() in ("none", "off", "0"):
        return 0.0
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not m or not any(m.groups()) or not (seconds := 3600 * float(m[1] or 0) + 60 * float(m[2] or 0)
                                            + float(m[3] or 0)) > 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration such as 540, 90s, 9m or 1h30m "
                                         f"(or none), got {text!r}")
    return seconds


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="anyformer", description="Train, evaluate and inspect transformers.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _train_arguments(sub.add_parser("train", help="train a recipe (default: mnist) and write a run directory"))
    tu = sub.add_parser("tune", help="plan a recipe's training before training it: measure, print and save the "
                                     "choices (replay them with train --plan FILE)")
    _train_arguments(tu)
    tu.add_argument("--save", metavar="FILE", help="write the plan here (a plan.json for train --plan FILE)")

    sub.add_parser("recipes", help="list the training recipes")
    e = sub.add_parser("eval", help="evaluate a run directory on its test set")
    e.add_argument("dir")
    _add_judge_arguments(e)
    pr = sub.add_parser("predict", help="classify image files (image models) or series files, .csv or .npy (series models)")
    pr.add_argument("dir")
    pr.add_argument("images", nargs="+")
    pr.add_argument("--top", type=int, default=3)
    pr.add_argument("--raw", action="store_true",
                    help="skip framing the picture like the training images (plain resize, as before)")
    ge = sub.add_parser("generate", help="continue a prompt with a trained language model")
    ge.add_argument("dir")
    ge.add_argument("--prompt", required=True)
    ge.add_argument("--max-new-tokens", type=int, default=200)
    ge.add_argument("--temperature", type=float, default=0.8)
    ge.add_argument("--top-k", type=int, default=None)
    ge.add_argument("--top-p", type=float, default=None)
    ge.add_argument("--seed", type=int, default=None)
    lp = sub.add_parser("probe", help="linear probe: a run's frozen features against raw pixels")
    lp.add_argument("dir", help="an MAE or ViT run directory")
    lp.add_argument("--data", help="dataset name or path (default: the run's)")
    lp.add_argument("--label-fraction", type=float, metavar="F",
                    help="fit on a seeded, class-balanced fraction of the training labels")
    lp.add_argument("--seed", type=int, default=0, help="picks the label subset")
    lp.add_argument("--limit-eval", type=int, help="score on the first N test images only")
    lp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    doctor.add_arguments(sub.add_parser("doctor", help="the machine, the torch build and the speed plan in force"))
    at = sub.add_parser("attention", help="draw what a trained model attends to")
    at.add_argument("dir")
    at.add_argument("input", help="an image file (image models) or text (language models)")
    at.add_argument("--out", required=True, help="PNG file to write")
    at.add_argument("--layers", type=int, nargs="+")
    at.add_argument("--heads", type=int, nargs="+")
    at.add_argument("--raw", action="store_true", help="image models: plain resize, as `predict --raw`")
    _serve_arguments(sub.add_parser("serve", help="a web page and a JSON API for a run (docs/serve.md)"))
    ex = sub.add_parser("export", help="write a run's model to a file other runtimes read (ONNX)")
    ex.add_argument("dir")
    ex.add_argument("--format", choices=["onnx"], default="onnx")
    ex.add_argument("--out", required=True, help="the file to write, e.g. model.onnx")
    _add_sample_parser(sub)
    return p


def _train_arguments(t: argparse.ArgumentParser) -> None:
    """`train`'s options, which `tune` shares: it plans the run that train would run with them."""
    t.add_argument("recipe", nargs="?", default=None, help="a recipe name (see `anyformer recipes`)")
    t.add_argument("--model", help="model preset, e.g. vit-mnist, vit-s/16, shakespeare-char")
    t.add_argument("--set", dest="model_overrides", type=_kv, action="append", metavar="KEY=VALUE",
                   help="override a model config field, e.g. --set depth=4 (repeatable)")
    t.add_argument("--data", help="dataset name (mnist, fashion-mnist, cifar10) or a path")
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
    t.add_argument("--label-smoothing", type=float)
    t.add_argument("--grad-clip", type=float)
    t.add_argument("--augment", choices=["none", "digits", "crop_flip", "series"])
    t.add_argument("--eval-every", type=int, help="steps between evaluations (default: each epoch)")
    t.add_argument("--limit-train", type=int, help="train on the first N examples only")
    t.add_argument("--limit-eval", type=int, help="evaluate on the first N examples only")
    t.add_argument("--seq-len", type=int, help="language models: tokens per training sequence")
    t.add_argument("--tokenizer", help="language models: char, gpt2, or a tokenizer file")
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
    t.add_argument("--time-budget", type=_duration, metavar="TIME",
                   help="end the run within this wall time (e.g. 540, 9m, 1h30m; none: no budget): its steps "
                        "are fitted to the speed measured as it trains, never more than --epochs asks for")
    t.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    t.add_argument("--deterministic", action="store_true", default=None,
                   help="deterministic kernels only: on a GPU the same seed then gives the same bits (slower)")
    t.add_argument("--seed", type=int)
    t.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (besides each evaluation)")
    t.add_argument("--keep-checkpoints", type=int)
    t.add_argument("--resume", action="store_true", default=None,
                   help="continue from the run's last checkpoint, with the settings the run recorded")
    t.add_argument("--overwrite", action="store_true", default=None,
                   help="replace the run that --out holds (without it, train refuses a directory that holds one)")
    t.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    t.add_argument("--fsdp", action="store_true", default=None,
                   help="under torchrun, shard the model across processes (FSDP2) instead of copying it (DDP)")
    t.add_argument("--log", choices=["jsonl", "tensorboard"],
                   help="tensorboard: also write the metrics to RUN/tensorboard/ (needs the tensorboard package)")
    t.add_argument("--ema", type=float, help="keep an exponential moving average of the weights (e.g. 0.999)")
    t.add_argument("--label-dropout", type=float, help="generators: share of labels shown as no class")
    t.add_argument("--judge", metavar="CLASSIFIER_RUN",
                   help="generators: a classifier run that scores samples at each evaluation")
    t.add_argument("--judge-samples", type=int, help="generators: images the judge scores per evaluation")


def _serve_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("dir")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-body-bytes", type=int, default=5 * 1024 * 1024, help="largest request body")
    s.add_argument("--max-pixels", type=int, default=40_000_000, help="largest image, width x height")
    s.add_argument("--max-prompt-chars", type=int, default=4000)
    s.add_argument("--max-new-tokens", type=int, default=1000, help="most tokens one generation may ask for")
    s.add_argument("--concurrency", type=int, default=2, help="model calls running at once")
    s.add_argument("--threads", type=int, help="CPU threads for torch (default: all cores)")


def cmd_train(args: argparse.Namespace) -> int:
    from .train import Trainer, TrainConfig, recipe_config
    from .train.resume import resumed_settings
    values = {k: v for k, v in vars(args).items() if k not in ("command", "recipe")}
    values["model_overrides"] = dict(args.model_overrides or [])
    # --resume continues the run with the settings it recorded; a flag given may not contradict them.
    asked = {k: v for k, v in values.items() if v is not None and v != {}}
    if args.recipe is not None:
        asked["recipe"] = args.recipe
    settings = resumed_settings(args.out or f"runs/{args.recipe or 'mnist'}", asked) if args.resume else None
    cfg = TrainConfig.from_dict(settings) if settings is not None else recipe_config(args.recipe, **values)
    trainer = Trainer(cfg)
    summary = trainer.run()
    if trainer.dist.is_main:  # under torchrun, rank 0 speaks for the run
        print(trainer.task.final_line(summary))
        print(f"run directory: {cfg.out or f'runs/{cfg.recipe}'}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """Plan a run before training it, like FFTW's wisdom: the choices, why, and a file to replay."""
    import tempfile
    from .train import Trainer, recipe_config
    from .train.runplan import write_plan
    values = {k: v for k, v in vars(args).items() if k not in ("command", "recipe", "save")}
    values["model_overrides"] = dict(args.model_overrides or [])
    with tempfile.TemporaryDirectory(prefix="anyformer-tune-") as scratch:
        values["out"] = str(Path(scratch) / "run")  # a run directory is needed, and nothing is written there
        plan = Trainer(recipe_config(args.recipe, **values)).tune()
    print(f"plan: compile {plan['compile']}, linears {plan['linears'] or '-'}; {len(plan['answers'])} kernel choices:")
    for key, choice in sorted(plan["answers"].items()):
        print(f"  {choice:<9} {key}")
    if args.save:
        print(f"saved to {write_plan(args.save, plan)}: train with --plan {args.save} to replay it")
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from .train import RECIPES
    width = max(map(len, RECIPES))
    for name, r in RECIPES.items():
        print(f"{name:<{width}}  {r['model']:<16} {r['data']:<14} {r['about']}")
    return 0


def _run_info(directory: str) -> tuple[Any, dict[str, Any]]:
    from .models import load, read_config
    from .nn import plan_kernels
    meta = read_config(directory)
    return plan_kernels(load(directory)), meta  # the commands' passes on the plan's kernels


def cmd_eval(args: argparse.Namespace) -> int:
    import torch
    from .train import TrainConfig
    from .train.distributed import Distributed
    from .train.tasks import make_task
    model, meta = _run_info(args.dir)
    if "train" not in meta:
        raise ValueError(f"{args.dir} holds a model but no training settings; `anyformer eval` needs a run "
                         f"directory written by `anyformer train`")
    if args.judge is not None or model.family == "dit":
        return eval_generator(args, model, meta)
    cfg = TrainConfig.from_dict({**meta["train"], "limit_train": 1})
    # The run's own data section: its test set is scored with the preprocessing it was trained with.
    task = make_task(cfg, torch.device("cpu"), info=meta.get("data"))
    result = task.evaluate(model, Distributed())
    shown = {k: round(v, 6) for k, v in result.items() if isinstance(v, float)}
    print(json.dumps(shown))
    return 0


def _image_preprocess(directory: str, info: dict[str, Any]):
    """The normalisation the run was trained with (the same arithmetic, to the bit)."""
    from .data.preprocess import ImagePreprocess
    if info.get("kind") != "images":
        raise ValueError(f"{directory} is not an image classifier run (its data kind is {info.get('kind')!r})")
    return ImagePreprocess.from_info(info)


def cmd_predict(args: argparse.Namespace) -> int:
    import torch
    model, meta = _run_info(args.dir)
    if model.family == "series":
        from .cli_series import predict_series
        return predict_series(args, model, meta)
    if model.family != "vit":
        raise ValueError(f"{args.dir} holds a {model.family} model; `predict` needs an image classifier run (a vit)")
    info = meta.get("data", {})
    pre = _image_preprocess(args.dir, info)
    unread = 0
    for path in args.images:  # every file is answered; one that cannot be read is named, and the rest go on
        try:
            x, warning = pre.load_checked(path, raw=args.raw)
        except (ValueError, OSError) as e:
            print(f"anyformer: error: {path}: {_one_line(e)}", file=sys.stderr)
            unread += 1
            continue
        with torch.no_grad():
            probs = model(pre(x)[None]).softmax(-1)[0]
        top = probs.topk(min(args.top, probs.numel()))
        shown = ", ".join(f"{info['classes'][i]} {p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist()))
        print(f"{path}: {shown}")
        if warning:  # beside the answer, on stderr, so that stdout stays one line per picture
            print(f"anyformer: warning: {path}: {warning}", file=sys.stderr)
    if unread and len(args.images) > 1:
        print(f"anyformer: {unread} of {len(args.images)} files could not be read", file=sys.stderr)
    return 2 if unread else 0


def cmd_generate(args: argparse.Namespace) -> int:
    import torch
    from .data.text import tokenizer_from_info
    model, meta = _run_info(args.dir)
    if model.family != "gpt":
        raise ValueError(f"{args.dir} holds a {model.family} model; `generate` needs a language model run")
    tok = tokenizer_from_info(meta.get("data", {}))
    ids = torch.tensor([tok.encode(args.prompt)], dtype=torch.long)
    gen = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
    sys.stdout.write(args.prompt)
    decoder = tok.decoder()  # holds back a character split across BPE tokens until it is whole
    for nxt in model.stream(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, generator=gen):
        sys.stdout.write(decoder.feed(nxt[0].tolist()))
        sys.stdout.flush()
    sys.stdout.write(decoder.flush() + "\n")
    return 0


def cmd_attention(args: argparse.Namespace) -> int:
    import torch
    from . import viz
    model, meta = _run_info(args.dir)
    info = meta.get("data", {})
    if model.family == "vit":
        pre = _image_preprocess(args.dir, info)
        x, warning = pre.load_checked(args.input, raw=args.raw)
        if warning:
            print(f"anyformer: warning: {args.input}: {warning}", file=sys.stderr)
        result = viz.image_attention(model, pre(x)[None], layers=args.layers)
        viz.plot_image_attention(x, result, args.out, layers=args.layers, heads=args.heads,
                                 class_names=info.get("classes"))
    elif model.family == "gpt":
        from .data.text import tokenizer_from_info
        tok = tokenizer_from_info(info)
        ids = tok.encode(args.input)[-model.config.context:]
        with torch.no_grad():
            _, attn = model(torch.tensor([ids]), return_attention=args.layers or True)
        viz.plot_token_attention([tok.decode([i]) for i in ids], attn, args.out, layers=args.layers, heads=args.heads)
    elif model.family == "series":
        from .cli_series import attention_series
        attention_series(args, model, meta)
    else:
        raise ValueError(f"`attention` supports image models and language models, not {model.family}")
    print(f"wrote {args.out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .serve import Limits, serve
    except ImportError as e:
        raise ImportError(f"`anyformer serve` needs the serve extra ({e.name} is missing): "
                          f"pip install 'anyformer[serve]'") from None
    limits = Limits(max_body_bytes=args.max_body_bytes, max_pixels=args.max_pixels,
                    max_prompt_chars=args.max_prompt_chars, max_new_tokens=args.max_new_tokens,
                    concurrency=args.concurrency)
    serve(args.dir, host=args.host, port=args.port, limits=limits)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .interop.onnx import export_onnx
    model, meta = _run_info(args.dir)
    # What the run's data was, as the file's metadata: preprocessing and classes, or the vocabulary.
    data = {f"anyformer.data.{k}": json.dumps(v) for k, v in meta.get("data", {}).items()}
    path = export_onnx(model, args.out, metadata=data)
    print(f"wrote {path} ({model.family}, {args.format}; its metadata holds the signature and the run's data facts)")
    return 0


# ---------------------------------------------------------------- generators: sample, eval --judge
def _add_sample_parser(sub) -> None:
    sa = sub.add_parser("sample", help="draw images from a trained generator (flow-matching DiT run)")
    sa.add_argument("dir")
    sa.add_argument("--classes", default=None, help="class numbers: ranges and lists, e.g. 0-9 or 3,5,7 (default: all)")
    sa.add_argument("--per-class", type=int, default=8, help="images per class (one row of grid.png each)")
    sa.add_argument("--steps", type=int, default=50, help="ODE steps from noise to image")
    sa.add_argument("--cfg", type=float, default=2.0, help="classifier-free guidance scale (1: none)")
    sa.add_argument("--seed", type=int, default=0)
    sa.add_argument("--method", choices=["heun", "euler"], default="heun")
    sa.add_argument("--out", required=True, help="folder for grid.png and samples.npz")


def _add_judge_arguments(e) -> None:
    e.add_argument("--judge", metavar="CLASSIFIER_RUN", help="generators: a classifier run that scores their samples")
    e.add_argument("--per-class", type=int, default=200, help="with --judge: samples per class at each guidance scale")
    e.add_argument("--cfg", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0], help="with --judge: guidance scales")
    e.add_argument("--steps", type=int, default=10, help="with --judge: Heun steps per sample (two passes each)")
    e.add_argument("--seed", type=int, default=0)


def parse_classes(text: str | None, num_classes: int) -> list[int]:
    """"0-9", "3,5,7", "0-2,7" -> class numbers, each checked against the model's classes; None: all."""
    if text is None:
        return list(range(num_classes))
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(lo), int(lo))
        except ValueError:
            raise ValueError(f"--classes expects class numbers and ranges such as 0-9 or 3,5,7, got {text!r}") from None
        if first > last:
            raise ValueError(f"--classes range {part.strip()!r} runs backwards; write it low-high")
        out.extend(range(first, last + 1))
    bad = [c for c in out if not 0 <= c < num_classes]
    if bad:
        raise ValueError(f"class {bad[0]} is not one of this model's classes (0-{num_classes - 1})")
    return out


def _generator(directory: str):
    model, meta = _run_info(directory)
    if model.family != "dit":
        raise ValueError(f"{directory} holds a {model.family} model, not a generator; `sample` needs a run of a "
                         f"dit model trained by flow matching (e.g. `anyformer train mnist-gen`)")
    return model, meta


def cmd_sample(args: argparse.Namespace) -> int:
    import numpy as np
    import torch
    from pathlib import Path
    from .files import atomic_write
    from .viz.grid import save_grid
    model, _ = _generator(args.dir)
    classes = parse_classes(args.classes, model.config.num_classes)
    if args.per_class < 1:
        raise ValueError(f"--per-class must be >= 1, got {args.per_class}")
    labels = torch.tensor(classes).repeat_interleave(args.per_class)
    images = model.sample(labels, steps=args.steps, cfg=args.cfg, seed=args.seed, method=args.method)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_grid(images, len(classes), out / "grid.png")
    array = images[:, 0].numpy() if images.shape[1] == 1 else images.permute(0, 2, 3, 1).numpy()
    atomic_write(out / "samples.npz", lambda f: np.savez(f, images=array, labels=labels.numpy()))
    which = f"classes {args.classes}" if args.classes else "every class"
    print(f"wrote {len(labels)} images of {which} to {out / 'grid.png'} and {out / 'samples.npz'}")
    return 0


def eval_generator(args: argparse.Namespace, model, meta: dict[str, Any]) -> int:
    """A generator run: its held-out flow loss; with --judge, a table of the judge's scores by guidance scale."""
    import torch
    from .train import TrainConfig
    from .train.tasks import make_task
    if model.family != "dit":
        raise ValueError(f"--judge scores generators; {args.dir} holds a {model.family} model")
    cfg = TrainConfig.from_dict({**meta["train"], "limit_train": 1})
    task = make_task(cfg, torch.device("cpu"), info=meta.get("data"))
    print(json.dumps({"eval_loss": round(task.held_out_loss(model), 6)}))
    if args.judge is None:
        return 0
    from .train.judge import Judge  # another module of the train floor, loaded when asked for
    from .train.precision import autocast
    if args.per_class < 1:  # before the judge computes its test-set features
        raise ValueError(f"--per-class must be >= 1, got {args.per_class}")
    info = meta["data"]
    judge = Judge.load(args.judge, channels=info["channels"], image_size=tuple(info["image_size"]),
                       classes=info["classes"])
    labels = torch.arange(model.config.num_classes).repeat_interleave(args.per_class)
    rows = []
    for w in args.cfg:
        with autocast(cfg.amp, torch.device("cpu")):  # the run's precision: bf16 halves this on CPUs that have it
            images = model.sample(labels, steps=args.steps, cfg=w, seed=args.seed)
        rows.append({"cfg": w, "steps": args.steps, **judge.score(images, labels)})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'cfg':>5}  {'class consistency':>17}  {'Fréchet':>8}  {'floor':>7}  (n={rows[0]['n']}, "
          f"{args.steps} Heun steps; judge accuracy on real test images {rows[0]['judge_accuracy']:.4f})")
    for r in rows:
        print(f"{r['cfg']:>5g}  {r['class_consistency']:>17.4f}  {r['frechet']:>8.3f}  {r['frechet_floor']:>7.3f}")


def cmd_probe(args: argparse.Namespace) -> int:
    from .train.probe import probe
    result = probe(args.dir, data=args.data, label_fraction=args.label_fraction, seed=args.seed,
                   limit_eval=args.limit_eval)
    fit = f"fit on {result['train_examples']} labels, tested on {result['test_examples']}"
    print(f"linear probe on encoder features ({result['features_dim']} dims): test accuracy "
          f"{result['features_accuracy']:.4f} ({fit})")
    print(f"linear probe on raw pixels ({result['pixels_dim']} dims): test accuracy "
          f"{result['pixels_accuracy']:.4f} ({fit})")
    print(json.dumps(result))
    return 0


COMMANDS = {"train": cmd_train, "tune": cmd_tune, "recipes": cmd_recipes, "eval": cmd_eval, "predict": cmd_predict,
            "generate": cmd_generate, "attention": cmd_attention, "doctor": doctor.run,
            "serve": cmd_serve, "export": cmd_export, "sample": cmd_sample, "probe": cmd_probe}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    runtime.configure(threads=getattr(args, "threads", None))  # before torch is imported
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("anyformer: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - turned into one line below unless it is a bug
        from .train import Interrupted
        if isinstance(e, Interrupted):
            print(f"anyformer: {e}", file=sys.stderr)
            return 128 + e.signum
        if os.environ.get("ANYFORMER_DEBUG") or not isinstance(e, (ValueError, TypeError, OSError, ImportError)):
            raise
        print(f"anyformer: error: {_one_line(e)}", file=sys.stderr)
        return 2


def _one_line(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError) and e.filename and not e.args[1:]:
        return f"no such file: {e.filename}"
    text = str(e) if str(e) else type(e).__name__
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
