"""Text sources, tokenizers and memory-mapped token streams, on the real Tiny Shakespeare and GPT-2 files."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyformer.data import DataError
from anyformer.data.text import corpus, sources, tokenizers
from anyformer.data.text import read as reading
from anyformer.data.text.corpus import load_corpus
from anyformer.data.text.read import read_text
from anyformer.data.text.sources import resolve_text
from anyformer.data.text.tokenizers import BPETokenizer, CharTokenizer, load_tokenizer, tokenizer_from_info
from tests.conftest import SHARED_DATA

SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
SHAKESPEARE_TEXT = SHAKESPEARE.read_text(encoding="utf-8")
CHARS = CharTokenizer.from_text(SHAKESPEARE_TEXT)


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer(path=SHARED_DATA / "gpt2")


# ---------------------------------------------------------------- character tokenizer

def test_char_tokenizer_has_shakespeares_65_characters_in_sorted_order():
    assert CHARS.vocab_size == 65
    assert CHARS.chars == "".join(sorted(set(SHAKESPEARE_TEXT)))
    assert CHARS.encode("\n !") == [0, 1, 2]
    ids = CHARS.encode(SHAKESPEARE_TEXT)
    assert CHARS.decode(ids) == SHAKESPEARE_TEXT
    assert max(ids) == 64 and min(ids) == 0


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(CHARS.chars), max_size=300))
def test_char_tokenizer_round_trips_any_text_in_its_alphabet(s):
    ids = CHARS.encode(s)
    assert len(ids) == len(s)
    assert CHARS.decode(ids) == s


def test_char_tokenizer_rejects_unknown_characters_by_name_and_position():
    with pytest.raises(ValueError, match=r"character 'é' \(U\+00E9\) at position 3 is not in the tokenizer's alphabet"):
        CHARS.encode("caf\u00e9!")
    with pytest.raises(ValueError, match=r"character '🙂' \(U\+1F642\) at position 0"):
        CHARS.encode("🙂 hi")
    with pytest.raises(ValueError, match=r"token id 65 at position 1 is outside the vocabulary \[0, 65\)"):
        CHARS.decode([1, 65])


def test_char_tokenizer_handles_characters_beyond_the_basic_plane():
    tok = CharTokenizer("ab🙂é")
    assert tok.decode(tok.encode("é🙂ba")) == "é🙂ba"


# ---------------------------------------------------------------- GPT-2 BPE

def test_bpe_from_the_local_files_encodes_hello_world(bpe):
    assert bpe.encode("Hello world") == [15496, 995]
    assert bpe.vocab_size == 50257 and bpe.eot == 50256
    assert bpe.decode([15496, 995]) == "Hello world"
    # special-token text is ordinary text: a prompt cannot inject <|endoftext|>
    assert 50256 not in bpe.encode("<|endoftext|>")


def test_bpe_round_trips_and_streams_multibyte_characters_whole(bpe):
    s = "Façade — 日本語 and emoji 🙂🙂, then ASCII."
    ids = bpe.encode(s)
    assert bpe.decode(ids) == s
    pieces = [bpe.decode([i]) for i in ids]
    assert any("\ufffd" in p for p in pieces)  # token by token, characters are cut in pieces...
    dec = bpe.decoder()
    streamed = [dec.feed([i]) for i in ids]
    assert "".join(streamed) + dec.flush() == s  # ...but the stream decoder holds them back until whole
    assert not any("\ufffd" in p for p in streamed)


def test_bpe_refuses_a_file_with_the_wrong_checksum(tmp_path):
    bad = tmp_path / "r50k_base.tiktoken"
    bad.write_bytes((SHARED_DATA / "gpt2" / "r50k_base.tiktoken").read_bytes()[:-10] + b"\n")
    with pytest.raises(DataError, match="is not GPT-2's r50k_base.tiktoken: sha256"):
        BPETokenizer(path=bad)
    with pytest.raises(DataError, match="no GPT-2 BPE file at"):
        BPETokenizer(path=tmp_path / "missing.tiktoken")


def test_bpe_is_found_through_anyformer_data(monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    assert tokenizers._gpt2_file(None) == SHARED_DATA / "gpt2" / "r50k_base.tiktoken"
    assert load_tokenizer("gpt2").encode("Hello world") == [15496, 995]


def test_tokenizers_rebuild_from_their_saved_info(monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    info = json.loads(json.dumps(CHARS.to_info()))  # as stored in config.json
    again = tokenizer_from_info(info)
    assert again.chars == CHARS.chars and again.encode("ROMEO:") == CHARS.encode("ROMEO:")
    assert tokenizer_from_info(BPETokenizer().to_info()).encode("Hello world") == [15496, 995]
    with pytest.raises(ValueError, match="describes no text tokenizer"):
        tokenizer_from_info({"kind": "images"})
    with pytest.raises(ValueError, match="unknown tokenizer 'wordpiece'"):
        load_tokenizer("wordpiece")


# ---------------------------------------------------------------- sources and token streams

def test_shakespeare_corpus_is_split_90_10_memory_mapped_and_cached(tmp_path, monkeypatch):
    c = load_corpus(SHAKESPEARE, "char", cache_dir=tmp_path)
    assert isinstance(c.tokens, np.memmap) and c.tokens.dtype == np.uint16
    assert len(c.tokens) == 1_115_394 and c.tokenizer.vocab_size == 65
    assert len(c.train) == 1_003_854 and len(c.val) == 111_540  # nanoGPT's int(n * 0.9)
    assert c.tokenizer.decode(c.val[:15]) == SHAKESPEARE_TEXT[1_003_854:1_003_854 + 15]
    assert c.sha256 == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    # the second load reads the cache, encoding nothing
    monkeypatch.setattr(corpus, "_encode_to_cache", lambda *a: pytest.fail("encoded again"))
    again = load_corpus(SHAKESPEARE, "char", cache_dir=tmp_path)
    assert again.cache_path == c.cache_path and np.array_equal(again.tokens, c.tokens)


def test_a_changed_source_is_encoded_again(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text("abc abc\n" * 50)
    first = load_corpus(src, "char", cache_dir=tmp_path / "cache")
    src.write_text("xyz xyz\n" * 60)
    second = load_corpus(src, "char", cache_dir=tmp_path / "cache")
    assert second.cache_path != first.cache_path
    assert second.tokenizer.chars == "\n xyz" and len(second.tokens) == 480


def test_bpe_stream_encoded_in_pieces_equals_encoding_the_whole(tmp_path, monkeypatch, bpe):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    monkeypatch.setattr(reading, "_CHUNK_BYTES", 3000)  # many chunk boundaries inside 60 kB
    monkeypatch.setattr(corpus, "_CHUNK_BYTES", 3000)  # and _Pieces, as when text.py held the one constant
    folder = tmp_path / "plays"
    folder.mkdir()
    (folder / "a.txt").write_text(SHAKESPEARE_TEXT[:30_000])
    (folder / "b.txt").write_text(SHAKESPEARE_TEXT[30_000:60_000])
    (folder / ".hidden").write_text("not read")
    c = load_corpus(folder, "gpt2", cache_dir=tmp_path / "cache")
    # Every tokenizer reads the same text (a.txt lacks a final newline: one is put there, and GPT-2's
    # <|endoftext|> between the files), split at 90% of its characters, each side encoded on its own.
    a, b = SHAKESPEARE_TEXT[:30_000] + "\n", SHAKESPEARE_TEXT[30_000:60_000]
    at = int((len(a) + len(b)) * 0.9) - len(a)
    train = bpe.encode(a) + [50256] + bpe.encode(b[:at])
    assert c.tokens.tolist() == train + bpe.encode(b[at:]) and c.split == len(train)
    assert [p.split("/")[-1] for p in c.files] == ["a.txt", "b.txt"]


def test_a_folder_of_text_joins_files_with_newlines(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "1.txt").write_text("first")
    (tmp_path / "d" / "2.txt").write_text("second\n")
    assert read_text(tmp_path / "d") == "first\nsecond\n"
    c = load_corpus(tmp_path / "d", "char", cache_dir=tmp_path / "cache")
    assert c.tokenizer.decode(c.tokens) == "first\nsecond\n"


def test_non_utf8_text_and_missing_sources_are_named(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("olá mundo".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.txt is not UTF-8 text: the byte at offset 2 cannot be decoded"):
        load_corpus(bad, "char", cache_dir=tmp_path / "cache")
    with pytest.raises(DataError, match=r"no text at .*nowhere: expected a UTF-8 text file, a folder"):
        resolve_text(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no text files"):
        resolve_text(tmp_path / "empty")


def test_an_encoding_that_fails_midway_leaves_no_token_file(tmp_path, monkeypatch):
    # The BPE pass writes tokens.bin as it reads: a bad byte in the second file comes after the first
    # file's tokens were written, and they must not be left behind as a token file.
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("To be, or not to be\n" * 50)
    (tmp_path / "d" / "b.txt").write_bytes("olá".encode("latin-1"))
    with pytest.raises(DataError, match=r"b.txt is not UTF-8 text: the byte at offset 2"):
        load_corpus(tmp_path / "d", "gpt2", cache_dir=tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_the_name_shakespeare_resolves_like_the_image_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED_DATA))
    assert resolve_text("shakespeare", cache_dir=tmp_path) == [SHAKESPEARE]
    # no local copy: a checksummed download into the cache
    monkeypatch.setenv("ANYFORMER_DATA", str(tmp_path / "empty"))
    calls = []

    def fake_download(url, dest, sha):
        calls.append((url, sha))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(SHAKESPEARE.read_bytes())
        return dest
    monkeypatch.setattr(sources, "_download", fake_download)
    got = resolve_text("tinyshakespeare", cache_dir=tmp_path / "cache")
    assert got == [tmp_path / "cache" / "tinyshakespeare" / "input.txt"]
    assert calls == [("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                      "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed")]
    assert resolve_text("shakespeare", cache_dir=tmp_path / "cache") == got and len(calls) == 1  # cached now
    with pytest.raises(DataError, match="downloads are off; pass --data PATH .* set ANYFORMER_DATA"):
        resolve_text("shakespeare", cache_dir=tmp_path / "other", allow_download=False)

    def failed_download(url, dest, sha):
        raise DataError(f"download failed: {url} -> no route to host")
    monkeypatch.setattr(sources, "_download", failed_download)
    with pytest.raises(DataError, match=r"^shakespeare text not found and not downloadable: pass --data PATH .*"
                                        r"ANYFORMER_DATA .*tinyshakespeare/input.txt \(the download said: download failed"):
        resolve_text("shakespeare", cache_dir=tmp_path / "third")
    # a local copy that is not the expected text is refused
    (tmp_path / "bad" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "bad" / "tinyshakespeare" / "input.txt").write_text("To be or not")
    monkeypatch.setenv("ANYFORMER_DATA", str(tmp_path / "bad"))
    with pytest.raises(DataError, match="is not the expected shakespeare text: sha256"):
        resolve_text("shakespeare", cache_dir=tmp_path / "cache")
