"""`anyformer sample`: images drawn from a trained class-conditional generator, as a grid and an array."""
from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    sa = sub.add_parser("sample", help="draw images from a trained generator (flow-matching DiT run)")
    sa.add_argument("dir")
    sa.add_argument("--classes", default=None, help="class numbers: ranges and lists, e.g. 0-9 or 3,5,7 (default: all)")
    sa.add_argument("--per-class", type=int, default=8, help="images per class (one row of grid.png each)")
    sa.add_argument("--steps", type=int, default=50, help="ODE steps from noise to image")
    sa.add_argument("--cfg", type=float, default=2.0, help="classifier-free guidance scale (1: none)")
    sa.add_argument("--seed", type=int, default=0)
    sa.add_argument("--method", choices=["heun", "euler"], default="heun")
    sa.add_argument("--out", required=True, help="folder for grid.png and samples.npz")
    sa.set_defaults(handler=sample)


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


def sample(args: argparse.Namespace) -> int:
    from pathlib import Path

    import numpy as np
    import torch

    from ..files import atomic_write
    from ..runs import open_run
    from ..viz.grid import save_grid
    model = open_run(args.dir, prepared=True).model
    if model.family != "dit":
        raise ValueError(f"{args.dir} holds a {model.family} model, not a generator; `sample` needs a run of a "
                         f"dit model trained by flow matching (e.g. `anyformer train mnist-gen`)")
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
