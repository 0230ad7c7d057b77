"""`anyformer eval`: a run scored on its test set (or the share of its data it held out), or on other
data in the same format (`--data PATH`); a generator's held-out loss and its judge's table."""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("eval", help="evaluate a run directory on its test set, or on other data (--data)")
    e.add_argument("dir")
    e.add_argument("--data", metavar="PATH",
                   help="score the run on this data instead (same format as its own: a folder of class folders of "
                        "images, a text file, a series file): its test split where it has one, else all of it")
    e.add_argument("--judge", metavar="CLASSIFIER_RUN", help="generators: a classifier run that scores their samples")
    e.add_argument("--per-class", type=int, default=200, help="with --judge: samples per class at each guidance scale")
    e.add_argument("--cfg", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0], help="with --judge: guidance scales")
    e.add_argument("--steps", type=int, default=10, help="with --judge: Heun steps per sample (two passes each)")
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(handler=evaluate)


def evaluate(args: argparse.Namespace) -> int:
    import torch

    from ..runs import open_run
    from ..train import TrainConfig
    from ..train.distributed import Distributed
    from ..train.tasks import make_task
    run = open_run(args.dir, prepared=True)
    model, meta = run.model, run.meta
    if "train" not in meta:
        raise ValueError(f"{args.dir} holds a model but no training settings; `anyformer eval` needs a run "
                         f"directory written by `anyformer train`")
    if args.judge is not None and model.family != "dit":
        raise ValueError(f"--judge scores generators; {args.dir} holds a {model.family} model")
    from pathlib import Path
    train = {**meta["train"], "limit_train": 1}
    if args.data is not None:
        if not Path(args.data).expanduser().exists():
            raise ValueError(f"--data {args.data}: no such file or folder; expected data in the format the run "
                             f"was trained on")
        train["data"] = str(Path(args.data).expanduser().resolve())
    cfg = TrainConfig.from_dict(train)
    # The run's own data section: its test set is scored with the preprocessing it was trained with, and
    # what the run keeps beside it (a learned tokenizer) is found through run_dir.
    info = {**(meta.get("data") or {}), "run_dir": str(Path(args.dir).resolve())}
    task = make_task(cfg, torch.device("cpu"), info=info)
    if model.family != "dit":
        result = task.evaluate(model, Distributed())
        print(json.dumps({k: round(v, 6) for k, v in result.items() if isinstance(v, float)}))
        return 0
    print(json.dumps({"eval_loss": round(task.held_out_loss(model), 6)}))
    if args.judge is not None:
        _judge_table(args, model, meta, cfg.amp)
    return 0


def _judge_table(args: argparse.Namespace, model, meta: dict, amp: str) -> None:
    """Each guidance scale's scores as a JSON line when ready, then the table."""
    from ..train.judge import guidance_sweep  # another module of the train floor, loaded when asked for
    rows = []
    for row in guidance_sweep(model, meta["data"], args.judge, scales=args.cfg, per_class=args.per_class,
                              steps=args.steps, seed=args.seed, amp=amp):
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"{'cfg':>5}  {'class consistency':>17}  {'Fréchet':>8}  {'floor':>7}  (n={rows[0]['n']}, "
          f"{args.steps} Heun steps; judge accuracy on real test images {rows[0]['judge_accuracy']:.4f})")
    for r in rows:
        print(f"{r['cfg']:>5g}  {r['class_consistency']:>17.4f}  {r['frechet']:>8.3f}  {r['frechet_floor']:>7.3f}")
