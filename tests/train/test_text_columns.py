"""`--text-column`: a table's texts named by the user, one column or several read as one text (a title
and a body), over the column the values would pick; the names kept with the run, so that eval and
predict read other files the same way; a name the file lacks refused in one line."""
import json

import pandas as pd
import pytest

from anyformer.cli import main
from anyformer.data.errors import DataError
from anyformer.data.text.labelled import describe_text_source, read_labelled_text

from .test_text_classify import FAST, texts


def titled(n_per_class: int = 12) -> pd.DataFrame:
    """Texts split into a short title (the words that tell the class) and a long body (the same words in a
    note), beside a short category column."""
    frame = texts(n_per_class)
    title = frame.text.str.split("\n").str[0]
    return pd.DataFrame({"title": title, "body": frame.text + " " + frame.text, "channel": frame.source,
                         "label": frame.label})


def test_named_columns_are_joined_into_one_text_and_the_others_skipped(tmp_path):
    frame = titled()
    frame.loc[0, "body"] = None  # a missing cell is left out of the join, not written as "nan"
    frame.to_csv(tmp_path / "t.csv", index=False)
    picked = describe_text_source(tmp_path / "t.csv")
    assert picked.text_column == "body"  # without the flag: the longer free-text column
    source = describe_text_source(tmp_path / "t.csv", text_column="Title, body")
    assert source.text_column == "title,body" and source.text_why == "named by --text-column"
    assert set(source.skipped) == {"channel"}
    train, _ = read_labelled_text(source)
    assert train.texts[0] == frame.title[0]
    assert train.texts[1] == f"{frame.title[1]}\n{frame.body[1]}"


@pytest.mark.parametrize("named, expected", [("headline", "no column 'headline'"),
                                             ("title,,body", "no column ''"),
                                             ("label", "names the label column 'label'")])
def test_a_text_column_the_file_lacks_is_refused_naming_what_it_holds(tmp_path, named, expected):
    titled().to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError) as e:
        describe_text_source(tmp_path / "t.csv", text_column=named)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_the_command_line_refuses_a_missing_text_column_in_one_line(tmp_path, capsys):
    titled().to_csv(tmp_path / "t.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "t.csv"), "--out", str(tmp_path / "run"),
                 "--text-column", "headline", *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no column 'headline'" in err[0] and "'title'" in err[0]


@pytest.mark.slow
def test_a_run_trained_on_named_columns_predicts_other_files_by_them(tmp_path, capsys, monkeypatch):
    from anyformer.train import textclass
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)
    titled().to_csv(tmp_path / "t.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "t.csv"), "--out", str(tmp_path / "run"), "--max-steps", "4",
                 "--text-column", "title,body", *FAST]) == 0
    out = capsys.readouterr().out
    assert "text columns 'title' and 'body', read as one text" in out
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["data"]["text_column"] == "title,body" and meta["train"]["text_column"] == "title,body"
    titled(2).drop(columns=["label"]).to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(tmp_path / "run"), str(tmp_path / "new.csv")]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[0] == "source,row,class,probability" and len(rows) == 1 + 6
    assert main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "t.csv")]) == 0


def test_task_text_reads_a_lone_column_of_one_word_titles_as_the_texts(tmp_path, capsys, monkeypatch):
    # Names of one word each, all distinct: by their values an id column, and the table is refused, saying
    # --task text; with --task text the one column beside the label is the text, however short.
    from anyformer.train import textclass
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)
    words = {"weather": "rain storm snow wind fog hail sleet drizzle gust frost thunder mist",
             "sport": "goal match referee league penalty striker keeper tackle corner offside derby final"}
    frame = pd.DataFrame([(f"{w}{i}", label) for label, ws in words.items() for i in range(2)
                          for w in ws.split()], columns=["name", "label"])
    frame.to_csv(tmp_path / "names.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "names.csv"), "--out", str(tmp_path / "refused"), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("--task text")
    assert main(["train", "--data", str(tmp_path / "names.csv"), "--out", str(tmp_path / "run"), "--task", "text",
                 "--max-steps", "2", *FAST]) == 0
    assert "a text column 'name'" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["text_column"] == "name"
