"""`anyformer attention`: what a trained image or language model attends to, drawn to a PNG."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    at = sub.add_parser("attention", help="draw what a trained model attends to")
    at.add_argument("dir")
    at.add_argument("input", help="an image file (image models) or text (language models, text classifiers)")
    at.add_argument("--out", required=True, help="PNG file to write")
    at.add_argument("--layers", type=int, nargs="+")
    at.add_argument("--heads", type=int, nargs="+")
    at.add_argument("--raw", action="store_true", help="image models: plain resize, as `predict --raw`")
    at.set_defaults(handler=attention)


def attention(args: argparse.Namespace) -> int:
    import torch

    from .. import viz
    from ..nn import attention_weights
    from ..runs import open_run
    run = open_run(args.dir, prepared=True)
    model, meta = run.model, run.meta
    info = meta.get("data", {})
    if model.family == "vit":
        pre = run.image_preprocess()
        x, warning = pre.load_checked(args.input, raw=args.raw)
        if warning:
            print(f"anyformer: warning: {args.input}: {warning}", file=sys.stderr)
        result = viz.image_attention(model, pre(x)[None], layers=args.layers)
        viz.plot_image_attention(x, result, args.out, layers=args.layers, heads=args.heads,
                                 class_names=info.get("classes"))
    elif model.family == "gpt":
        tok = run.text_tokenizer()
        ids = tok.encode(args.input)[-model.config.context:]
        with torch.no_grad(), attention_weights(model, args.layers or True) as attn:
            model(torch.tensor([ids]))
        viz.plot_token_attention([tok.decode([i]) for i in ids], attn, args.out, layers=args.layers, heads=args.heads)
    elif model.family == "text-classifier":
        enc = run.text_tokenizer().encode(args.input)
        with torch.no_grad(), attention_weights(model, args.layers or True) as attn:
            logits = model(torch.tensor([enc.ids]), torch.ones(1, len(enc.ids), dtype=torch.long))
        # Every token's row is drawn; the top row, [CLS]'s, is which tokens the class token reads.
        if args.layers:  # the weights of the layers asked, by their numbers
            attn = {int(k) % len(model.encoder.backbone.blocks): a for k, a in zip(args.layers, attn)}
        viz.plot_token_attention(enc.tokens, attn, args.out, heads=args.heads,
                                 title="top row: which tokens the class token [CLS] reads")
        best = int(logits.softmax(-1)[0].argmax())
        print(f"{info['classes'][best]} {float(logits.softmax(-1)[0, best]):.3f}")
    elif model.family == "series":
        from .series import attention_series
        attention_series(args, model, meta)
    else:
        raise ValueError(f"`attention` supports image models and language models, not {model.family}")
    print(f"wrote {args.out}")
    return 0
