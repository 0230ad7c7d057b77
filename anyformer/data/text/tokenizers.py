"""Tokenizers for language models: characters, GPT-2's byte-level BPE, a BPE learned from the corpus,
or a tokenizer file.

`CharTokenizer` gives one id per character of the training alphabet (the alphabet is saved with
the run); `BPETokenizer` is GPT-2's byte-level BPE through tiktoken, read from the local
``r50k_base.tiktoken`` when one is found, else tiktoken's own cache/download. A byte-level BPE
learned from the run's training text, or a Hugging Face tokenizer.json, is an `HFTokenizer`
(bpe.py), saved in the run directory as tokenizer.json.

Every tokenizer offers `token_byte_lengths()`: the UTF-8 bytes each token id stands for, which turns
a validation loss in nats a token into bits per byte, comparable across tokenizers.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ...files import sha256_file
from ..errors import DataError
from ..locations import default_cache_dir
from .bpe import TOKENIZER_FILE, HFTokenizer, bpe_vocab_size, learn_bpe, read_tokenizer_file
from .decode import StreamDecoder, checked_ids

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "HFTokenizer",
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
        ids = checked_ids(ids, len(self.chars))
        return "".join(self.chars[i] for i in ids)

    def decoder(self) -> StreamDecoder:
        return StreamDecoder(lambda i: self.decode([i]).encode())

    def token_byte_lengths(self) -> np.ndarray:
        """(vocab_size,) int64: the UTF-8 bytes of each character."""
        return np.array([len(c.encode("utf-8", errors="surrogatepass")) for c in self.chars], dtype=np.int64)

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
        ids = checked_ids(ids, self.vocab_size)
        return self.encoding.decode(ids, errors="replace")

    def decoder(self) -> StreamDecoder:
        """Incremental decoding for streaming: a character split over tokens is printed once whole."""
        return StreamDecoder(self.encoding.decode_single_token_bytes)

    def token_byte_lengths(self) -> np.ndarray:
        """(vocab_size,) int64: the bytes of each token; <|endoftext|> stands for no text (0)."""
        special = {self.encoding.encode_single_token(t) for t in self.encoding.special_tokens_set}
        return np.array([0 if i in special else len(self.encoding.decode_single_token_bytes(i))
                         for i in range(self.vocab_size)], dtype=np.int64)

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


TOKENIZER_KINDS = ("char", "bpe", "gpt2")


def load_tokenizer(spec: str, text: str | None = None):
    """A tokenizer from --tokenizer's value: "char" or "bpe" (built from `text`, the training text),
    "gpt2", or a file: a Hugging Face tokenizer.json, or GPT-2's r50k_base.tiktoken (or a folder
    holding one of them). `load_corpus` is what learns "bpe" from a whole text source."""
    if spec in ("char", "bpe"):
        if text is None:
            raise ValueError(f"a {spec} tokenizer is learned from its training text; pass text=")
        if spec == "char":
            return CharTokenizer.from_text(text)
        return learn_bpe([text], bpe_vocab_size(len(text.encode("utf-8", errors="surrogatepass"))))
    if spec in ("gpt2", "r50k_base"):
        return BPETokenizer()
    path = Path(spec).expanduser()
    if path.is_dir():
        found = [path / n for n in (TOKENIZER_FILE, GPT2_TIKTOKEN_FILE) if (path / n).is_file()]
        if not found:
            raise DataError(f"the folder {path} holds no tokenizer: expected {TOKENIZER_FILE} or {GPT2_TIKTOKEN_FILE} in it")
        path = found[0]
    if path.is_file():
        return _tokenizer_file(path)
    raise ValueError(f"unknown tokenizer {spec!r}; expected char, bpe (learned from your text), gpt2, or a tokenizer "
                     f"file ({TOKENIZER_FILE}, {GPT2_TIKTOKEN_FILE}), and there is no file at {path}")


def _tokenizer_file(path: Path):
    """GPT-2's r50k_base.tiktoken (checksum verified) or a tokenizer.json; anything else refused in one line."""
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if path.suffix == ".tiktoken":
        return BPETokenizer(path=path)
    if not head.startswith(b"{"):
        raise DataError(f"{path} is not a tokenizer file: expected a Hugging Face {TOKENIZER_FILE} (JSON) or GPT-2's "
                        f"{GPT2_TIKTOKEN_FILE}, got a file that starts {head[:16]!r}")
    return read_tokenizer_file(path)


def tokenizer_from_info(info: dict[str, Any], run_dir: str | os.PathLike[str] | None = None):
    """The tokenizer a run was trained with, from the "data" section of its config.json; a learned or
    given tokenizer is read from the run directory (`run_dir`, else `info["run_dir"]`), where the run
    saved it as tokenizer.json, and checked against the checksum the run recorded."""
    kind = info.get("tokenizer") if isinstance(info, dict) else None
    if kind == "char":
        chars = info.get("chars")
        if not isinstance(chars, str) or not chars:
            raise ValueError("the run's character tokenizer has no alphabet saved ('chars' is missing in config.json)")
        return CharTokenizer(chars)
    if kind == "gpt2":
        return BPETokenizer()
    if kind in ("bpe", "file"):
        return _saved_tokenizer(info, kind, run_dir if run_dir is not None else info.get("run_dir"))
    raise ValueError(f"the run directory describes no text tokenizer (data.tokenizer = {kind!r}); expected a "
                     f"language model run written by `anyformer train` with a text recipe")


def _saved_tokenizer(info: dict[str, Any], kind: str, run_dir: str | os.PathLike[str] | None) -> HFTokenizer:
    name = info.get("tokenizer_file") or TOKENIZER_FILE
    if run_dir is None:
        raise ValueError(f"the run's {kind} tokenizer is saved in its run directory as {name}: pass the directory "
                         f"(tokenizer_from_info(info, run_dir))")
    path = Path(run_dir) / name
    if not path.is_file():
        raise DataError(f"{path} is missing: the run's tokenizer (data.tokenizer = {kind!r}) is saved there; "
                        f"a run directory needs the {name} that `anyformer train` wrote beside config.json")
    want = info.get("tokenizer_sha256")
    if want and sha256_file(path) != want:
        raise DataError(f"{path} is not the tokenizer the run was trained with: sha256 {sha256_file(path)}, "
                        f"config.json records {want}")
    tok = read_tokenizer_file(path, kind)
    if info.get("vocab_size") not in (None, tok.vocab_size):
        raise DataError(f"{path} has {tok.vocab_size} tokens, but the run was trained with {info['vocab_size']}")
    return tok
