"""The tokenizer and the split a language model run reads back: a resumed run's saved tokenizer
(before its first save only a learned or given one), a finished run's split rebuilt from its own
fraction, other text scored whole."""
import json

import pytest

from anyformer.data.text.bpe import HFTokenizer, learn_bpe
from anyformer.data.text.tokenizers import CharTokenizer
from anyformer.train.lm import LanguageModelling, _resumed_tokenizer

from .lm_fakes import config

# ---------------------------------------------------------------- the tokenizer of a run

TEXT = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.\n" * 6


@pytest.fixture(scope="module")
def saved_bpe():
    return learn_bpe([TEXT * 4], 300)


def _write_tokenizer(run_dir, tok):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "tokenizer.json").write_text(tok.to_json(), encoding="utf-8")


def _write_config(run_dir, data):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"family": "gpt", "config": {}, "data": data}))


def test_a_resumed_run_reads_the_tokenizer_its_config_names(tmp_path, saved_bpe):
    run_dir = tmp_path / "run"
    _write_tokenizer(run_dir, saved_bpe)
    _write_config(run_dir, {"kind": "text", **saved_bpe.to_info()})  # no run_dir in it: the run's is used
    tok = _resumed_tokenizer(config(out=str(run_dir), tokenizer="char"))
    assert isinstance(tok, HFTokenizer) and tok.kind == "bpe" and tok.to_json() == saved_bpe.to_json()


@pytest.mark.parametrize("given,kind", [("char", None), ("gpt2", None), ("bpe", "bpe"), ("my-tokenizer.json", "file")])
def test_before_the_first_save_only_a_learned_or_given_tokenizer_is_read_back(tmp_path, saved_bpe, given, kind):
    run_dir = tmp_path / "run"
    _write_tokenizer(run_dir, saved_bpe)
    _write_config(run_dir, {"kind": "images"})  # not a text run's data section: tokenizer.json alone decides
    tok = _resumed_tokenizer(config(out=str(run_dir), tokenizer=given))
    if kind is None:
        assert tok is None
    else:
        assert isinstance(tok, HFTokenizer) and tok.kind == kind and tok.to_json() == saved_bpe.to_json()
    assert _resumed_tokenizer(config(out=str(tmp_path / "empty"), tokenizer=given)) is None


def _text_file(tmp_path, text=TEXT):
    src = tmp_path / "t.txt"
    src.write_text(text, encoding="utf-8")
    return src


def test_the_text_is_read_with_the_tokenizer_of_a_resumed_run_only(tmp_path):
    src = _text_file(tmp_path)
    alphabet = "".join(sorted(set(TEXT))) + "ΩЖ"
    _write_config(tmp_path / "run", {"kind": "text", "tokenizer": "char", "chars": alphabet})
    resumed = LanguageModelling(config(src, out=str(tmp_path / "run"), resume=True), "cpu")
    assert resumed.tokenizer.chars == "".join(sorted(alphabet))
    assert resumed.tokenizer.decode(resumed.corpus.tokens) == TEXT
    fresh = LanguageModelling(config(src, out=str(tmp_path / "run")), "cpu")
    assert fresh.tokenizer.chars == "".join(sorted(set(TEXT)))
    assert (len(fresh.corpus.train), len(fresh.corpus.val)) == (int(len(TEXT) * 0.9), len(TEXT) - int(len(TEXT) * 0.9))
    assert fresh.run_info()["dataset"] == str(src)


@pytest.mark.parametrize("fraction", [None, 0.3])
def test_a_finished_run_rebuilds_its_split_from_its_own_fraction(tmp_path, fraction):
    src = _text_file(tmp_path)
    tok = CharTokenizer(TEXT + "Ω")
    info = {"kind": "text", **tok.to_info(), "dataset": str(src)}
    if fraction is not None:
        info["val_fraction"] = fraction
    task = LanguageModelling(config(src), "cpu", info=info)
    train = int(len(TEXT) * (1 - (0.1 if fraction is None else fraction)))
    assert task.tokenizer.chars == tok.chars and task.other_text is False
    assert (task.corpus.split, len(task.val_tokens)) == (train, len(TEXT) - train)


def test_a_finished_run_scores_other_text_all_of_it(tmp_path):
    src = _text_file(tmp_path)
    tok = CharTokenizer(TEXT + "Ω")
    task = LanguageModelling(config(src), "cpu", info={"kind": "text", **tok.to_info(), "dataset": "own.txt",
                                                       "val_fraction": 0.3})
    assert task.other_text is True and task.corpus.split == 0
    assert tok.decode(task.val_tokens) == TEXT
