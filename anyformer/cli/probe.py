"""`anyformer probe`: a linear probe of a run's frozen features against one on raw pixels."""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    lp = sub.add_parser("probe", help="linear probe: a run's frozen features against raw pixels")
    lp.add_argument("dir", help="an MAE or ViT run directory")
    lp.add_argument("--data", help="dataset name or path (default: the run's)")
    lp.add_argument("--label-fraction", type=float, metavar="F",
                    help="fit on a seeded, class-balanced fraction of the training labels")
    lp.add_argument("--seed", type=int, default=0, help="picks the label subset")
    lp.add_argument("--limit-eval", type=int, help="score on the first N test images only")
    lp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    lp.set_defaults(handler=probe)


def probe(args: argparse.Namespace) -> int:
    from ..train.probe import probe as linear_probe
    result = linear_probe(args.dir, data=args.data, label_fraction=args.label_fraction, seed=args.seed,
                          limit_eval=args.limit_eval)
    fit = f"fit on {result['train_examples']} labels, tested on {result['test_examples']}"
    print(f"linear probe on encoder features ({result['features_dim']} dims): test accuracy "
          f"{result['features_accuracy']:.4f} ({fit})")
    print(f"linear probe on raw pixels ({result['pixels_dim']} dims): test accuracy "
          f"{result['pixels_accuracy']:.4f} ({fit})")
    print(json.dumps(result))
    return 0
