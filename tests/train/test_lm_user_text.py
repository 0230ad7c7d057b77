"""Language models on a user's own text: bits per byte, the tokenizer kept with the run and used again
(resume, scoring, other text), and the warning where the vocabulary outweighs the model."""
import json
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import anyformer as af
from anyformer.data import DataError, DataWarning
from anyformer.data.text.bpe import learn_bpe
from anyformer.data.text.tokenizers import CharTokenizer, load_tokenizer
from anyformer.models import read_config
from anyformer.train import TrainConfig
from anyformer.train.distributed import Distributed
from anyformer.train.lm import LanguageModelling, _tiles, vocabulary_costs
from tests.cli_runner import run
from tests.conftest import SHARED_DATA

SHAKESPEARE = (SHARED_DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
MIXED = ("Hello, world! Καλημέρα κόσμε. Привет, мир. 日本語のテキスト、中文的文本。 مرحبا "
         "🙂🎉🇫🇷 👨‍👩‍👧 naïve café ∑√π\n")
TINY = dict(width=32, depth=1, heads=2, context=512, dropout=0.0)


def lm_config(data, **kw) -> TrainConfig:
    values = dict(recipe="test-lm", task="lm", model="shakespeare-char", model_overrides=dict(TINY), data=str(data),
                  seq_len=64, batch_size=4, eval_iters=2, max_steps=5, progress=False, plots=False, threads=1)
    values.update(kw)
    return TrainConfig(**values)


def tiny_gpt(vocab_size: int) -> af.GPT:
    return af.GPT.preset("shakespeare-char", vocab_size=vocab_size, **TINY).eval()


def run_tokenizer(kind, tmp_path):
    """A tokenizer of `kind` as a finished run holds it: the tokenizer and its data section."""
    if kind == "char":
        tok = CharTokenizer.from_text(SHAKESPEARE[:2000] + MIXED)
        return tok, {"kind": "text", **tok.to_info()}
    if kind == "gpt2":
        tok = load_tokenizer("gpt2")
        return tok, {"kind": "text", **tok.to_info()}
    tok = learn_bpe([SHAKESPEARE[:30_000], MIXED * 30], 512)
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run" / "tokenizer.json").write_text(tok.to_json(), encoding="utf-8")
    return tok, {"kind": "text", **tok.to_info(), "run_dir": str(tmp_path / "run")}


# ---------------------------------------------------------------- bits per byte

@pytest.mark.parametrize("kind", ["char", "bpe", "gpt2"])
def test_val_bpb_is_the_nats_over_ln2_times_the_bytes_of_the_predicted_text(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    tok, info = run_tokenizer(kind, tmp_path)
    text = MIXED * 2
    src = tmp_path / "other.txt"
    src.write_text(text, encoding="utf-8")
    ids = tok.encode(text)
    # Other text than the run's: scored whole, here in one window that predicts every token after the first.
    task = LanguageModelling(lm_config(src, seq_len=len(ids) - 1), "cpu", info={**info, "dataset": "its own"})
    assert task.val_tokens.tolist() == ids
    model = tiny_gpt(tok.vocab_size)
    got = task.evaluate(model, Distributed())
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]]))[0].double()
    nats = float(F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))
    first = tok.decode(ids[:1])
    assert text.startswith(first) and first.isascii()  # "H" or "Hello": the bytes not predicted
    predicted_bytes = len(text.encode("utf-8")) - len(first)
    assert got["val_bpb"] == pytest.approx(nats / (math.log(2) * predicted_bytes), rel=1e-5)
    assert got["eval_loss"] == pytest.approx(nats / (len(ids) - 1), rel=1e-5)


def test_val_bpb_leaves_out_the_end_of_text_token_between_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    tok, info = run_tokenizer("gpt2", tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("Hello there.\n", encoding="utf-8")
    (tmp_path / "d" / "b.txt").write_text(MIXED, encoding="utf-8")
    ids = tok.encode("Hello there.\n") + [tok.eot] + tok.encode(MIXED)
    task = LanguageModelling(lm_config(tmp_path / "d", seq_len=len(ids) - 1), "cpu", info={**info, "dataset": "x"})
    assert task.val_tokens.tolist() == ids
    model = tiny_gpt(tok.vocab_size)
    got = task.evaluate(model, Distributed())
    with torch.no_grad():
        nats = F.cross_entropy(model(torch.tensor([ids[:-1]]))[0].double(), torch.tensor(ids[1:]), reduction="none")
    text_nats = float(nats.sum() - nats[ids.index(tok.eot) - 1])  # the eot's own loss is not a byte's
    predicted_bytes = len(("Hello there.\n" + MIXED).encode()) - len("Hello")
    assert got["val_bpb"] == pytest.approx(text_nats / (math.log(2) * predicted_bytes), rel=1e-5)
    assert got["eval_loss"] == pytest.approx(float(nats.mean()), rel=1e-5)  # the loss keeps every token


@pytest.mark.parametrize("n,seq_len", [(10, 9), (11, 3), (12, 3), (100, 7), (65, 64), (1000, 128)])
def test_tiled_windows_predict_every_token_after_the_first_exactly_once(n, seq_len):
    starts, skip = _tiles(n, seq_len)
    scored = np.zeros(n, dtype=np.int64)
    for s, k in zip(starts, skip):
        assert 0 <= s and s + seq_len + 1 <= n
        scored[s + 1 + k:s + seq_len + 1] += 1
    assert scored[0] == 0 and (scored[1:] == 1).all()


# ---------------------------------------------------------------- the tokenizer, saved and used again

def test_a_learned_tokenizer_is_saved_with_the_run_and_recorded(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text(SHAKESPEARE[:40_000] + MIXED * 20, encoding="utf-8")
    task = LanguageModelling(lm_config(src, tokenizer="bpe", model_overrides=dict(TINY, width=128)), "cpu")
    files = task.run_files()
    assert list(files) == ["tokenizer.json"]
    assert files["tokenizer.json"].decode() == task.tokenizer.to_json()
    info = task.run_info()
    assert (info["kind"], info["tokenizer"], info["tokenizer_file"]) == ("text", "bpe", "tokenizer.json")
    assert info["vocab_size"] == task.tokenizer.vocab_size == task.model_overrides()["vocab_size"]
    assert info["dataset"] == str(src)
    char = LanguageModelling(lm_config(src, tokenizer="char"), "cpu")
    assert char.run_files() == {} and char.run_info()["tokenizer"] == "char"


def test_a_finished_run_scores_other_text_whole_with_its_own_tokenizer_never_relearned(tmp_path, monkeypatch):
    tok, info = run_tokenizer("bpe", tmp_path)
    from anyformer.data.text import corpus
    monkeypatch.setattr(corpus, "learn_bpe", lambda *a, **k: pytest.fail("a run's tokenizer was learned again"))
    other = tmp_path / "other.txt"
    other.write_text(MIXED * 40, encoding="utf-8")
    task = LanguageModelling(lm_config(other, seq_len=32), "cpu", info={**info, "dataset": str(tmp_path / "own.txt")})
    assert task.other_text and task.tokenizer.to_json() == tok.to_json()
    assert task.val_tokens.tolist() == tok.encode(MIXED * 40)  # all of it, no split
    scored = sum(int(min(32, 32 - k)) for k in task.val_skip)
    assert scored == len(task.val_tokens) - 1
    # the same data as recorded (another spelling of its path): its own validation split, as trained
    own = LanguageModelling(lm_config(other, seq_len=32), "cpu", info={**info, "dataset": str(other.parent / "." / "other.txt")})
    assert not own.other_text and len(own.val_tokens) < len(task.val_tokens)


def test_a_char_run_refuses_other_text_naming_up_to_five_unseen_characters(tmp_path):
    tok = CharTokenizer.from_text("abc def\n")
    other = tmp_path / "other.txt"
    other.write_text("abc ÀÉ def Î🙂 Õ\tÜ abc\n" * 20, encoding="utf-8")
    with pytest.raises(DataError, match=r"holds 7 character\(s\) the run's character tokenizer never saw: "
                                        r"'À' \(U\+00C0\), 'É' \(U\+00C9\), 'Î' \(U\+00CE\), '🙂' \(U\+1F642\), "
                                        r"'Õ' \(U\+00D5\) and 2 more; a character model scores only text in its "
                                        r"alphabet of 8 characters"):
        LanguageModelling(lm_config(other), "cpu", info={"kind": "text", **tok.to_info(), "dataset": "own.txt"})


def test_a_resumed_run_reads_its_tokenizer_from_the_run_directory(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text(SHAKESPEARE[:20_000], encoding="utf-8")
    # A tokenizer that learning from this text would not give: the run's own must be the one used.
    saved = learn_bpe([MIXED * 50, SHAKESPEARE[-5000:]], 512)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tokenizer.json").write_text(saved.to_json(), encoding="utf-8")
    cfg = lm_config(src, tokenizer="bpe", out=str(tmp_path / "run"), resume=True)
    task = LanguageModelling(cfg, "cpu")
    assert task.tokenizer.to_json() == saved.to_json()
    assert task.tokenizer.decode(task.corpus.tokens) == SHAKESPEARE[:20_000]
    fresh = LanguageModelling(lm_config(src, tokenizer="bpe", out=str(tmp_path / "run")), "cpu")
    assert fresh.tokenizer.to_json() != saved.to_json()  # without --resume the directory is not read
    # once the run has saved its model, config.json's data section says which tokenizer: here characters
    alphabet = "".join(sorted(set(SHAKESPEARE[:20_000]))) + "ΩЖ"
    tiny_gpt(len(alphabet)).save(tmp_path / "char-run", extra={"data": {"kind": "text", "tokenizer": "char",
                                                                        "chars": alphabet}})
    task = LanguageModelling(lm_config(src, out=str(tmp_path / "char-run"), resume=True), "cpu")
    assert task.tokenizer.chars == "".join(sorted(alphabet))


# ---------------------------------------------------------------- the vocabulary's cost

def test_a_vocabulary_that_outweighs_the_blocks_warns_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    src = tmp_path / "t.txt"
    src.write_text(SHAKESPEARE[:30_000], encoding="utf-8")
    cpu = dict(width=192, depth=4, heads=6, context=128, dropout=0.0)  # the shakespeare-cpu recipe's model
    with pytest.warns(DataWarning) as seen:
        LanguageModelling(lm_config(src, tokenizer="gpt2", model_overrides=cpu, seq_len=128), "cpu")
    (message,) = [str(w.message) for w in seen if issubclass(w.category, DataWarning)]
    assert "\n" not in message
    assert message.startswith("the gpt2 vocabulary of 50,257 tokens makes the output layer cost 4.9x the FLOPs of "
                              "the model's 4 block(s) per token (19.30 against 3.93 MFLOPs)")
    assert message.endswith("--tokenizer bpe learns a vocabulary sized to your text (or --tokenizer char)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        LanguageModelling(lm_config(src, tokenizer="char", model_overrides=cpu, seq_len=128), "cpu")
        LanguageModelling(lm_config(src, tokenizer="bpe", model_overrides=cpu, seq_len=128), "cpu")


def test_vocabulary_costs_count_as_forward_flops_does():
    overrides = dict(width=64, depth=3, heads=4, context=128, vocab_size=1000)
    head, blocks, depth = vocabulary_costs("shakespeare-char", overrides, 96)
    model = af.GPT.preset("shakespeare-char", **overrides)
    assert depth == 3 and head == 2 * 1000 * 64
    assert head + blocks == model.forward_flops(96) / 96
    assert vocabulary_costs("shakespeare-char", dict(overrides, heads=5), 96) is None  # 64 / 5: not a model


# ---------------------------------------------------------------- the whole path, as a user runs it

@pytest.mark.slow
def test_train_on_your_own_text_with_a_learned_bpe_then_use_and_score_the_run(tmp_path):
    src = tmp_path / "mine.txt"
    src.write_text(SHAKESPEARE[:40_000] + MIXED * 30, encoding="utf-8")
    out = run("train", "shakespeare-cpu", "--data", str(src), "--tokenizer", "bpe", "--out", str(tmp_path / "run"),
              "--max-steps", "5", "--eval-every", "5", "--eval-iters", "2", "--batch-size", "4", "--amp", "none",
              "--threads", "1", "--no-progress", "--no-plots", "--set", "depth=1", "--set", "width=32",
              "--set", "heads=2", env_extra={"ANYFORMER_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    line = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert summary["val_bpb"] == summary["best_val_bpb"] == line["val_bpb"] and 0 < line["val_bpb"] < 20
    assert f"val bpb {line['val_bpb']:.4f}" in out.stdout and f"({line['val_bpb']:.4f} bits per byte)" in out.stdout
    info = read_config(run_dir)["data"]
    assert (info["tokenizer"], info["tokenizer_file"], info["dataset"]) == ("bpe", "tokenizer.json", str(src))
    assert (run_dir / "tokenizer.json").is_file()
    # used again: open_run, generate, and eval (its own split: the same numbers; other text: all of it)
    opened = af.open_run(run_dir)
    assert opened.tokenizer.vocab_size == info["vocab_size"]
    assert opened.generate("Καλημέρα 🙂", 8, seed=1).startswith("Καλημέρα 🙂")
    gen = run("generate", str(run_dir), "--prompt", "日本語", "--max-new-tokens", "8", "--seed", "1")
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith("日本語")
    again = run("eval", str(run_dir), env_extra={"ANYFORMER_CACHE": str(tmp_path / "cache")})
    assert again.returncode == 0, again.stderr
    scored = json.loads(again.stdout.strip().splitlines()[-1])
    assert scored["eval_loss"] == pytest.approx(line["eval_loss"], abs=2e-6)
    assert scored["val_bpb"] == pytest.approx(line["val_bpb"], abs=2e-6)
    (tmp_path / "other.txt").write_text(MIXED * 10, encoding="utf-8")
    other = run("eval", str(run_dir), "--data", str(tmp_path / "other.txt"),
                env_extra={"ANYFORMER_CACHE": str(tmp_path / "cache")})
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout.strip().splitlines()[-1])["val_bpb"] != scored["val_bpb"]
