"""`anyformer attention`: what a trained image or language model attends to, drawn to a PNG."""
from __future__ import annotations

import argparse
import sys

from .runs import image_preprocess, run_info


def add_parser(sub: argparse._SubParsersAction) -> None:
    at = sub.add_parser("attention", help="draw what a trained model attends to")
    at.add_argument("dir")
    at.add_argument("input", help="an image file (image models) or text (language models)")
    at.add_argument("--out", required=True, help="PNG file to write")
    at.add_argument("--layers", type=int, nargs="+")
    at.add_argument("--heads", type=int, nargs="+")
    at.add_argument("--raw", action="store_true", help="image models: plain resize, as `predict --raw`")
    at.set_defaults(handler=attention)


def attention(args: argparse.Namespace) -> int:
    import torch

    from .. import viz
    model, meta = run_info(args.dir)
    info = meta.get("data", {})
    if model.family == "vit":
        pre = image_preprocess(args.dir, info)
        x, warning = pre.load_checked(args.input, raw=args.raw)
        if warning:
            print(f"anyformer: warning: {args.input}: {warning}", file=sys.stderr)
        result = viz.image_attention(model, pre(x)[None], layers=args.layers)
        viz.plot_image_attention(x, result, args.out, layers=args.layers, heads=args.heads,
                                 class_names=info.get("classes"))
    elif model.family == "gpt":
        from ..data.text.tokenizers import tokenizer_from_info
        tok = tokenizer_from_info(info, args.dir)
        ids = tok.encode(args.input)[-model.config.context:]
        with torch.no_grad():
            _, attn = model(torch.tensor([ids]), return_attention=args.layers or True)
        viz.plot_token_attention([tok.decode([i]) for i in ids], attn, args.out, layers=args.layers, heads=args.heads)
    elif model.family == "series":
        from .series import attention_series
        attention_series(args, model, meta)
    else:
        raise ValueError(f"`attention` supports image models and language models, not {model.family}")
    print(f"wrote {args.out}")
    return 0
