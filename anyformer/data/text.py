"""Text for language models: sources and memory-mapped token streams (tokenizers: `tokenizers`).

A text source is a UTF-8 file, a folder of them (every non-hidden file below it, in sorted path
order), or the name ``shakespeare`` (Tiny Shakespeare), which resolves like the image datasets:
``$ANYFORMER_DATA/tinyshakespeare/input.txt``, then ``<cache>/tinyshakespeare/input.txt``, then a
checksummed download of karpathy's char-rnn file into the cache.

`load_corpus` encodes a source once, in chunks, into ``<cache>/text/<key>/tokens.bin`` (uint16, or
uint32 for vocabularies over 65,536), keyed by the files' paths, sizes, mtimes and the tokenizer;
later loads memory-map that file, so a corpus larger than memory can be trained on. The first
``1 - val_fraction`` of the tokens are the training split, the rest validation (nanoGPT's split).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from ..files import atomic_write, atomic_write_text, sha256_file
from .download import download as _download
from .errors import DataError
from .registry import default_cache_dir
# Re-exported: `anyformer.data.text` has always offered the tokenizers too.
from .tokenizers import (BPETokenizer, CharTokenizer, StreamDecoder, load_tokenizer,
                         tokenizer_from_info)

__all__ = [
    "TEXT_NAMES",
    "BPETokenizer",
    "CharTokenizer",
    "StreamDecoder",
    "TokenCorpus",
    "load_corpus",
    "load_tokenizer",
    "read_text",
    "resolve_text",
    "tokenizer_from_info",
]

# Bump when the token-file layout or the encoding rules change, so stale caches are ignored.
_CACHE_VERSION = 1
_CHUNK_BYTES = 16 << 20

TEXT_NAMES: tuple[str, ...] = ("shakespeare",)
_ALIASES = {"shakespeare": "shakespeare", "tinyshakespeare": "shakespeare",
            "tiny-shakespeare": "shakespeare", "tiny_shakespeare": "shakespeare"}
# name -> (folder, file, url, sha256)
_NAMED = {
    "shakespeare": ("tinyshakespeare", "input.txt",
                    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}

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
        files = sorted(p for p in path.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not files:
            raise DataError(f"the folder {path} holds no text files (hidden files are skipped)")
        return files
    raise DataError(f"no text at {spec}: expected a UTF-8 text file, a folder of them, or one of the names "
                    f"{list(TEXT_NAMES)}")


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


def _read_chunks(path: Path) -> Iterator[str]:
    """Decoded text of a file in pieces of about 16 MiB; a byte that is not UTF-8 is an error naming it."""
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
    consumed = 0
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}") from None
    with f:
        while True:
            raw = f.read(_CHUNK_BYTES)
            final = not raw
            pending = len(utf8.getstate()[0])
            try:
                text = utf8.decode(raw, final=final)
            except UnicodeDecodeError as e:
                offset = consumed - pending + e.start
                raise DataError(f"{path} is not UTF-8 text: the byte at offset {offset} cannot be decoded "
                                f"({e.reason}); convert it to UTF-8 or leave it out of the folder") from None
            consumed += len(raw)
            if text:
                yield text
            if final:
                return


def read_text(spec: str | os.PathLike[str], **kwargs: Any) -> str:
    """A whole text source in memory (files joined with a newline where one is missing)."""
    parts = []
    for path in resolve_text(spec, **kwargs):
        text = "".join(_read_chunks(path))
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(text)
    return "".join(parts)


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


def _tokenizer_key(spec: str) -> str:
    return spec if spec in ("char", "gpt2") else ("gpt2" if spec in ("bpe", "r50k_base") else "gpt2-file")


def load_corpus(spec: str | os.PathLike[str], tokenizer: str = "char", *, val_fraction: float = 0.1,
                cache_dir: str | os.PathLike[str] | None = None, allow_download: bool = True) -> TokenCorpus:
    """Tokenize a text source once (cached), then memory-map its tokens.

    Files are read in sorted order; the character tokenizer joins them with a newline where one is
    missing, the BPE tokenizer puts <|endoftext|> between them (GPT-2's document separator).
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    cache_root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    files = resolve_text(spec, cache_dir=cache_root, allow_download=allow_download)
    tok_key = _tokenizer_key(str(tokenizer))
    stats = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, tok_key, stats]).encode()).hexdigest()[:20]
    label = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(str(spec)).name or "text")[:40]
    folder = cache_root / "text" / f"{label}-{tok_key}-{key}"
    meta_path = folder / "meta.json"
    meta = _read_meta(meta_path)
    if meta is None:
        meta = _encode_to_cache(files, str(tokenizer), folder)
    tok = CharTokenizer(meta["chars"]) if tok_key == "char" else load_tokenizer(str(tokenizer))
    n = int(meta["n_tokens"])
    if n < 2:
        raise DataError(f"the text source {spec} has {n} token(s); a language model needs at least a few hundred")
    tokens = np.memmap(folder / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r", shape=(n,))
    return TokenCorpus(tok, tokens, int(n * (1 - val_fraction)), str(spec), [str(p) for p in files],
                       meta.get("sha256", ""), folder)


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
    return meta


def _bpe_pieces(text_chunks: Iterator[str]) -> Iterator[str]:
    """Re-cut chunks after a lone newline (non-space on both sides): GPT-2's pre-tokenizer makes such a
    newline a piece of its own, so encoding piece by piece gives exactly the tokens of the whole text."""
    carry = ""
    for chunk in text_chunks:
        buf = carry + chunk
        cut = buf.rfind("\n", 1, len(buf) - 1)
        while cut >= 1 and (buf[cut + 1].isspace() or buf[cut - 1].isspace()):
            cut = buf.rfind("\n", 1, cut)
        if cut < 0 and len(buf) < 4 * _CHUNK_BYTES:
            carry = buf
            continue
        cut = cut if cut >= 0 else len(buf) - 1   # one enormous line: cut anywhere rather than hold it all
        yield buf[:cut + 1]
        carry = buf[cut + 1:]
    if carry:
        yield carry


def _encode_to_cache(files: list[Path], tokenizer: str, folder: Path) -> dict[str, Any]:
    sha = hashlib.sha256()
    if tokenizer == "char":
        chars: set[str] = set()
        for p in files:
            for text in _read_chunks(p):
                chars.update(text)
        if len(files) > 1:
            chars.add("\n")
        if not chars:
            raise DataError(f"the text source ({files[0]}{' ...' if len(files) > 1 else ''}) is empty")
        tok = CharTokenizer(chars)
    else:
        tok = load_tokenizer(tokenizer)
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    n = 0

    def write_tokens(out: IO[bytes]) -> None:
        nonlocal n
        last = "\n"
        for k, p in enumerate(files):
            if k and tok.kind == "char" and last != "\n":
                out.write(np.array(tok.encode("\n"), dtype=dtype).tobytes())
                n += 1
            elif k and tok.kind != "char":
                out.write(np.array([tok.eot], dtype=dtype).tobytes())
                n += 1
            chunks = _read_chunks(p)
            for text in (chunks if tok.kind == "char" else _bpe_pieces(chunks)):
                # The source's checksum is taken of the text as it streams by: it is read only once.
                sha.update(text.encode())
                ids = tok.encode_array(text).astype(dtype)
                out.write(ids.tobytes())
                n += len(ids)
                last = text[-1]

    atomic_write(folder / "tokens.bin", write_tokens)
    meta = {"version": _CACHE_VERSION, "tokenizer": tok.kind, "n_tokens": n, "dtype": np.dtype(dtype).name,
            "files": [str(p) for p in files], "sha256": sha.hexdigest()}
    if tok.kind == "char":
        meta["chars"] = tok.chars
    atomic_write_text(folder / "meta.json", json.dumps(meta))  # written last: its presence marks a complete cache
    return meta
