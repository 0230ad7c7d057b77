"""The byte-level BPE learned from a corpus, tokenizer files, and what a run saves of its tokenizer."""
import json
import subprocess
import sys

import numpy as np
import pytest

from anyformer.data import DataError
from anyformer.data.text.bpe import HFTokenizer, bpe_vocab_size, learn_bpe, read_tokenizer_file
from anyformer.data.text.corpus import load_corpus
from anyformer.data.text.tokenizers import BPETokenizer, CharTokenizer, load_tokenizer, tokenizer_from_info
from tests.conftest import REPO, SHARED_DATA

# Text in several scripts, with emoji (some of several code points: a flag, a family joined by ZWJ).
MIXED = ("The quick brown fox — naïve café, Straße.\n"
         "Καλημέρα κόσμε, τι κάνεις;\n"
         "Привет, мир! Как дела?\n"
         "日本語のテキストと中文的文本，还有한국어 문장.\n"
         "مرحبا بالعالم\n"
         "Emoji: 🙂🎉🇫🇷 👨‍👩‍👧 and math ∑∫√π.\n")
SHAKESPEARE = (SHARED_DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def learned():
    return learn_bpe([SHAKESPEARE[:60_000], MIXED * 20], 600)


# ---------------------------------------------------------------- the vocabulary's size

def test_the_vocabulary_grows_as_the_square_root_of_the_training_bytes_within_bounds():
    assert bpe_vocab_size(1_003_854) == 4032          # Tiny Shakespeare's training split: 4 * 1002 -> 4032
    assert bpe_vocab_size(100_000) == 1280            # 4 * 316 = 1265 -> the nearest multiple of 64
    assert bpe_vocab_size(1_000) == 512 and bpe_vocab_size(0) == 512       # never fewer than 512
    assert bpe_vocab_size(10 ** 9) == 16384                                 # nor more than 16384
    sizes = [bpe_vocab_size(n) for n in range(0, 30_000_000, 250_000)]
    assert all(s % 64 == 0 for s in sizes) and sizes == sorted(sizes)


# ---------------------------------------------------------------- learning

def test_learned_bpe_round_trips_any_script_and_counts_its_bytes(learned):
    assert learned.kind == "bpe" and learned.vocab_size == 600 and learned.eot == 0
    for text in (MIXED, "unseen: ÆØÅ ⊕ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x01\t\r\n", SHAKESPEARE[-2000:]):
        ids = learned.encode(text)
        assert learned.decode(ids) == text
        assert int(learned.token_byte_lengths()[ids].sum()) == len(text.encode("utf-8"))
    # merges were learned: the text's common English words are single tokens
    assert len(learned.encode(" the")) == 1 and len(learned.encode(SHAKESPEARE[:5000])) < 5000 / 2


def test_learned_bpe_reads_special_token_text_as_text(learned):
    ids = learned.encode("a<|endoftext|>b")
    assert learned.eot not in ids and learned.decode(ids) == "a<|endoftext|>b"


def test_learned_bpe_streams_characters_split_over_tokens_whole(learned):
    ids = learned.encode(MIXED)
    assert any("\ufffd" in learned.decode([i]) for i in ids)  # some tokens are pieces of a character
    dec = learned.decoder()
    pieces = [dec.feed([i]) for i in ids]
    assert "".join(pieces) + dec.flush() == MIXED and not any("\ufffd" in p for p in pieces)


def test_learning_is_deterministic_to_the_byte_even_in_another_process(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text(SHAKESPEARE[:40_000] + MIXED * 10, encoding="utf-8")
    first = learn_bpe([src.read_text(encoding="utf-8")], 512).to_json()
    assert learn_bpe([src.read_text(encoding="utf-8")], 512).to_json() == first
    # The library hashes with a per-process seed: a second process must learn the same bytes too.
    code = ("import sys; from anyformer.data.text.bpe import learn_bpe; "
            "sys.stdout.write(learn_bpe([open(sys.argv[1], encoding='utf-8').read()], 512).to_json())")
    out = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout == first


def test_a_corpus_learns_from_its_training_split_only(tmp_path):
    # The last 10% of the text repeats a word found nowhere before it: a tokenizer that saw the
    # validation text would have learned it as one token.
    train = SHAKESPEARE[:27_000]
    text = train + "\n" + "Zqxjvwk " * 370
    assert "Zqxjvwk" not in text[:int(len(text) * 0.9)] and text.count("Zqxjvwk") == 370
    src = tmp_path / "t.txt"
    src.write_text(text, encoding="utf-8")
    c = load_corpus(src, "bpe", cache_dir=tmp_path / "cache")
    at = int(len(text) * 0.9)
    assert c.tokenizer.kind == "bpe" and c.tokenizer.vocab_size <= bpe_vocab_size(len(text[:at].encode()))
    assert len(c.tokenizer.encode(" Zqxjvwk")) >= 4  # never merged: its letters were not seen together
    # exactly the tokenizer learned from the training text alone, and the splits are the text's
    assert c.tokenizer.to_json() == learn_bpe([text[:at]], bpe_vocab_size(len(text[:at].encode()))).to_json()
    assert c.tokenizer.decode(c.train) == text[:at] and c.tokenizer.decode(c.val) == text[at:]
    # the cache keeps the tokenizer: a second load learns nothing and gives the same one
    again = load_corpus(src, "bpe", cache_dir=tmp_path / "cache")
    assert again.cache_path == c.cache_path and again.tokenizer.to_json() == c.tokenizer.to_json()


# ---------------------------------------------------------------- tokenizer files

def _wordpiece_file(tmp_path):
    """A tokenizer of another kind than BPE (WordPiece, lower-casing), written by the tokenizers library."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator([SHAKESPEARE[:20_000]], trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[UNK]", "[PAD]"], show_progress=False))
    tok.enable_padding(length=64)  # what a file may ask for, and an LM corpus must not get
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_json_of_any_kind_is_read_as_a_file_tokenizer(tmp_path):
    path = _wordpiece_file(tmp_path)
    tok = load_tokenizer(str(path))
    assert isinstance(tok, HFTokenizer) and tok.kind == "file" and tok.eot is None
    ids = tok.encode("First Citizen: before we proceed")
    assert len(ids) < 20 and tok.decode(ids) == "first citizen : before we proceed"  # no padding to 64
    assert load_tokenizer(str(tmp_path)).to_json() == tok.to_json()  # a folder holding tokenizer.json
    dec = tok.decoder()
    assert "".join(dec.feed([i]) for i in ids) + dec.flush() == tok.decode(ids)


def test_a_tiktoken_file_is_gpt2s_and_anything_else_is_refused_in_one_line(tmp_path):
    assert isinstance(load_tokenizer(str(SHARED_DATA / "gpt2" / "r50k_base.tiktoken")), BPETokenizer)
    with pytest.raises(DataError, match=r"vocab.bpe is not a tokenizer file: expected a Hugging Face tokenizer.json "
                                        r"\(JSON\) or GPT-2's r50k_base.tiktoken, got a file that starts b'#version"):
        load_tokenizer(str(SHARED_DATA / "gpt2" / "vocab.bpe"))
    (tmp_path / "other.json").write_text('{"vocab": {"a": 0}}')
    with pytest.raises(DataError, match=r"other.json is not a tokenizer file: expected a Hugging Face "
                                        r"tokenizer.json \(the tokenizers library said: "):
        load_tokenizer(str(tmp_path / "other.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no tokenizer: expected tokenizer.json or r50k_base.tiktoken in it"):
        load_tokenizer(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"unknown tokenizer 'sentencepiece'; expected char, bpe .*gpt2, or a "
                                         r"tokenizer file"):
        load_tokenizer("sentencepiece")
    for err in (DataError, ValueError):
        try:
            load_tokenizer(str(tmp_path / "other.json"))
        except err as e:
            assert "\n" not in str(e)


def test_a_corpus_encoded_with_a_tokenizer_file(tmp_path):
    path = _wordpiece_file(tmp_path)
    src = tmp_path / "t.txt"
    src.write_text(SHAKESPEARE[:20_000], encoding="utf-8")
    c = load_corpus(src, str(path), cache_dir=tmp_path / "cache")
    assert c.tokenizer.kind == "file" and c.tokens.dtype == np.uint16
    assert c.tokens.tolist() == c.tokenizer.encode(SHAKESPEARE[:18_000]) + c.tokenizer.encode(SHAKESPEARE[18_000:20_000])


# ---------------------------------------------------------------- saved with a run, read back

def test_a_learned_tokenizer_is_read_back_from_the_run_directory_and_checked(tmp_path, learned):
    run = tmp_path / "run"
    run.mkdir()
    (run / "tokenizer.json").write_text(learned.to_json(), encoding="utf-8")
    info = json.loads(json.dumps({"kind": "text", **learned.to_info()}))  # as config.json stores it
    assert set(info) == {"kind", "tokenizer", "tokenizer_file", "vocab_size", "tokenizer_sha256"}
    assert (info["tokenizer"], info["tokenizer_file"], info["vocab_size"]) == ("bpe", "tokenizer.json", 600)
    again = tokenizer_from_info(info, run)
    assert again.kind == "bpe" and again.encode(MIXED) == learned.encode(MIXED)
    assert tokenizer_from_info({**info, "run_dir": str(run)}).to_json() == learned.to_json()
    with pytest.raises(ValueError, match="the run's bpe tokenizer is saved in its run directory as tokenizer.json: "
                                         "pass the directory"):
        tokenizer_from_info(info)
    with pytest.raises(DataError, match=r"elsewhere/tokenizer.json is missing: the run's tokenizer"):
        tokenizer_from_info(info, tmp_path / "elsewhere")
    (run / "tokenizer.json").write_text(learn_bpe([MIXED * 5], 512).to_json(), encoding="utf-8")
    with pytest.raises(DataError, match=r"is not the tokenizer the run was trained with: sha256 [0-9a-f]{64}, "
                                        r"config.json records " + info["tokenizer_sha256"]):
        tokenizer_from_info(info, run)


def test_the_byte_tables_of_every_kind_add_up_to_the_texts_utf8_bytes(monkeypatch, learned):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    for tok in (CharTokenizer.from_text(MIXED), learned, load_tokenizer("gpt2")):
        table = tok.token_byte_lengths()
        assert table.shape == (tok.vocab_size,) and table.dtype == np.int64
        assert int(table[tok.encode(MIXED)].sum()) == len(MIXED.encode("utf-8")), tok
    gpt2 = load_tokenizer("gpt2").token_byte_lengths()
    assert gpt2[50256] == 0 and gpt2[15496] == 5  # <|endoftext|> stands for no text; "Hello" for 5 bytes


def test_read_tokenizer_file_names_an_unreadable_file(tmp_path):
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(DataError, match=r"cannot read the tokenizer file .*bad.json"):
        read_tokenizer_file(tmp_path / "bad.json")
