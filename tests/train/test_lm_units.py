"""Language modelling's pieces one at a time, on hand-made token streams and tiny fake models: the
windows and their sizes, the batches, the loss, the evaluation (loss and bits per byte in closed
form), the summary lines, the run's records, the vocabulary warning and the tokenizer a run reads
back. No trainer runs: each test takes milliseconds."""
import json
import linecache
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from anyformer.data import DataWarning
from anyformer.data.text.bpe import HFTokenizer, learn_bpe
from anyformer.data.text.corpus import TokenCorpus
from anyformer.data.text.tokenizers import CharTokenizer
from anyformer.models import PRESETS
from anyformer.train import TrainConfig
from anyformer.train.distributed import Distributed
from anyformer.train.lm import LanguageModelling, _resumed_tokenizer, _tiles

SMALL = dict(width=16, depth=1, heads=2, context=24, dropout=0.0)


class FakeTok:
    """A tokenizer as the task uses one: a vocabulary, a kind, and the UTF-8 bytes of each token."""

    def __init__(self, nbytes, kind="bpe"):
        self.nbytes, self.kind = np.asarray(nbytes, dtype=np.int64), kind

    @property
    def vocab_size(self):
        return len(self.nbytes)

    def token_byte_lengths(self):
        return self.nbytes.copy()

    def to_info(self):
        return {"tokenizer": self.kind, "vocab_size": self.vocab_size}


class TableModel(nn.Module):
    """Logits that depend on the input token only (a row of a fixed random table), so each target's
    loss is known in closed form whatever window it sits in; forward_flops is a fixed polynomial."""

    def __init__(self, vocab, seed=0):
        super().__init__()
        self.table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        self.calls = []

    def forward(self, x):
        self.calls.append(self.training)
        return self.table[x]

    @staticmethod
    def forward_flops(seq_len):
        return 1000.0 * seq_len + 7.0 * seq_len ** 2


def nll(table, a, b):
    """-log p(b | a) under TableModel, in float64."""
    row = table[a]
    return float(torch.logsumexp(row, 0) - row[b])


def config(data="nowhere/fake.txt", **kw) -> TrainConfig:
    values = dict(recipe="test-lm-units", task="lm", model="shakespeare-char", model_overrides=dict(SMALL),
                  data=str(data), seq_len=10, batch_size=6, eval_iters=3, seed=1234, progress=False,
                  plots=False, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def fake_corpus(n, split, vocab=7, seed=0, nbytes=None, kind="bpe", name="nowhere/fake.txt"):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, n).astype(np.uint16)
    tok = FakeTok(rng.integers(0, 5, vocab) if nbytes is None else nbytes, kind)
    return TokenCorpus(tok, tokens, split, name, [name], "c0ffee")


def task_of(corpus, device="cpu", info=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return LanguageModelling(config(**kw), torch.device(device), corpus, info=info)


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


# ---------------------------------------------------------------- batches and the loss

def test_batches_are_seeded_windows_shared_over_ranks():
    """Starts drawn by randint(0, len - seq_len) from the generator of (seed, step); x and y the
    window shifted by one; each of `world` ranks keeps its ceil(n / world) rows; n returned whole."""
    corpus = fake_corpus(500, 400, vocab=50, seed=7)
    task = task_of(corpus, batch_size=7, seed=1234)
    g = torch.Generator().manual_seed(1234 * 1_000_003 + 5 * 7919)
    starts = torch.randint(0, 400 - 10, (7,), generator=g).numpy()
    train = corpus.tokens[:400].astype(np.int64)
    want = np.stack([train[s:s + 11] for s in starts])
    (x, y), n = task.batch(5)
    assert n == 7 and x.dtype == y.dtype == torch.int64 and x.shape == (7, 10)
    assert x.tolist() == want[:, :-1].tolist() and y.tolist() == want[:, 1:].tolist()
    for rank, rows in enumerate([slice(0, 3), slice(3, 6), slice(6, 7)]):
        (xr, yr), n = task.batch(5, rank, 3)
        assert n == 7 and xr.tolist() == want[rows, :-1].tolist() and yr.tolist() == want[rows, 1:].tolist()
    (x6, _), _ = task.batch(6)
    assert x6.tolist() != x.tolist()


def test_a_batch_reaches_the_last_window_and_no_further():
    """With one possible start more than the first, both occur (randint's upper bound is exclusive)."""
    corpus = fake_corpus(200, 12, vocab=50, seed=8)
    task = task_of(corpus, batch_size=64)
    (x, y), _ = task.batch(3)
    train = corpus.tokens[:12].astype(np.int64)
    firsts = {tuple(r) for r in x.tolist()}
    assert firsts == {tuple(train[:10]), tuple(train[1:11])}
    assert {tuple(r) for r in y.tolist()} == {tuple(train[1:11]), tuple(train[2:12])}


def test_the_loss_is_the_mean_cross_entropy_of_every_position():
    corpus = fake_corpus(300, 200, vocab=9, seed=9)
    task = task_of(corpus)
    model = TableModel(9, seed=3)
    g = torch.Generator().manual_seed(11)
    x, y = torch.randint(0, 9, (4, 10), generator=g), torch.randint(0, 9, (4, 10), generator=g)
    loss, extra = task.loss(model, (x, y))
    want = sum(nll(model.table, a, b) for a, b in zip(x.flatten().tolist(), y.flatten().tolist())) / 40
    assert extra == {} and loss.dtype == torch.float32
    assert float(loss) == pytest.approx(want, rel=1e-6)


def test_flops_per_item_are_three_forward_passes_per_token():
    task = task_of(fake_corpus(300, 200), seq_len=13)
    assert task.flops_per_item(TableModel(7)) == 3.0 * (1000.0 * 13 + 7.0 * 169) / 13


# ---------------------------------------------------------------- evaluation

def test_evaluation_loss_and_bits_per_byte_of_the_fixed_windows():
    """eval_loss: the mean over every target of the validation windows; val_bpb: the nats of the
    targets of non-zero bytes over ln 2 x those bytes. The model is put back in training mode."""
    nbytes = np.array([1, 2, 0, 3, 1, 4, 2])
    corpus = fake_corpus(600, 400, seed=10, nbytes=nbytes)
    task = task_of(corpus, eval_iters=2, batch_size=5)
    model = TableModel(7, seed=4).train()
    got = task.evaluate(model, Distributed())
    val = corpus.tokens[400:].astype(np.int64)
    total = count = nats = nb = 0.0
    for s in task.val_starts:
        for t in range(10):
            a, b = val[s + t], val[s + t + 1]
            loss = nll(model.table, a, b)
            total, count = total + loss, count + 1
            if nbytes[b]:
                nats, nb = nats + loss, nb + nbytes[b]
    assert count == 100 and model.training and model.calls == [False, False]
    assert got["eval_loss"] == pytest.approx(total / count, rel=1e-6)
    assert got["val_bpb"] == pytest.approx(nats / (math.log(2) * nb), rel=1e-6)


def test_evaluation_of_other_text_scores_each_token_after_the_first_once():
    nbytes = np.array([3, 1, 1, 0, 2])
    corpus = fake_corpus(103, 50, vocab=5, seed=11, nbytes=nbytes)
    task = task_of(corpus, info={"kind": "text", "dataset": "own.txt"}, seq_len=12, batch_size=4)
    assert task.val_skip[-1] > 0
    model = TableModel(5, seed=5)
    got = task.evaluate(model, Distributed())
    toks = corpus.tokens.astype(np.int64)
    losses = [nll(model.table, toks[i - 1], toks[i]) for i in range(1, 103)]
    text = [i - 1 for i in range(1, 103) if nbytes[toks[i]]]
    assert got["eval_loss"] == pytest.approx(sum(losses) / 102, rel=1e-6)
    assert got["val_bpb"] == pytest.approx(sum(losses[k] for k in text) / (math.log(2) * nbytes[toks[1:]].sum()),
                                           rel=1e-6)


def test_targets_already_scored_are_ignored():
    task = task_of(fake_corpus(300, 200))
    y = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(2))
    got = task._skip_scored(y, np.array([0, 2, 6]))
    want = y.clone()
    want[1, :2], want[2, :] = -100, -100
    assert torch.equal(got, want)
    assert torch.equal(task._skip_scored(y, np.zeros(3, dtype=np.int64)), y)


def test_windows_are_made_on_the_tasks_device():
    """On the meta device (no data, but a device other than the host): batches, the bytes per
    token and the mask of targets already scored live there."""
    task = task_of(fake_corpus(300, 200), device="meta")
    assert task.token_bytes.device.type == "meta"
    (x, y), _ = task.batch(1)
    assert x.device.type == y.device.type == "meta" and x.shape == (6, 10)
    skipped = task._skip_scored(y, np.array([0, 2, 4, 0, 0, 1]))
    assert skipped.device.type == "meta" and skipped.shape == y.shape


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
