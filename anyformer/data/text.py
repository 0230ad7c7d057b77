"""Text for language models: sources and memory-mapped token streams (tokenizers: `tokenizers`).

A text source is a text file, a folder of them (every file below it that is text, in sorted path
order), or the name ``shakespeare`` (Tiny Shakespeare), which resolves like the image datasets:
``$ANYFORMER_DATA/tinyshakespeare/input.txt``, then ``<cache>/tinyshakespeare/input.txt``, then a
checksummed download of karpathy's char-rnn file into the cache. Text is UTF-8, with or without a
byte-order mark, or UTF-16 with one; any script, emoji included. A file that is not text (a NUL
byte, a byte that does not decode) is refused in one line naming it and the byte's offset; in a
folder, hidden files and binary ones (images, archives) are skipped and counted in one DataWarning.

`load_corpus` encodes a source once, in chunks, into ``<cache>/text/<key>/tokens.bin`` (uint16, or
uint32 for vocabularies over 65,536), keyed by the files' paths, sizes, mtimes, the tokenizer and the
split; later loads memory-map that file, so a corpus larger than memory can be trained on. The text
is split first: its first ``1 - val_fraction`` of characters are the training split, the rest
validation (nanoGPT's split, the same text whatever the tokenizer), and each part is encoded on its
own, so a BPE learned from the training text (``bpe``) never sees the validation text.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import numpy as np

from ..files import atomic_write, atomic_write_text, sha256_file
from .bpe import TOKENIZER_FILE, HFTokenizer, bpe_vocab_size, learn_bpe, read_tokenizer_file
from .download import download as _download
from .errors import DataError, DataWarning
from .locations import default_cache_dir
# Re-exported: `anyformer.data.text` has always offered the tokenizers too.
from .tokenizers import (BPETokenizer, CharTokenizer, StreamDecoder, load_tokenizer,
                         tokenizer_from_info)

__all__ = [
    "TEXT_NAMES",
    "BPETokenizer",
    "CharTokenizer",
    "HFTokenizer",
    "StreamDecoder",
    "TokenCorpus",
    "load_corpus",
    "load_tokenizer",
    "read_text",
    "resolve_text",
    "tokenizer_from_info",
]

# Bump when the token-file layout or the encoding rules change, so stale caches are ignored.
# 2: the split is made on the text (every tokenizer), recorded in meta.json; learned BPE; BOMs.
_CACHE_VERSION = 2
_CHUNK_BYTES = 16 << 20
_SNIFF_BYTES = 8192  # what is read of each file of a folder to tell text from a stray binary file

TEXT_NAMES: tuple[str, ...] = ("shakespeare",)
_ALIASES = {"shakespeare": "shakespeare", "tinyshakespeare": "shakespeare",
            "tiny-shakespeare": "shakespeare", "tiny_shakespeare": "shakespeare"}
# name -> (folder, file, url, sha256)
_NAMED = {
    "shakespeare": ("tinyshakespeare", "input.txt",
                    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}
# Byte-order marks -> (codec, the mark's length). UTF-32's marks are not among them: FF FE 00 00 reads
# as UTF-16 and is then refused at its NUL character.
_BOMS = ((codecs.BOM_UTF8, "utf-8", 3), (codecs.BOM_UTF16_LE, "utf-16-le", 2), (codecs.BOM_UTF16_BE, "utf-16-be", 2))
# The first bytes of binary files that may hold no NUL byte near their start (archives, PDF, images).
_BINARY_MAGIC = (b"%PDF-", b"PK\x03\x04", b"\x1f\x8b", b"\x89PNG", b"GIF87a", b"GIF89a", b"\xff\xd8\xff",
                 b"\xfd7zXZ", b"7z\xbc\xaf", b"Rar!\x1a\x07")

# --------------------------------------------------------------------------- text sources

def resolve_text(spec: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                 allow_download: bool = True) -> list[Path]:
    """The files of a text source, in the order they are read."""
    key = _ALIASES.get(str(spec).lower()) if isinstance(spec, str) else None
    if key is not None and not Path(spec).exists():
        return [_resolve_named(key, Path(cache_dir) if cache_dir else default_cache_dir(), allow_download)]
    path = Path(spec).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        return _folder_texts(path)
    raise DataError(f"no text at {spec}: expected a UTF-8 text file, a folder of them, or one of the names "
                    f"{list(TEXT_NAMES)}")


def _folder_texts(folder: Path) -> list[Path]:
    """The text files below `folder`, sorted; hidden and binary files are skipped, in one DataWarning."""
    files, skipped = [], []
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        rel = p.relative_to(folder)
        (skipped if any(part.startswith(".") for part in rel.parts) or _looks_binary(p) else files).append(rel)
    if not files:
        raise DataError(f"the folder {folder} holds no text files ({len(skipped)} hidden or binary files skipped)")
    if skipped:
        names = ", ".join(str(r) for r in skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        warnings.warn(f"{folder}: skipped {len(skipped)} file(s) that are not text (hidden, or binary such as "
                      f"images): {names}; read {len(files)} text file(s)", DataWarning, stacklevel=3)
    return [folder / r for r in files]


def _looks_binary(path: Path) -> bool:
    """A file whose first bytes say binary: a NUL byte (UTF-8 text never holds one; UTF-16 is known by
    its byte-order mark), or the signature of an archive, PDF or image. Text in another encoding
    (Latin-1) is not skipped: reading it fails, naming the byte, so the user can convert it."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False  # read later, and refused then with the reason
    return _binary_head(head)


def _binary_head(head: bytes) -> bool:
    if any(head.startswith(bom) for bom, _, _ in _BOMS):
        return False
    return b"\0" in head or head.startswith(_BINARY_MAGIC)


def _resolve_named(key: str, cache_root: Path, allow_download: bool) -> Path:
    folder, name, url, sha = _NAMED[key]
    env = os.environ.get("ANYFORMER_DATA")
    if env:
        p = Path(env).expanduser() / folder / name
        if p.is_file():
            got = sha256_file(p)
            if got != sha:
                raise DataError(f"{p} is not the expected {key} text: sha256 {got}, expected {sha}")
            return p
    dest = cache_root / folder / name
    if dest.is_file() and sha256_file(dest) == sha:
        return dest
    fix = (f"pass --data PATH (a text file or a folder of them), or set ANYFORMER_DATA to a folder that "
           f"holds {folder}/{name}")
    if not allow_download:
        raise DataError(f"{key} not found in $ANYFORMER_DATA/{folder}/ or {dest.parent}, and downloads are off; {fix}")
    try:
        return _download(url, dest, sha)
    except DataError as e:  # the fix the user can make comes first; the download's own reason after it
        raise DataError(f"{key} text not found and not downloadable: {fix} (the download said: {e})") from None


def _codec_of(path: Path, head: bytes) -> tuple[str, int]:
    """(the codec, the byte-order mark's length) of a file that starts with `head`: UTF-8 unless a mark says otherwise."""
    for bom, codec, n in _BOMS:
        if head.startswith(bom):
            return codec, n
    return "utf-8", 0


def _read_chunks(path: Path) -> Iterator[str]:
    """Decoded text of a file in pieces of about 16 MiB, without its byte-order mark; a byte that does
    not decode, or a NUL (a binary file), is an error naming the file and the byte's offset."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}") from None
    with f:
        codec, consumed = _codec_of(path, f.read(4))
        f.seek(consumed)
        decoder = codecs.getincrementaldecoder(codec)(errors="strict")
        while True:
            raw = f.read(_CHUNK_BYTES)
            final = not raw
            start = consumed - len(decoder.getstate()[0])  # the offset of this text's first byte
            try:
                text = decoder.decode(raw, final=final)
            except UnicodeDecodeError as e:
                name = "UTF-8" if codec == "utf-8" else "UTF-16"
                if start == consumed == 0 and _binary_head(raw[:_SNIFF_BYTES]):
                    raise DataError(f"{path} is not text: the byte at offset {e.start} cannot be decoded, and the "
                                    f"file starts like a binary one (an image, an archive, a PDF); expected UTF-8 "
                                    f"text, or UTF-16 with a byte-order mark") from None
                raise DataError(f"{path} is not {name} text: the byte at offset {start + e.start} cannot be decoded "
                                f"({e.reason}); convert it to UTF-8 or leave it out of the folder") from None
            nul = text.find("\0")
            if nul >= 0:
                offset = start + len(text[:nul].encode(codec))
                raise DataError(f"{path} is not text: a NUL byte at offset {offset} (a binary file?); expected UTF-8 "
                                f"text, or UTF-16 with a byte-order mark") from None
            consumed += len(raw)
            if text:
                yield text
            if final:
                return


class _FileEnd:
    """In a source's stream of text: the end of one file and the start of the next."""


class _Joint(str):
    """The newline put after a file that lacks one: text, but not the files' own (not in their checksum)."""


_FILE_END, _JOINT = _FileEnd(), _Joint("\n")


def _stream(files: list[Path]) -> Iterator[str | _FileEnd]:
    """A source's text in chunks, as `read_text` joins it: a newline after a file that lacks one, then
    `_FILE_END` between files (where a tokenizer with an end-of-text token puts it)."""
    last = "\n"
    for k, path in enumerate(files):
        if k:
            if last != "\n":
                yield _JOINT
                last = "\n"
            yield _FILE_END
        for text in _read_chunks(path):
            last = text[-1]
            yield text


def _split_stream(items: Iterable[str | _FileEnd], at: int) -> Iterator[tuple[int, str | _FileEnd]]:
    """(part, item): part 0 for the text before character `at`, 1 after; a chunk across `at` is cut there."""
    pos = 0
    for item in items:
        if isinstance(item, _FileEnd):
            yield (0 if pos < at else 1), item
            continue
        if pos < at < pos + len(item):
            yield 0, item[:at - pos]
            yield 1, item[at - pos:]
        else:
            yield (0 if pos + len(item) <= at and pos < at else 1), item
        pos += len(item)


def read_text(spec: str | os.PathLike[str], **kwargs: Any) -> str:
    """A whole text source in memory (files joined with a newline where one is missing)."""
    return "".join(t for t in _stream(resolve_text(spec, **kwargs)) if isinstance(t, str))


# --------------------------------------------------------------------------- token streams

@dataclass
class TokenCorpus:
    """A tokenized text source: all tokens (memory-mapped), and the train / validation views."""

    tokenizer: Any
    tokens: np.ndarray
    split: int                      # tokens[:split] train, tokens[split:] validation
    name: str
    files: list[str] = field(default_factory=list)
    sha256: str = ""                # of the source's bytes as read (files in order)
    cache_path: Path | None = None

    @property
    def train(self) -> np.ndarray:
        return self.tokens[:self.split]

    @property
    def val(self) -> np.ndarray:
        return self.tokens[self.split:]

    def info(self) -> dict[str, Any]:
        return {"dataset": self.name, "train_tokens": int(self.split),
                "val_tokens": int(len(self.tokens) - self.split), "source_sha256": self.sha256}


def _resolve_tokenizer(tokenizer: Any) -> Any:
    """--tokenizer's value as load_corpus uses it: "char", "bpe" and "gpt2" stay names (the first two
    are learned from the text), a file is read now; a tokenizer object (a run's own) is used as it is."""
    if not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    name = str(tokenizer)
    if name in ("char", "bpe", "gpt2"):
        return name
    if name == "r50k_base":
        return "gpt2"
    return load_tokenizer(name)


def _tokenizer_key(tok: Any) -> tuple[str, str]:
    """(the kind named in the cache folder, what identifies the tokenizer in the cache key)."""
    if isinstance(tok, str):
        if tok == "bpe":  # the learning rule and the library that learns: a change learns anew
            import tokenizers
            from . import bpe
            return "bpe", json.dumps(["bpe", bpe.VOCAB_PER_SQRT_BYTE, bpe.MIN_VOCAB, bpe.MAX_VOCAB, bpe.VOCAB_MULTIPLE,
                                      bpe.MIN_PAIR_FREQUENCY, tokenizers.__version__])
        return tok, tok
    if isinstance(tok, CharTokenizer):
        return "char", "char:" + hashlib.sha256(tok.chars.encode("utf-8", errors="surrogatepass")).hexdigest()
    if isinstance(tok, HFTokenizer):
        return tok.kind, "hf:" + tok.sha256
    return tok.kind, tok.kind  # GPT-2's: one vocabulary, checksum verified when read


def load_corpus(spec: str | os.PathLike[str], tokenizer: Any = "char", *, val_fraction: float = 0.1,
                cache_dir: str | os.PathLike[str] | None = None, allow_download: bool = True) -> TokenCorpus:
    """Tokenize a text source once (cached), then memory-map its tokens.

    `tokenizer`: "char" (the source's characters), "bpe" (learned from the training split), "gpt2", a
    tokenizer file, or a tokenizer object (a run's own: its text is then encoded, never relearned).
    The first `1 - val_fraction` of the text's characters are the training split (`val_fraction=1`:
    all of it is scored). Files are read in sorted order, joined with a newline where one is missing;
    a tokenizer with an end-of-text token (GPT-2's, a learned BPE's) also puts it between files.
    """
    if not 0 < val_fraction <= 1:
        raise ValueError(f"val_fraction must lie in (0, 1], got {val_fraction}")
    cache_root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    files = resolve_text(spec, cache_dir=cache_root, allow_download=allow_download)
    tok = _resolve_tokenizer(tokenizer)
    kind, ident = _tokenizer_key(tok)
    stats = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, ident, val_fraction, stats]).encode()).hexdigest()[:20]
    label = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(str(spec)).name or "text")[:40]
    folder = cache_root / "text" / f"{label}-{kind}-{key}"
    meta = _read_meta(folder / "meta.json")
    if meta is None:
        meta = _encode_to_cache(files, tok, folder, val_fraction)
    n = int(meta["n_tokens"])
    if n < 2:
        raise DataError(f"the text source {spec} has {n} token(s); a language model needs at least a few hundred")
    tokens = np.memmap(folder / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r", shape=(n,))
    return TokenCorpus(_cached_tokenizer(tok, meta, folder), tokens, int(meta["split"]), str(spec),
                       [str(p) for p in files], meta.get("sha256", ""), folder)


def _cached_tokenizer(tok: Any, meta: dict[str, Any], folder: Path) -> Any:
    """The tokenizer the cached tokens were encoded with."""
    if tok == "char":
        return CharTokenizer(meta["chars"])
    if tok == "bpe":
        return read_tokenizer_file(folder / TOKENIZER_FILE, "bpe")
    if tok == "gpt2":
        return load_tokenizer("gpt2")
    return tok


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    tokens = path.parent / "tokens.bin"
    if meta.get("version") != _CACHE_VERSION or not tokens.is_file():
        return None
    if tokens.stat().st_size != int(meta["n_tokens"]) * np.dtype(meta["dtype"]).itemsize:
        return None
    if meta.get("tokenizer") == "bpe" and not (path.parent / TOKENIZER_FILE).is_file():
        return None
    return meta


class _Pieces:
    """Cuts a stream of text into pieces that encode to the tokens of the whole: after a lone newline
    (non-space on both sides), which GPT-2's pre-tokenizer makes a piece of its own."""

    def __init__(self) -> None:
        self.carry = ""

    def feed(self, chunk: str) -> list[str]:
        buf = self.carry + chunk
        cut = buf.rfind("\n", 1, len(buf) - 1)
        while cut >= 1 and (buf[cut + 1].isspace() or buf[cut - 1].isspace()):
            cut = buf.rfind("\n", 1, cut)
        if cut < 0 and len(buf) < 4 * _CHUNK_BYTES:
            self.carry = buf
            return []
        cut = cut if cut >= 0 else len(buf) - 1   # one enormous line: cut anywhere rather than hold it all
        self.carry = buf[cut + 1:]
        return [buf[:cut + 1]]

    def flush(self) -> list[str]:
        rest, self.carry = self.carry, ""
        return [rest] if rest else []


def _source_name(files: list[Path]) -> str:
    return f"the text source ({files[0]}{' ...' if len(files) > 1 else ''})"


def _survey(files: list[Path], tok: Any) -> tuple[int, set[str]]:
    """One pass over the text: its length in characters and its alphabet. A run's character tokenizer
    is checked here: text with characters it never saw is refused, naming up to five of them."""
    length, chars, unseen = 0, set(), {}
    known = set(tok.chars) if isinstance(tok, CharTokenizer) else None
    for text in _stream(files):
        if isinstance(text, str):
            new = set(text) - chars
            if known is not None:
                for c in new - known:
                    unseen.setdefault(c, length + text.index(c))
            chars |= new
            length += len(text)
    if unseen:
        first = sorted(unseen, key=unseen.get)
        named = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in first[:5]) + (
            f" and {len(first) - 5} more" if len(first) > 5 else "")
        raise DataError(f"{_source_name(files)} holds {len(first)} character(s) the run's character tokenizer never "
                        f"saw: {named}; a character model scores only text in its alphabet of {len(tok.chars)} "
                        f"characters")
    if not length:
        raise DataError(f"{_source_name(files)} is empty")
    return length, chars


def _learned_bpe(files: list[Path], at: int) -> HFTokenizer:
    """A byte-level BPE learned from the text before character `at` only, its vocabulary derived from
    that text's UTF-8 bytes (`bpe_vocab_size`)."""
    def training_pieces() -> Iterator[str]:
        pieces = _Pieces()
        for part, item in _split_stream(_stream(files), at):
            if part:
                break
            yield from pieces.flush() if isinstance(item, _FileEnd) else pieces.feed(item)
        yield from pieces.flush()
    train_bytes = sum(len(p.encode("utf-8")) for p in training_pieces())
    return learn_bpe(training_pieces(), bpe_vocab_size(train_bytes))


def _encode_to_cache(files: list[Path], tokenizer: Any, folder: Path, val_fraction: float) -> dict[str, Any]:
    length, chars = _survey(files, tokenizer)
    at = int(length * (1 - val_fraction))  # nanoGPT's int(n * 0.9), counted in characters
    tok = (CharTokenizer(chars) if tokenizer == "char" else _learned_bpe(files, at) if tokenizer == "bpe"
           else load_tokenizer("gpt2") if tokenizer == "gpt2" else tokenizer)
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    sha = hashlib.sha256()
    n = split = 0
    eot = getattr(tok, "eot", None)
    char = isinstance(tok, CharTokenizer)

    def write_tokens(out: IO[bytes]) -> None:
        nonlocal n, split
        pieces, part_now = _Pieces(), 0

        def emit(texts: list[str]) -> None:
            nonlocal n
            for text in texts:
                ids = tok.encode_array(text).astype(dtype)
                out.write(ids.tobytes())
                n += len(ids)
        for part, item in _split_stream(_stream(files), at):
            if part != part_now:  # the split: the training text's last piece is encoded on its own
                emit(pieces.flush())
                split, part_now = n, part
            if isinstance(item, _FileEnd):
                emit(pieces.flush())
                if eot is not None and not char:
                    out.write(np.array([eot], dtype=dtype).tobytes())
                    n += 1
                continue
            if type(item) is str:  # the source's checksum is of its files' text as it streams by, read only once
                sha.update(item.encode())
            emit([item] if char else pieces.feed(item))
        emit(pieces.flush())
        if part_now == 0:
            split = n

    atomic_write(folder / "tokens.bin", write_tokens)
    meta = {"version": _CACHE_VERSION, "tokenizer": tok.kind, "n_tokens": n, "split": split, "length": length,
            "split_at": at, "dtype": np.dtype(dtype).name, "files": [str(p) for p in files], "sha256": sha.hexdigest()}
    if char:
        meta["chars"] = tok.chars
    if tokenizer == "bpe":
        atomic_write_text(folder / TOKENIZER_FILE, tok.to_json())
    atomic_write_text(folder / "meta.json", json.dumps(meta))  # written last: its presence marks a complete cache
    return meta
