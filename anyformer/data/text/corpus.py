"""Text for language models as memory-mapped token streams (where the text comes from: `sources`;
reading it: `read`; the tokenizers: `tokenizers` and `bpe`).

`load_corpus` encodes a source once, in chunks, into ``<cache>/text/<key>/tokens.bin`` (uint16, or
uint32 for vocabularies over 65,536), keyed by the files' paths, sizes, mtimes, the tokenizer and the
split; later loads memory-map that file, so a corpus larger than memory can be trained on. The text
is split first: its first ``1 - val_fraction`` of characters are the training split, the rest
validation (nanoGPT's split, the same text whatever the tokenizer), and each part is encoded on its
own, so a BPE learned from the training text (``bpe``) never sees the validation text.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from ...files import atomic_write, atomic_write_text
from ..errors import DataError
from ..locations import default_cache_dir
from .bpe import TOKENIZER_FILE, HFTokenizer, bpe_vocab_size, learn_bpe, read_tokenizer_file
from .read import _CHUNK_BYTES, _FileEnd, _split_stream, _stream
from .sources import resolve_text
from .tokenizers import CharTokenizer, load_tokenizer

__all__ = ["TokenCorpus", "load_corpus"]

# Bump when the token-file layout or the encoding rules change, so stale caches are ignored.
# 2: the split is made on the text (every tokenizer), recorded in meta.json; learned BPE; BOMs.
_CACHE_VERSION = 2


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
