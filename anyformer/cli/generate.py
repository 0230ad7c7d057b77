"""`anyformer generate`: a prompt continued by a trained language model, streamed as it is decoded."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    ge = sub.add_parser("generate", help="continue a prompt with a trained language model")
    ge.add_argument("dir")
    ge.add_argument("--prompt", required=True)
    ge.add_argument("--max-new-tokens", type=int, default=200)
    ge.add_argument("--temperature", type=float, default=0.8)
    ge.add_argument("--top-k", type=int, default=None)
    ge.add_argument("--top-p", type=float, default=None)
    ge.add_argument("--seed", type=int, default=None)
    ge.set_defaults(handler=generate)


def generate(args: argparse.Namespace) -> int:
    import torch

    from ..plan import prepare_decode
    from ..runs import open_run
    run = open_run(args.dir, prepared=True)
    model = run.model
    if model.family != "gpt":
        raise ValueError(f"{args.dir} holds a {model.family} model; `generate` needs a language model run")
    tok = run.text_tokenizer()  # as the run recorded it (a learned one is read from the run directory)
    ids = torch.tensor([tok.encode(args.prompt)], dtype=torch.long)
    gen = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
    if ids.shape[1] > 0:  # compiled one-token steps only where this request's repay a compile (or it is forced)
        prepare_decode(model, 1, min(ids.shape[1] + args.max_new_tokens, model.config.context),
                       steps=max(0, args.max_new_tokens - 1))
    sys.stdout.write(args.prompt)
    decoder = tok.decoder()  # holds back a character split across BPE tokens until it is whole
    for nxt in model.stream(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, generator=gen):
        sys.stdout.write(decoder.feed(nxt[0].tolist()))
        sys.stdout.flush()
    sys.stdout.write(decoder.flush() + "\n")
    return 0
