"""A trained run, ready to use from Python: its model and what turns inputs into the model's inputs
and its outputs into answers (a language model's tokenizer; an image model's preprocessing and
classes), as `anyformer train` recorded them in the run's config.json.

    run = af.open_run("runs/shakespeare-cpu")
    print(run.generate("ROMEO:", 200, temperature=0.8, top_k=40, seed=1))
    ids = run.encode("ROMEO:")                        # (1, T) token ids; run.decode(ids[0]) -> text

    run = af.open_run("runs/penguins")                # a table: a DataFrame (or a CSV's path) in,
    run.predict(pandas.read_csv("new.csv"))           # a DataFrame of predictions out, one row each

    run = af.open_run("runs/reviews")                 # labelled text: texts in, each its top classes out
    run.classify(["Great value, would buy again.", "Arrived broken."])   # [[("positive", 0.97), ...], ...]

    run = af.open_run("runs/mnist")
    run.classify("digit.png")                         # [("7", 0.98), ("1", 0.01), ...]
    x = run.preprocess(run.preprocess.load("digit.png"))[None]; run.model(x)   # the same, by hand
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import Tensor

from .models import Model, load, read_config

if TYPE_CHECKING:  # pandas loads when a table's rows are predicted, not with every run
    import pandas

__all__ = ["Run", "open_run"]


@dataclass
class Run:
    """`model` in eval mode; `tokenizer` for language models, `preprocess` and `classes` for image
    models, `encoding` and `classes` for tables (None where the run has none); `info` is the data
    section of its config.json, `meta` the whole of it."""

    path: Path
    model: Model
    info: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None
    preprocess: Any = None
    classes: list[str] | None = None
    encoding: Any = None
    unreadable: str | None = field(default=None, repr=False)  # why an image run's preprocessing could not be read

    def encode(self, text: str) -> Tensor:
        """Text -> (1, T) int64 token ids, as the run's tokenizer reads it."""
        return torch.tensor([self.text_tokenizer().encode(text)], dtype=torch.long)

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """Token ids (T,) -> text."""
        return self.text_tokenizer().decode(ids.tolist() if isinstance(ids, Tensor) else list(ids))

    def generate(self, prompt: str, max_new_tokens: int, *, seed: int | None = None, **sampling: Any) -> str:
        """The prompt and its continuation by `max_new_tokens` tokens, as text; `sampling` as
        GPT.generate takes it (temperature, top_k, top_p); `seed` fixes the draw."""
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        out = self.model.generate(self.encode(prompt), max_new_tokens, generator=generator, **sampling)
        return self.decode(out[0])

    @torch.no_grad()
    def classify(self, picture: Any, top: int = 5) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """A picture (a path, a file object or a PIL image) -> its `top` classes with their
        probabilities, read and normalised as the run's training images were. A text classifier run
        takes a list of texts (or one text) -> each text's `top` classes, tokenised as in training."""
        if self.model.family == "text-classifier":
            from .data.text.inputs import classify_texts
            one = isinstance(picture, str)
            answers = classify_texts(self.model, self.tokenizer, self.classes, [picture] if one else list(picture), top)
            return answers[0] if one else answers
        if self.model.family != "vit" or self.preprocess is None or self.classes is None:
            raise ValueError(f"{self.path} is not an image classifier run; classify needs one (a vit trained on images)")
        probs = self.model(self.preprocess(self.preprocess.load(picture))[None]).softmax(-1)[0]
        best = probs.topk(min(top, probs.numel()))
        return [(self.classes[i], p) for p, i in zip(best.values.tolist(), best.indices.tolist())]

    @torch.no_grad()
    def predict(self, rows: Any) -> "pandas.DataFrame":
        """A table's rows (a pandas DataFrame, or the path of a CSV, Parquet or Excel file) -> one prediction
        a row: the class and its probability (and each class's), or the number in the target's units.
        Columns are matched by name; a cell is read as the training rows' cells were."""
        if self.encoding is None:
            raise ValueError(f"{self.path} is not a table run; predict takes rows of a table (classify takes pictures)")
        from .data.tables.read import read_table, text_frame
        frame = read_table(rows) if isinstance(rows, (str, Path)) else text_frame(rows, "the rows")
        return predict_rows(self.model, self.encoding, frame, str(rows) if isinstance(rows, (str, Path)) else "the rows")

    def image_preprocess(self) -> Any:
        """The normalisation the run's images were trained with (the same arithmetic, to the bit)."""
        if self.preprocess is None:
            raise ValueError(self.unreadable or
                             f"{self.path} is not an image classifier run (its data kind is {self.info.get('kind')!r})")
        return self.preprocess

    def text_tokenizer(self) -> Any:
        """The tokenizer the run read its text with (a language model's or a text classifier's)."""
        if self.tokenizer is None:
            raise ValueError(f"{self.path} holds a {self.model.family} model, not a language model: it has no tokenizer")
        return self.tokenizer


@torch.no_grad()
def predict_rows(model: Model, encoding: Any, frame: "pandas.DataFrame", where: str,
                 batch: int = 1024) -> "pandas.DataFrame":
    """Predictions for a table's rows (text cells, as `read_table` gives them): a DataFrame with the
    target's name as its first column (the class, or the number in its units), then for classes the
    probability of that class and of each class."""
    import pandas as pd
    rows = encoding.encode(frame, where, with_target=False)
    outs = [model(rows.numbers[i:i + batch], rows.categories[i:i + batch]).float()
            for i in range(0, max(1, len(rows)), batch)] if len(rows) else []
    name = encoding.target.name
    if encoding.target.task == "regress":
        y = encoding.target_units(torch.cat(outs)) if outs else torch.zeros(0)
        return pd.DataFrame({name: y.numpy()})
    classes = list(encoding.target.classes)
    probs = torch.cat(outs).softmax(-1) if outs else torch.zeros(0, len(classes))
    best = probs.argmax(-1)
    out = pd.DataFrame({name: [classes[i] for i in best.tolist()],
                        "probability": probs.gather(1, best[:, None])[:, 0].numpy()})
    for i, c in enumerate(classes):
        out[f"p({c})"] = probs[:, i].numpy()
    return out


def open_run(directory: str | Path, *, prepared: bool = False) -> Run:
    """The run in `directory` (written by `anyformer train`, or by `model.save` with a data section).
    `prepared`: its model prepared by the speed plan (`plan.prepare`) for one input of its kind, what the
    commands and the server run their passes on; else the plain model."""
    from .data.images.preprocess import ImagePreprocess
    from .data.text.tokenizers import tokenizer_from_info
    meta = read_config(directory)
    info = meta.get("data") or {}
    model = load(directory).eval()
    if prepared:
        from .plan import prepare
        model = prepare(model, "default")
    run = Run(Path(directory), model, info, meta)
    if info.get("kind") == "text":
        run.tokenizer = tokenizer_from_info(info, directory)  # a learned one is saved beside config.json
    elif info.get("kind") == "labelled-text":
        from .data.text.inputs import saved_tokenizer
        run.tokenizer = saved_tokenizer(directory)
        run.classes = [str(c) for c in info["classes"]]
    elif info.get("kind") == "table":
        from .data.tables.encode import TableEncoding
        run.encoding = TableEncoding.from_dict(info["encoding"])
        run.classes = list(run.encoding.target.classes) or None
    elif info.get("kind") == "images":
        try:  # a run that records too little to read pictures still exports, evaluates and samples
            run.preprocess = ImagePreprocess.from_info(info)
        except ValueError as e:
            run.unreadable = f"{directory}: {e}"
        run.classes = [str(c) for c in info["classes"]] if info.get("classes") else None
    return run
