"""Language modelling's windows on hand-made token streams, no trainer run: the sizes the task
takes (context, seq_len, limits) and refuses, the evaluation windows (evenly spaced starts, or tiles
over other text that score each token once)."""
import math

import numpy as np
import pytest
import torch

from anyformer.models import PRESETS
from anyformer.train.lm import _tiles

from .lm_fakes import SMALL, fake_corpus, task_of

# ---------------------------------------------------------------- construction: sizes and windows

def test_construction_keeps_the_given_corpus_and_pins_sizes_and_evaluation_windows():
    """The corpus passed is used as it is (cfg.data is never read), the context comes from the
    overrides, and the validation windows are eval_iters x batch_size evenly spaced int64 starts."""
    corpus = fake_corpus(1000, 700, seed=1)
    task = task_of(corpus)
    assert task.corpus is corpus and task.tokenizer is corpus.tokenizer and task.other_text is False
    assert (task.context, task.seq_len, task.items_per_example) == (24, 10, 10)
    assert np.array_equal(task.train_tokens, corpus.tokens[:700])
    assert np.array_equal(task.val_tokens, corpus.tokens[700:])
    assert task.steps_per_epoch == 12  # ceil(700 / (6 x 10))
    span, n = 300 - 11, 3 * 6  # the last start leaves one whole window; 17 gaps: no rounding ties
    assert task.val_starts.dtype == np.int64 and task.val_skip.dtype == np.int64
    assert task.val_starts.tolist() == [math.floor(i * span / (n - 1) + 0.5) for i in range(n)]
    assert task.val_skip.tolist() == [0] * n
    assert torch.equal(task.token_bytes, torch.from_numpy(corpus.tokenizer.nbytes))
    assert task.model_overrides() == {"vocab_size": 7, "context": 24}


def test_one_eval_iter_gives_one_batch_of_windows():
    corpus = fake_corpus(400, 300, seed=2)
    task = task_of(corpus, eval_iters=1, batch_size=5)
    assert task.val_starts.tolist() == [0, 22, 44, 67, 89]  # linspace(0, 100 - 11, 5), rounded


def test_seq_len_defaults_to_the_context_of_the_overrides_or_of_the_preset():
    corpus = fake_corpus(1200, 900, seed=3)
    preset = dict(SMALL)
    del preset["context"]
    task = task_of(corpus, seq_len=None, model_overrides=preset)
    assert PRESETS["shakespeare-char"][1]["context"] == 256
    assert (task.context, task.seq_len, task.items_per_example) == (256, 256, 256)
    task = task_of(corpus, seq_len=None)
    assert (task.context, task.seq_len) == (24, 24)


@pytest.mark.parametrize("seq_len", [1, 24])
def test_seq_len_may_be_one_or_the_whole_context(seq_len):
    task = task_of(fake_corpus(300, 200, seed=4), seq_len=seq_len)
    assert task.seq_len == seq_len and len(task.val_starts) == 18


@pytest.mark.parametrize("seq_len", [25, 31])
def test_seq_len_outside_the_context_is_refused_in_one_line(seq_len):
    with pytest.raises(ValueError) as e:
        task_of(fake_corpus(300, 200), seq_len=seq_len)
    assert str(e.value) == (f"seq_len {seq_len} must lie in [1, the model's context 24]; lower seq_len or raise "
                            f"the context (--set context={seq_len})")


@pytest.mark.parametrize("model", ["vit-mnist", "no-such-model"])
def test_a_model_that_is_not_a_gpt_preset_is_refused_naming_the_gpt_presets(model):
    gpts = [name for name in sorted(PRESETS) if PRESETS[name][0] == "gpt"]
    assert "shakespeare-char" in gpts and "gpt2" in gpts and "vit-mnist" not in gpts
    with pytest.raises(ValueError) as e:
        task_of(fake_corpus(300, 200), model=model)
    assert str(e.value) == f"a language model run needs a GPT preset, got {model!r}; valid: {gpts}"


def test_limits_count_tokens_but_never_cut_below_one_window():
    corpus = fake_corpus(1000, 700, seed=5)
    task = task_of(corpus, limit_train=1, limit_eval=1, batch_size=3)
    assert np.array_equal(task.train_tokens, corpus.tokens[:11])
    assert np.array_equal(task.val_tokens, corpus.tokens[700:711])
    assert task.steps_per_epoch == 1 and task.val_starts.tolist() == [0] * 9
    task = task_of(corpus, limit_train=123, limit_eval=57, batch_size=3)
    assert np.array_equal(task.train_tokens, corpus.tokens[:123])
    assert np.array_equal(task.val_tokens, corpus.tokens[700:757])
    assert task.steps_per_epoch == 5  # ceil(123 / 30)


@pytest.mark.parametrize("which,n,split", [("training", 1000, 10), ("validation", 800, 790)])
def test_a_split_shorter_than_one_window_is_named(which, n, split):
    corpus = fake_corpus(n, split)
    with pytest.raises(ValueError) as e:
        task_of(corpus, data="my text.txt")
    assert str(e.value) == (f"the {which} split of 'my text.txt' has 10 tokens, fewer than one window of "
                            f"seq_len + 1 = 11; use more text or a shorter seq_len")
    task = task_of(fake_corpus(n, split + 1 if which == "training" else split - 1))  # exactly one window: enough
    assert min(len(task.train_tokens), len(task.val_tokens)) == 11


def test_other_text_is_scored_whole_in_tiles_and_the_runs_own_text_by_its_split():
    """Given a finished run's info: other data than it recorded is all scored, in windows that
    predict each token after the first once; its own data (the same spelling) keeps its split."""
    corpus = fake_corpus(100, 60, seed=6)
    other = task_of(corpus, info={"kind": "text", "dataset": "elsewhere/own.txt"}, data="mine.txt", seq_len=12)
    assert other.other_text is True
    assert np.array_equal(other.train_tokens, corpus.tokens) and np.array_equal(other.val_tokens, corpus.tokens)
    assert other.val_starts.tolist() == [0, 12, 24, 36, 48, 60, 72, 84, 87]
    assert other.val_skip.tolist() == [0] * 8 + [9]  # 84 + 12 = 96 predicted; 87 re-reads 9 of them
    own = task_of(corpus, info={"kind": "text", "dataset": "mine.txt"}, data="mine.txt", seq_len=12)
    assert own.other_text is False and len(own.train_tokens) == 60 and len(own.val_tokens) == 40
    assert own.val_skip.tolist() == [0] * 18


@pytest.mark.parametrize("n,seq_len,starts,skip", [
    (13, 4, [0, 4, 8], [0, 0, 0]),             # 8 + 4 = 12 = n - 1: the windows end flush, no tail
    (14, 4, [0, 4, 8, 9], [0, 0, 0, 3]),       # one token left: a last window flush with the end
    (40, 7, [0, 7, 14, 21, 28, 32], [0] * 5 + [3]),
])
def test_tiles_in_closed_form(n, seq_len, starts, skip):
    got_starts, got_skip = _tiles(n, seq_len)
    assert got_starts.tolist() == starts and got_skip.tolist() == skip
    assert got_starts.dtype == np.int64 and got_skip.dtype == np.int64
