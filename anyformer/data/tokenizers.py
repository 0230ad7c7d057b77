"""Tokenizers for language models: characters, and GPT-2's byte-level BPE.

`CharTokenizer` gives one id per character of the training alphabet (the alphabet is saved with
the run); `BPETokenizer` is GPT-2's byte-level BPE through tiktoken, read from the local
``r50k_base.tiktoken`` when one is found, else tiktoken's own cache/download.
"""

from __future__ import annotations

import codecs
import functools
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..files import sha256_file
from .errors import DataError
from .registry import default_cache_dir

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "StreamDecoder",
    "gpt2_encoding",
    "load_tokenizer",
    "tokenizer_from_info",
]

# GPT-2's vocabulary in tiktoken's format, as pinned by tiktoken itself.
GPT2_TIKTOKEN_FILE = "r50k_base.tiktoken"
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_EOT = 50256
# GPT-2's pre-tokenizer (what tiktoken calls r50k_pat_str, written without possessive quantifiers).
GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


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
    for root in ([Path(env).expanduser()] if env else []) + [default_cache_dir()]:
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
                            f"{GPT2_TIKTOKEN_FILE} in $ANYFORMER_DATA/gpt2/ or {default_cache_dir() / 'gpt2'}") from None
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

