"""What a language model run prints and records, no trainer run: the evaluation's text and the
final line, the summary's last and best evaluations, the run's info, and the warning where the
vocabulary's output layer outweighs the blocks."""
import linecache
import warnings

import numpy as np
import torch

from anyformer.data import DataWarning
from anyformer.data.text.corpus import TokenCorpus
from anyformer.data.text.tokenizers import CharTokenizer
from anyformer.train.lm import LanguageModelling

from .lm_fakes import config, fake_corpus, task_of

# ---------------------------------------------------------------- what is printed and recorded

def test_eval_text_and_final_line():
    task = task_of(fake_corpus(300, 200))
    assert task.eval_text({"eval_loss": 2.718281, "val_bpb": 1.234567}) == "val loss 2.7183 | val bpb 1.2346"
    assert task.eval_text({"eval_loss": 3.14159}) == "val loss 3.1416"
    assert task.final_line({"val_loss": 1.98767, "val_bpb": 0.87654, "steps": 321, "train_seconds": 12.6}) == (
        "validation loss 1.9877 (0.8765 bits per byte) after 321 steps in 13s")
    assert task.final_line({"val_loss": 1.98767, "steps": 7, "train_seconds": 99.4}) == (
        "validation loss 1.9877 after 7 steps in 99s")


def test_summary_fields_take_the_last_and_the_best_evaluations():
    task = task_of(fake_corpus(300, 200))
    history = [{"step": 10, "time": 1.5, "loss": 3.0},
               {"step": 20, "time": 2.5, "eval_loss": 2.6, "val_bpb": 1.9},
               {"step": 30, "time": 3.5, "eval_loss": 2.2, "val_bpb": 1.7},
               {"step": 40, "time": 4.5, "loss": 2.0},
               {"step": 50, "time": 5.5, "eval_loss": 2.4, "val_bpb": 1.6},
               {"step": 60, "time": 6.5, "eval_loss": 2.5}]
    line = {"step": 70, "time": 7.5, "eval_loss": 2.45, "val_bpb": 1.65}
    assert task.summary_fields(line, history) == {"val_loss": 2.45, "best_val_loss": 2.2, "best_val_step": 30,
                                                  "best_val_seconds": 3.5, "val_bpb": 1.65, "best_val_bpb": 1.6}
    no_bpb = {"step": 70, "time": 7.5, "eval_loss": 2.1}
    assert task.summary_fields(no_bpb, history) == {"val_loss": 2.1, "best_val_loss": 2.2, "best_val_step": 30,
                                                    "best_val_seconds": 3.5}
    assert task.summary_fields({"step": 70, "time": 7.5, "loss": 1.0}, history) == {}
    # no history yet: the line is its own best; no earlier bits per byte: the line's
    assert task.summary_fields(line, []) == {"val_loss": 2.45, "best_val_loss": 2.45, "best_val_step": 70,
                                             "best_val_seconds": 7.5, "val_bpb": 1.65, "best_val_bpb": 1.65}
    assert task.summary_fields(line, history[:1] + history[-1:])["best_val_bpb"] == 1.65


def test_run_info_records_tokenizer_corpus_and_the_tokens_used():
    tok = CharTokenizer("xyzé\n")
    corpus = TokenCorpus(tok, np.arange(1000, dtype=np.uint16) % 5, 800, "some/text.txt", ["some/text.txt"], "beef")
    task = task_of(corpus, limit_train=300, limit_eval=150)
    assert task.run_info() == {"kind": "text", "tokenizer": "char", "vocab_size": 5, "chars": "\nxyzé",
                               "dataset": "some/text.txt", "train_tokens": 800, "val_tokens": 200,
                               "source_sha256": "beef", "seq_len": 10, "val_fraction": 0.1,
                               "train_tokens_used": 300, "val_tokens_used": 150}
    assert task.run_files() == {}


# ---------------------------------------------------------------- the vocabulary's cost

def _vocab_warnings(corpus, info=None, **kw):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        LanguageModelling(config(**kw), torch.device("cpu"), corpus, info=info)
    return [w for w in seen if issubclass(w.category, DataWarning)]


def test_the_vocabulary_warning_starts_where_the_head_outweighs_the_blocks():
    """Head 2 V D against blocks depth x (24 D^2 + 4 T D): with D=16, T=10, depth 1 they are equal
    at V = 12 D + 2 T = 212; one token more warns. A finished run's info (scoring) never warns."""
    even = fake_corpus(300, 200, vocab=212, nbytes=np.ones(212))
    assert _vocab_warnings(even) == []
    more = fake_corpus(300, 200, vocab=213, nbytes=np.ones(213))
    assert len(_vocab_warnings(more)) == 1
    assert _vocab_warnings(more, info={"kind": "text", "dataset": "nowhere/fake.txt"}) == []


def test_the_vocabulary_warning_names_its_numbers_and_the_fix_for_a_learned_bpe():
    """Width 90, depth 3, T 85, V 6750: head 1.215 and blocks 0.675 MFLOPs, both on a rounding
    boundary of two decimals (so the divisor 1e6 is pinned); the warning points at the caller."""
    overrides = dict(width=90, depth=3, heads=6, context=96, dropout=0.0)
    corpus = fake_corpus(400, 250, vocab=6750, nbytes=np.ones(6750))
    (w,) = _vocab_warnings(corpus, seq_len=85, model_overrides=overrides)
    assert str(w.message) == ("the bpe vocabulary of 6,750 tokens makes the output layer cost 1.8x the FLOPs of the "
                              "model's 3 block(s) per token (1.22 against 0.68 MFLOPs), so most of each step goes to "
                              "it; --tokenizer char, or a wider model (--set width=...)")
    source = linecache.getline(w.filename, w.lineno)
    assert "warnings.warn" not in source and "DataWarning" not in source and "MFLOPs" not in source
    corpus = fake_corpus(400, 250, vocab=6750, nbytes=np.ones(6750), kind="file")
    (w,) = _vocab_warnings(corpus, seq_len=85, model_overrides=overrides)
    assert str(w.message).endswith("so most of each step goes to it; --tokenizer bpe learns a vocabulary sized to "
                                   "your text (or --tokenizer char)")
