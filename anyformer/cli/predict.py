"""`anyformer predict`: image files classified by a trained image model, one line each; series files by
a series model; a table's rows by a table model (one CSV line a row)."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .answers import answer_each
from .args import one_line

if TYPE_CHECKING:  # torch loads after the parser is built
    from ..runs import Run


def add_parser(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser("predict",
                        help="classify image files (image models), series files, .csv or .npy (series models), "
                             "predict each row of table files, .csv/.parquet/.xlsx (table models), or classify "
                             "texts (text classifiers: a text in quotes, or a .csv of texts)")
    pr.add_argument("dir")
    pr.add_argument("images", nargs="+", metavar="INPUT",
                    help="image files; series or table files; for a text classifier a text in quotes, a .txt file, "
                         "or a .csv of texts (one prediction a row)")
    pr.add_argument("--top", type=int, default=3)
    pr.add_argument("--raw", action="store_true",
                    help="skip framing the picture like the training images (plain resize, as before)")
    pr.set_defaults(handler=predict)


def predict(args: argparse.Namespace) -> int:
    import torch

    from ..runs import open_run
    run = open_run(args.dir, prepared=True)
    model, meta = run.model, run.meta
    if model.family == "series":
        from .series import predict_series
        return predict_series(args, model, meta)
    if model.family == "table":
        return predict_table(args, run)
    if model.family == "text-classifier":
        return predict_texts(args, run)
    if model.family != "vit":
        raise ValueError(f"{args.dir} holds a {model.family} model; `predict` needs an image classifier run (a vit)")
    info = meta.get("data", {})
    pre = run.image_preprocess()

    def probabilities(path: str) -> tuple[torch.Tensor, str | None]:
        x, warning = pre.load_checked(path, raw=args.raw)
        with torch.no_grad():
            return model(pre(x)[None]).softmax(-1)[0], warning
    return answer_each(args.images, info["classes"], args.top, probabilities)


def predict_table(args: argparse.Namespace, run: Run) -> int:
    """Each file's rows predicted, written as CSV on stdout: the file, its row (counted from 1 after the
    header), the prediction (and for classes its probability); a file that cannot be read is named on
    stderr and the rest go on."""
    import csv

    from ..data.tables.read import read_table
    from ..runs import predict_rows
    out = csv.writer(sys.stdout, lineterminator="\n")
    unread, header = 0, False
    for path in args.images:
        try:
            frame = read_table(path)
            predicted = predict_rows(run.model, run.encoding, frame, path)
        except (ValueError, OSError) as e:
            msg = one_line(e)
            print(f"anyformer: error: {msg if msg.startswith(path) else f'{path}: {msg}'}", file=sys.stderr)
            unread += 1
            continue
        columns = list(predicted.columns[:2])  # the prediction, and for classes its probability
        if not header:
            out.writerow(["file", "row", *columns])
            header = True
        for row, values in enumerate(predicted[columns].itertuples(index=False), 1):
            out.writerow([path, row, *(f"{v:.6g}" if isinstance(v, float) else v for v in values)])
    if unread and len(args.images) > 1:
        print(f"anyformer: {unread} of {len(args.images)} files could not be read", file=sys.stderr)
    return 2 if unread else 0


def predict_texts(args: argparse.Namespace, run: Run) -> int:
    """Texts classified, written as CSV on stdout: where the text came from (`text` for one given on the
    command line, else the file and its row), the class and its probability. An argument that is a table
    file (.csv, .tsv, .parquet, .xlsx) is read by the run's text column; any other argument is a text."""
    import csv
    from pathlib import Path

    from ..data.tables.read import TABLE_SUFFIXES
    from ..data.text.inputs import text_probabilities
    from ..data.text.labelled import read_texts_file
    info, classes = run.info, run.classes
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["source", "row", "class", "probability"])
    unread = 0
    for arg in args.images:
        path = Path(arg)
        is_file = path.suffix.lower() in TABLE_SUFFIXES and path.suffix.lower() != ".txt" and path.is_file()
        try:
            if is_file:
                column = info.get("text_column") or "text"
                texts, rows = (lambda t: (t.texts, t.rows))(read_texts_file(path, column, None))
            elif path.suffix.lower() == ".txt" and path.is_file():
                from ..data.text.labelled import _read_file
                texts, rows = [_read_file(path)], ["1"]
            else:
                texts, rows = [arg], [""]
            probs = text_probabilities(run.model, run.text_tokenizer(), texts)
        except (ValueError, OSError) as e:
            print(f"anyformer: error: {arg}: {one_line(e)}", file=sys.stderr)
            unread += 1
            continue
        source = arg if (is_file or rows == ["1"]) else "text"
        for row, p in zip(rows, probs):
            best = int(p.argmax())
            out.writerow([source, row, classes[best], f"{float(p[best]):.4f}"])
    return 2 if unread else 0
