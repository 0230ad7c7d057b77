"""Text in any Unicode, as users have it: UTF-8 with or without a byte-order mark, UTF-16 with one,
every script and emoji; files that are not text refused (one file) or skipped (in a folder)."""
import codecs
import warnings

import numpy as np
import pytest

from anyformer.data import DataError, DataWarning
from anyformer.data.text.corpus import load_corpus
from anyformer.data.text.read import read_text
from anyformer.data.text.sources import resolve_text

TEXTS = {
    "greek": "Καλημέρα κόσμε· η γρήγορη καφέ αλεπού.\n",
    "russian": "Съешь же ещё этих мягких французских булок.\n",
    "japanese": "いろはにほへと ちりぬるを、日本語の文章です。\n",
    "chinese": "我能吞下玻璃而不伤身体。\n",
    "arabic": "أنا قادر على أكل الزجاج و هذا لا يؤلمني.\n",
    "emoji": "Emoji 🙂🎉 a flag 🇯🇵, a family 👨‍👩‍👧, and 𝄞 beyond the basic plane.\n",
}
ALL = "".join(TEXTS.values())


def _write(path, text, encoding, bom=b""):
    path.write_bytes(bom + text.encode(encoding))
    return path


@pytest.mark.parametrize("encoding,bom", [("utf-8", b""), ("utf-8", codecs.BOM_UTF8),
                                          ("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE)])
def test_every_script_reads_back_exactly_in_utf8_and_utf16(tmp_path, encoding, bom):
    path = _write(tmp_path / "t.txt", ALL * 3, encoding, bom)
    assert read_text(path) == ALL * 3  # the byte-order mark is not text
    c = load_corpus(path, "char", cache_dir=tmp_path / "cache")
    assert c.tokenizer.decode(c.tokens) == ALL * 3 and "\ufeff" not in c.tokenizer.chars
    assert "🙂" in c.tokenizer.chars and "𝄞" in c.tokenizer.chars  # one id per code point, astral ones too


def test_a_byte_order_mark_in_each_file_of_a_folder_is_dropped(tmp_path):
    (tmp_path / "d").mkdir()
    for k, (name, text) in enumerate(TEXTS.items()):
        _write(tmp_path / "d" / f"{k}-{name}.txt", text, "utf-16-le" if k % 2 else "utf-8",
               codecs.BOM_UTF16_LE if k % 2 else codecs.BOM_UTF8)
    assert read_text(tmp_path / "d") == ALL


def test_chunk_boundaries_inside_a_character_change_nothing(tmp_path, monkeypatch):
    from anyformer.data.text import read as reading
    monkeypatch.setattr(reading, "_CHUNK_BYTES", 7)  # cuts through 2-, 3- and 4-byte characters and UTF-16 pairs
    for encoding, bom in (("utf-8", codecs.BOM_UTF8), ("utf-16-le", codecs.BOM_UTF16_LE)):
        assert read_text(_write(tmp_path / f"{encoding}.txt", ALL, encoding, bom)) == ALL


def test_invalid_utf8_is_refused_naming_the_file_and_byte_offset(tmp_path):
    good = "日本語 ok\n".encode()
    path = tmp_path / "mixed.txt"
    path.write_bytes(codecs.BOM_UTF8 + good + b"caf\xe9\n")  # Latin-1 after valid UTF-8 (and a BOM)
    offset = 3 + len(good) + 3
    with pytest.raises(DataError, match=rf"mixed.txt is not UTF-8 text: the byte at offset {offset} cannot be decoded"):
        load_corpus(path, "char", cache_dir=tmp_path / "cache")


def test_a_binary_file_is_refused_naming_the_nul_bytes_offset(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes("header ✓ ".encode() + b"\x00\x01\x02")
    with pytest.raises(DataError, match=r"weights.bin is not text: a NUL byte at offset 11 \(a binary file\?\); "
                                        r"expected UTF-8 text, or UTF-16 with a byte-order mark"):
        read_text(path)
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(DataError, match=r"photo.png is not text: the byte at offset 0 cannot be decoded, and the file "
                                        r"starts like a binary one \(an image, an archive, a PDF\)"):
        load_corpus(tmp_path / "photo.png", "char", cache_dir=tmp_path / "cache")
    # UTF-16 without its byte-order mark looks like this too, and is named the same way
    _write(tmp_path / "nobom.txt", "hi", "utf-16-le")
    with pytest.raises(DataError, match="nobom.txt is not text: a NUL byte at offset 1"):
        read_text(tmp_path / "nobom.txt")
    _write(tmp_path / "odd.txt", "abc", "utf-16-le", codecs.BOM_UTF16_LE)
    with open(tmp_path / "odd.txt", "ab") as f:
        f.write(b"\x41")  # half of a UTF-16 unit at the end
    with pytest.raises(DataError, match=r"odd.txt is not UTF-16 text: the byte at offset 8 cannot be decoded"):
        read_text(tmp_path / "odd.txt")


def test_a_folder_skips_stray_files_in_one_warning_and_reads_the_text(tmp_path):
    d = tmp_path / "notes"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text(TEXTS["greek"], encoding="utf-8")
    (d / "sub" / "b.md").write_text(TEXTS["emoji"], encoding="utf-8")
    (d / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    (d / "scan.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(64))
    (d / "paper.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj")  # no NUL near its start
    (d / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(32))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        files = resolve_text(d)
    assert [p.relative_to(d).as_posix() for p in files] == ["a.txt", "sub/b.md"]
    lines = [str(w.message) for w in seen if issubclass(w.category, DataWarning)]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "skipped 4 file(s) that are not text" in lines[0] and "read 2 text file(s)" in lines[0]
    for name in (".DS_Store", "paper.pdf", "photo.png", "scan.jpg"):
        assert name in lines[0]
    with pytest.warns(DataWarning):
        c = load_corpus(d, "char", cache_dir=tmp_path / "cache")
    assert c.tokenizer.decode(c.tokens) == TEXTS["greek"] + TEXTS["emoji"]


def test_a_folder_of_text_only_warns_of_nothing_and_a_folder_of_binaries_is_refused(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.txt").write_text(TEXTS["chinese"], encoding="utf-8")
    (tmp_path / "ok" / "b.txt").write_bytes(codecs.BOM_UTF16_LE + TEXTS["arabic"].encode("utf-16-le"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(resolve_text(tmp_path / "ok")) == 2
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(DataError, match=r"pics holds no text files \(1 hidden or binary files skipped\)"):
        resolve_text(tmp_path / "pics")


def test_a_latin1_file_in_a_folder_is_not_skipped_but_named(tmp_path):
    # Text in another encoding is the user's text: it is refused with the byte to fix, never dropped.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("fine\n", encoding="utf-8")
    (tmp_path / "d" / "b.txt").write_bytes("olá".encode("latin-1"))
    assert len(resolve_text(tmp_path / "d")) == 2
    with pytest.raises(DataError, match=r"b.txt is not UTF-8 text: the byte at offset 2"):
        read_text(tmp_path / "d")


def test_every_tokenizer_splits_the_same_text_at_the_same_character(tmp_path, monkeypatch, shared_data):
    monkeypatch.setenv("ANYFORMER_DATA", str(shared_data))
    path = _write(tmp_path / "t.txt", ALL * 20, "utf-8", codecs.BOM_UTF8)
    at = int(len(ALL * 20) * 0.9)
    for kind in ("char", "bpe", "gpt2"):
        c = load_corpus(path, kind, cache_dir=tmp_path / "cache")
        tok = c.tokenizer
        assert tok.decode(c.train) == (ALL * 20)[:at] and tok.decode(c.val) == (ALL * 20)[at:], kind
        lengths = tok.token_byte_lengths()[np.asarray(c.tokens, dtype=np.int64)]
        assert int(lengths.sum()) == len((ALL * 20).encode()), kind
