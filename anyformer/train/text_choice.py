"""A setting a labelled-text run chooses on its own training texts: whether the pretrained path adds the
lexical term (models/text_classifier.py, a weight per word piece and class on the text's bag of pieces).

The term helped on the CHOOSE sets where a class hangs on exact words and cost points where it does not
(movie titles' genres: docs/your-data.md), so a fixed default cannot suit both. Here the run's training texts
(never the texts it scores) are split again: a seeded, stratified fifth held back, the other four fifths
trained on twice, with the term and without, each run derived from those texts as the real run is. The
better score on the fifth decides; a tie keeps the term. The two runs plan nothing (`--plan stock`), so the
choice is a function of the data, the seed and the settings alone, the same on any machine.
"""
from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

from ..data.errors import DataError
from ..data.split import MIN_HELD_OUT_PER_CLASS
from ..data.text.labelled import LabelledTexts

CHOICE_FRACTION = 0.2
# The settings asked for that the two trial runs share with the real one; the rest they derive for their texts.
SHARED = ("seq_len", "batch_size", "lr", "epochs", "max_steps", "threads", "device", "amp")


def choose_lexical(train: LabelledTexts, classes: list[str], asked: dict[str, Any], seed: int) -> tuple[bool, str]:
    """(whether to add the lexical term, why in one line), from two runs on the training texts alone."""
    from .textclass import hold_out
    try:
        fit, held = hold_out(train, classes, CHOICE_FRACTION, seed + 1)
    except DataError:  # a class too small for a fifth of it to score
        return True, (f"true: too few training texts to choose on (a class's fifth held back must hold "
                      f"{MIN_HELD_OUT_PER_CLASS} or more, and some class's does not): the default")
    scores = {}
    with tempfile.TemporaryDirectory(prefix="anyformer-choose-") as tmp:
        _write_pair(Path(tmp), fit, held)
        for lexical in (True, False):
            scores[lexical] = _trial(Path(tmp), lexical, asked, seed)
    chosen = scores[False] <= scores[True]  # a tie keeps the term (chosen in text_select.py round 5)
    return chosen, (f"{str(chosen).lower()}: {scores[True]:.1%} with the term against {scores[False]:.1%} without, "
                    f"on a seeded {CHOICE_FRACTION:.0%} of the {len(train):,} training texts ({len(held):,}), "
                    f"each run trained on the other {len(fit):,}")


def _write_pair(folder: Path, fit: LabelledTexts, held: LabelledTexts) -> None:
    """The trial's data as a NAME_TRAIN.csv / NAME_TEST.csv pair, which any labelled-text run reads."""
    import pandas as pd
    for name, part in (("choose_TRAIN.csv", fit), ("choose_TEST.csv", held)):
        pd.DataFrame({"text": part.texts, "label": part.labels}).to_csv(folder / name, index=False)


def _trial(folder: Path, lexical: bool, asked: dict[str, Any], seed: int) -> float:
    """The test accuracy of a run on the pair in `folder`, the term on or off, its output kept quiet."""
    from .recipes import recipe_config
    from .trainer import Trainer
    model_overrides = {**(asked.get("model_overrides") or {}), "lexical": lexical}
    shared = {k: asked[k] for k in SHARED if asked.get(k) is not None}
    cfg = recipe_config(None, data=str(folder), out=str(folder / f"run-{lexical}"), objective="text",
                        text_column="text", label_column="label", seed=seed, plan="stock", progress=False,
                        plots=False, model_overrides=model_overrides, **shared)
    with contextlib.redirect_stdout(io.StringIO()):
        summary = Trainer(cfg).run()
    return float(summary["test_accuracy"])
