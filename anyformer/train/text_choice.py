"""A setting a labelled-text run chooses on its own training texts: whether the model adds the lexical term
(models/text_classifier.py, a weight per word piece and class on the text's bag of pieces).

The term helped on the CHOOSE sets where a class hangs on exact words and cost points where it does not
(movie titles' genres: docs/your-data.md), so a fixed default cannot suit both. `--set lexical=choose` leaves
the answer to the run: its training texts (never the texts it scores) are split again, a seeded, stratified
fifth held back, and the other four fifths trained on twice, with the term and without, each trial the run's
own model and settings. The better score on the fifth decides; a tie keeps the term. The trials plan nothing
(`--plan stock`), so the choice is a function of the data, the seed and the settings alone, the same on any
machine. The trials are runs of the trainer, which this floor does not import: the package hands in `run`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..data.errors import DataError
from ..data.split import MIN_HELD_OUT_PER_CLASS
from .config import TrainConfig

if TYPE_CHECKING:  # named in annotations only: its module reads tables, with pandas
    from ..data.text.labelled import LabelledTexts

CHOOSE = "choose"
CHOICE_FRACTION = 0.2
Trial = Callable[[Path, bool], float]  # (a folder of a NAME_TRAIN/NAME_TEST pair, the term on?) -> test accuracy


def resolve_lexical(cfg: TrainConfig, run: Callable[..., dict[str, Any]]) -> TrainConfig:
    """`cfg` with `lexical=choose` answered (true or false, and why in cfg.derived), by trial runs made with
    `run(**settings) -> summary`; any other `cfg` as it is."""
    if cfg.model_overrides.get("lexical") != CHOOSE:
        return cfg
    from .textclass import load_text_splits
    splits = load_text_splits(cfg)  # the run's own split: its training texts, without those it scores

    def trial(folder: Path, lexical: bool) -> float:
        summary = run(data=str(folder), out=str(folder / f"run-{lexical}"), objective="text", text_column="text",
                      label_column="label", plan="stock", progress=False, plots=False, **_shared(cfg),
                      model_overrides={**cfg.model_overrides, "lexical": lexical})
        return float(summary["test_accuracy"])

    cfg.model_overrides["lexical"], cfg.derived["lexical"] = choose_lexical(splits.train, splits.classes, cfg.seed,
                                                                              trial)
    return cfg


def _shared(cfg: TrainConfig) -> dict[str, Any]:
    """The run's settings the trials take as they are: its seed and those the user gave (not derived from the
    whole of the data: the trials derive theirs from their four fifths, as the run did from its texts)."""
    given = ("seq_len", "batch_size", "lr", "epochs", "max_steps", "threads", "device", "amp")
    return {"seed": cfg.seed, **{k: getattr(cfg, k) for k in given
                                 if k not in cfg.derived and getattr(cfg, k) is not None}}


def choose_lexical(train: LabelledTexts, classes: list[str], seed: int, trial: Trial) -> tuple[bool, str]:
    """(whether to add the lexical term, why in one line), from two trials on the training texts alone."""
    from .textclass import hold_out
    try:
        fit, held = hold_out(train, classes, CHOICE_FRACTION, seed + 1)
    except DataError:  # a class too small for a fifth of it to score
        return True, (f"true: too few training texts to choose on (a class's fifth held back must hold "
                      f"{MIN_HELD_OUT_PER_CLASS} or more, and some class's does not): the default")
    with tempfile.TemporaryDirectory(prefix="anyformer-choose-") as tmp:
        _write_pair(Path(tmp), fit, held)
        scores = {lexical: trial(Path(tmp), lexical) for lexical in (True, False)}
    chosen = scores[False] <= scores[True]  # a tie keeps the term (chosen in text_select.py round 5)
    return chosen, (f"{str(chosen).lower()}: {scores[True]:.1%} with the term against {scores[False]:.1%} without, "
                    f"on a seeded {CHOICE_FRACTION:.0%} of the {len(train):,} training texts ({len(held):,}), "
                    f"each run trained on the other {len(fit):,}")


def _write_pair(folder: Path, fit: LabelledTexts, held: LabelledTexts) -> None:
    """The trial's data as a NAME_TRAIN.csv / NAME_TEST.csv pair, which any labelled-text run reads."""
    import pandas as pd
    for name, part in (("choose_TRAIN.csv", fit), ("choose_TEST.csv", held)):
        pd.DataFrame({"text": part.texts, "label": part.labels}).to_csv(folder / name, index=False)
