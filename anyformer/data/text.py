"""Text for language models: sources, tokenizers, and memory-mapped token streams.

A text source is a UTF-8 file, a folder of them (every non-hidden file below it, in sorted path
order), or the name ``shakespeare`` (Tiny Shakespeare), which resolves like the image datasets:
``$ANYFORMER_DATA/tinyshakespeare/input.txt``, then ``<cache>/tinyshakespeare/input.txt``, then a
checksummed download of karpathy's char-rnn file into the cache.

Two tokenizers: `CharTokenizer` (one id per character of the training alphabet; the alphabet is
saved with the run) and `BPETokenizer` (GPT-2's byte-level BPE through tiktoken, read from the
local ``r50k_base.tiktoken`` when one is found, else tiktoken's own cache/download).

`load_corpus` encodes a source once, in chunks, into ``<cache>/text/<key>/tokens.bin`` (uint16, or
uint32 for vocabularies over 65,536), keyed by the files' paths, sizes, mtimes and the tokenizer;
later loads memory-map that file, so a corpus larger than memory can be trained on. The first
``1 - val_fraction`` of the tokens are the training split, the rest validation (nanoGPT's split).
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from .download import download as _download
from .download import sha256_file
from .errors import DataError

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

# GPT-2's vocabulary in tiktoken's format, as pinned by tiktoken itself.
GPT2_TIKTOKEN_FILE = "r50k_base.tiktoken"
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_EOT = 50256
# GPT-2's pre-tokenizer (what tiktoken calls r50k_pat_str, written without possessive quantifiers).
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _default_cache_dir() -> Path:
    from .vision import default_cache_dir
    return default_cache_dir()


# --------------------------------------------------------------------------- tokenizers

class StreamDecoder:
    """Turns token ids into text as they arrive, holding back the bytes of an unfinished character.

    `feed(ids)` returns the text that is complete so far; `flush()` the rest (a character cut off
    at the end becomes U+FFFD).
    """

    def __init__(self, token_bytes) -> None:
        self._bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: Iterable[int]) -> str:
        return self._utf8.decode(b"".join(self._bytes(int(i)) for i in ids))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class CharTokenizer:
    """One id per character of an alphabet (ids in the alphabet's sorted order, like nanoGPT's)."""

    kind = "char"

    def __init__(self, chars: str | Iterable[str]) -> None:
        chars = "".join(sorted(set(chars)))
        if not chars:
            raise ValueError("a character tokenizer needs at least one character")
        self.chars = chars
        self._index = {c: i for i, c in enumerate(chars)}
        self._codepoints = np.array([ord(c) for c in chars], dtype=np.uint32)  # sorted, for searchsorted

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(set(text))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> np.ndarray:
        """Vectorised `encode`: (N,) int64 ids."""
        cps = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
        if cps.size == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self._codepoints, cps).clip(max=len(self.chars) - 1)
        bad = np.flatnonzero(self._codepoints[pos] != cps)
        if bad.size:
            i = int(bad[0])
            ch = text[i]
            raise ValueError(f"character {ch!r} (U+{ord(ch):04X}) at position {i} is not in the tokenizer's "
                             f"alphabet of {len(self.chars)} characters (the characters of the training text)")
        return pos.astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        for pos, i in enumerate(ids):
            if not 0 <= i < len(self.chars):
                raise ValueError(f"token id {i} at position {pos} is outside the vocabulary [0, {len(self.chars)})")
        return "".join(self.chars[i] for i in ids)

    def decoder(self) -> StreamDecoder:
        return StreamDecoder(lambda i: self.decode([i]).encode())

    def to_info(self) -> dict[str, Any]:
        return {"tokenizer": "char", "vocab_size": self.vocab_size, "chars": self.chars}

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class BPETokenizer:
    """GPT-2's byte-level BPE (50,257 tokens, <|endoftext|> = 50256) through tiktoken.

    `encode` treats special-token text such as "<|endoftext|>" as ordinary text, so a prompt or a
    corpus cannot inject control tokens; `eot` is the id to put between documents.
    """

    kind = "gpt2"

    def __init__(self, encoding=None, *, path: str | os.PathLike[str] | None = None) -> None:
        self.encoding = encoding if encoding is not None else gpt2_encoding(path)
        self.eot = self.encoding.eot_token

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_array(self, text: str) -> np.ndarray:
        return np.asarray(self.encoding.encode_ordinary(text), dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """Whole-sequence decode; bytes that do not form UTF-8 become U+FFFD."""
        ids = [int(i) for i in ids]
        for pos, i in enumerate(ids):
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} at position {pos} is outside the vocabulary [0, {self.vocab_size})")
        return self.encoding.decode(ids, errors="replace")

    def decoder(self) -> StreamDecoder:
        """Incremental decoding for streaming: a character split over tokens is printed once whole."""
        return StreamDecoder(self.encoding.decode_single_token_bytes)

    def to_info(self) -> dict[str, Any]:
        return {"tokenizer": "gpt2", "vocab_size": self.vocab_size}

    def __repr__(self) -> str:
        return f"BPETokenizer(gpt2, vocab_size={self.vocab_size})"


def _gpt2_file(path: str | os.PathLike[str] | None) -> Path | None:
    """The local r50k_base.tiktoken: `path` (a file or a folder holding it), else $ANYFORMER_DATA/gpt2/,
    else <cache>/gpt2/. None when there is none (tiktoken's own cache/download is used then)."""
    if path is not None:
        p = Path(path).expanduser()
        p = p / GPT2_TIKTOKEN_FILE if p.is_dir() else p
        if not p.is_file():
            raise DataError(f"no GPT-2 BPE file at {p}: expected {GPT2_TIKTOKEN_FILE} (sha256 {GPT2_TIKTOKEN_SHA256})")
        return p
    env = os.environ.get("ANYFORMER_DATA")
    for root in ([Path(env).expanduser()] if env else []) + [_default_cache_dir()]:
        p = root / "gpt2" / GPT2_TIKTOKEN_FILE
        if p.is_file():
            return p
    return None


@functools.lru_cache(maxsize=4)
def _gpt2_encoding_cached(path: str | None):
    import tiktoken
    if path is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # noqa: BLE001 - tiktoken raises several kinds when offline
            raise DataError(f"cannot load GPT-2's BPE through tiktoken ({type(e).__name__}: {e}); put "
                            f"{GPT2_TIKTOKEN_FILE} in $ANYFORMER_DATA/gpt2/ or {_default_cache_dir() / 'gpt2'}") from None
    got = sha256_file(path)
    if got != GPT2_TIKTOKEN_SHA256:
        raise DataError(f"{path} is not GPT-2's {GPT2_TIKTOKEN_FILE}: sha256 {got}, expected {GPT2_TIKTOKEN_SHA256}")
    from tiktoken.load import load_tiktoken_bpe
    ranks = load_tiktoken_bpe(path, expected_hash=GPT2_TIKTOKEN_SHA256)
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT_STR, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": GPT2_EOT}, explicit_n_vocab=GPT2_EOT + 1)


def gpt2_encoding(path: str | os.PathLike[str] | None = None):
    """GPT-2's tiktoken.Encoding, from the local file when one is found (checksum verified)."""
    local = _gpt2_file(path)
    return _gpt2_encoding_cached(str(local.resolve()) if local is not None else None)


def load_tokenizer(spec: str, text: str | None = None):
    """"char" (built from `text`), "gpt2", or a path to GPT-2's r50k_base.tiktoken (or its folder)."""
    if spec == "char":
        if text is None:
            raise ValueError("a character tokenizer is built from its training text; pass text=")
        return CharTokenizer.from_text(text)
    if spec in ("gpt2", "bpe", "r50k_base"):
        return BPETokenizer()
    if Path(spec).expanduser().exists():
        return BPETokenizer(path=spec)
    raise ValueError(f"unknown tokenizer {spec!r}; expected 'char', 'gpt2', or the path of {GPT2_TIKTOKEN_FILE}")


def tokenizer_from_info(info: dict[str, Any]):
    """The tokenizer a run was trained with, from the "data" section of its config.json."""
    kind = info.get("tokenizer") if isinstance(info, dict) else None
    if kind == "char":
        chars = info.get("chars")
        if not isinstance(chars, str) or not chars:
            raise ValueError("the run's character tokenizer has no alphabet saved ('chars' is missing in config.json)")
        return CharTokenizer(chars)
    if kind == "gpt2":
        return BPETokenizer()
    raise ValueError(f"the run directory describes no text tokenizer (data.tokenizer = {kind!r}); expected a "
                     f"language model run written by `anyformer train` with a text recipe")


# --------------------------------------------------------------------------- text sources

def resolve_text(spec: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                 allow_download: bool = True) -> list[Path]:
    """The files of a text source, in the order they are read."""
    key = _ALIASES.get(str(spec).lower()) if isinstance(spec, str) else None
    if key is not None and not Path(spec).exists():
        return [_resolve_named(key, Path(cache_dir) if cache_dir else _default_cache_dir(), allow_download)]
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
    if not allow_download:
        raise DataError(f"{key} not found in $ANYFORMER_DATA/{folder}/ or {dest.parent}, and downloads are off; "
                        f"put {name} (sha256 {sha}) there or pass a path")
    return _download(url, dest, sha)


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
    cache_root = Path(cache_dir).expanduser() if cache_dir else _default_cache_dir()
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
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tokens.", suffix=".part")
    n = 0
    try:
        with os.fdopen(fd, "wb") as out:
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
                    sha.update(text.encode())
                    ids = tok.encode_array(text).astype(dtype)
                    out.write(ids.tobytes())
                    n += len(ids)
                    last = text[-1]
        os.replace(tmp, folder / "tokens.bin")
    finally:
        Path(tmp).unlink(missing_ok=True)
    meta = {"version": _CACHE_VERSION, "tokenizer": tok.kind, "n_tokens": n, "dtype": np.dtype(dtype).name,
            "files": [str(p) for p in files], "sha256": sha.hexdigest()}
    if tok.kind == "char":
        meta["chars"] = tok.chars
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".meta.", suffix=".part")
    with os.fdopen(fd, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, folder / "meta.json")  # written last: its presence marks a complete cache
    return meta
