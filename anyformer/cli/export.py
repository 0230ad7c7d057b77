"""`anyformer export`: a run's model as a file other runtimes read (ONNX)."""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="write a run's model to a file other runtimes read (ONNX)")
    ex.add_argument("dir")
    ex.add_argument("--format", choices=["onnx"], default="onnx")
    ex.add_argument("--out", required=True, help="the file to write, e.g. model.onnx")
    ex.set_defaults(handler=export)


def export(args: argparse.Namespace) -> int:
    from ..interop.onnx import export_onnx
    from ..runs import open_run
    run = open_run(args.dir, prepared=True)
    model, meta = run.model, run.meta
    # What the run's data was, as the file's metadata: preprocessing and classes, or the vocabulary.
    data = {f"anyformer.data.{k}": json.dumps(v) for k, v in meta.get("data", {}).items()}
    path = export_onnx(model, args.out, metadata=data)
    print(f"wrote {path} ({model.family}, {args.format}; its metadata holds the signature and the run's data facts)")
    return 0
