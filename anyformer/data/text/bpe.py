"""Tokenizers of the `tokenizers` library: a byte-level BPE learned from a corpus, or a tokenizer.json.

`learn_bpe` learns GPT-2's kind of tokenizer (the ByteLevel pre-tokenizer and decoder, every one of
the 256 bytes in the alphabet, so any text encodes) from the training text alone, with a vocabulary
that `bpe_vocab_size` derives from that text's size. `read_tokenizer_file` reads any Hugging Face
``tokenizer.json``. Both give an `HFTokenizer`, which offers what the character and GPT-2 tokenizers
offer (encode, decode, a streaming decoder, the UTF-8 bytes of each token) and is saved with a run as
its ``tokenizer.json``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..errors import DataError
from .decode import StreamDecoder, StreamText, checked_ids

__all__ = ["EOT", "HFTokenizer", "TOKENIZER_FILE", "bpe_vocab_size", "learn_bpe", "read_tokenizer_file"]

TOKENIZER_FILE = "tokenizer.json"  # the name a run directory holds its learned or given tokenizer under
EOT = "<|endoftext|>"              # the special token put between the files of a folder (GPT-2's)

# The learned vocabulary: 4 x sqrt(bytes of training text), a multiple of 64, within [512, 16384].
# Why the square root: by Heaps' law the distinct words of a text grow about as the square root of
# its length, so the vocabulary keeps pace with the words the text has, while each entry stays
# common enough to be learned (on average ~27 occurrences an entry for 100 kB of text, ~90 for
# Tiny Shakespeare's 1 MB, which gets 4032 entries at ~2.9 bytes a token). 512 at least: fewer
# merges than that barely shorten the sequences. 16,384 at most: beyond it the output layer
# outweighs the blocks of the small models these runs train (the slow-vocabulary warning), and a
# larger corpus is better served by a larger model than by a larger vocabulary.
VOCAB_PER_SQRT_BYTE = 4
MIN_VOCAB, MAX_VOCAB, VOCAB_MULTIPLE = 512, 16384, 64
# A merge is learned only from a pair seen at least twice: one seen once is a token never seen again.
MIN_PAIR_FREQUENCY = 2
# Text is handed to the tokenizers library in pieces of about this many characters, cut where
# cutting changes no token (`_cut`): its batch encoder then spreads them over the cores, and no
# piece's token list (with offsets) grows large.
_PIECE_CHARS = 1 << 16


def bpe_vocab_size(train_bytes: int) -> int:
    """The vocabulary learned from `train_bytes` bytes of UTF-8 training text (see VOCAB_PER_SQRT_BYTE)."""
    raw = VOCAB_PER_SQRT_BYTE * math.sqrt(max(0, train_bytes))
    size = VOCAB_MULTIPLE * round(raw / VOCAB_MULTIPLE)
    return int(min(MAX_VOCAB, max(MIN_VOCAB, size)))


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: the printable character that stands for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:  # the bytes that are not printable are moved to characters 256 onwards, in order
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTES_OF_CHAR = _byte_decoder()
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _has_type(section: Any, name: str) -> bool:
    """Whether a tokenizer.json section (a decoder, a pre-tokenizer) is of type `name` or a sequence holding one."""
    if isinstance(section, dict):
        return section.get("type") == name or any(_has_type(v, name) for v in section.values())
    if isinstance(section, list):
        return any(_has_type(v, name) for v in section)
    return False


class HFTokenizer:
    """A `tokenizers.Tokenizer` as anyformer's tokenizers are used: kind "bpe" (learned from the run's
    corpus) or "file" (a tokenizer.json given with --tokenizer).

    `encode` reads special-token text such as "<|endoftext|>" as ordinary text (as the GPT-2
    tokenizer does), so a corpus or a prompt cannot inject control tokens, and adds no [CLS]/[SEP]
    and no padding or truncation that a file may ask for; `eot` is the id put between documents, or
    None where the tokenizer has no "<|endoftext|>".
    """

    def __init__(self, tokenizer: Any, kind: str = "file") -> None:
        self._tok = tokenizer
        self.kind = kind
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.encode_special_tokens = True
        self.eot = tokenizer.token_to_id(EOT)
        spec = json.loads(self.to_json())
        self._byte_level = _has_type(spec.get("decoder"), "ByteLevel")
        self._byte_fallback = _has_type(spec.get("decoder"), "ByteFallback")
        self._special = {i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}

    @classmethod
    def from_json(cls, text: str, kind: str = "file") -> "HFTokenizer":
        from tokenizers import Tokenizer
        return cls(Tokenizer.from_str(text), kind)

    @cached_property
    def vocab_size(self) -> int:
        """One more than the largest id (a file's ids may leave gaps; the model needs a row for each)."""
        return max(self._tok.get_vocab(with_added_tokens=True).values()) + 1

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> np.ndarray:
        """(N,) int64 ids; a long text is encoded in pieces (on all cores) that give the same tokens."""
        pieces = _cut(text, _PIECE_CHARS)
        if len(pieces) == 1:
            return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        encoded = self._tok.encode_batch_fast(pieces, add_special_tokens=False)
        return np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encoded])

    def decode(self, ids: Iterable[int]) -> str:
        ids = checked_ids(ids, self.vocab_size)
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_bytes(self, i: int) -> bytes:
        """The UTF-8 bytes token `i` stands for: exact for a byte-level tokenizer (a piece of a character
        may be a token); for others, the token decoded alone. A special token stands for no text: b""."""
        if i in self._special:
            return b""
        piece = self._tok.id_to_token(i)
        if piece is None:  # an id in a gap of the file's vocabulary
            return b""
        if self._byte_level and all(c in _BYTES_OF_CHAR for c in piece):
            return bytes(_BYTES_OF_CHAR[c] for c in piece)
        if self._byte_fallback and (m := _BYTE_FALLBACK.fullmatch(piece)):
            return bytes([int(m.group(1), 16)])
        return self._tok.decode([i], skip_special_tokens=False).encode("utf-8", errors="surrogatepass")

    def token_byte_lengths(self) -> np.ndarray:
        """(vocab_size,) int64: the UTF-8 bytes of each token (what bits per byte divides by)."""
        return np.array([len(self.token_bytes(i)) for i in range(self.vocab_size)], dtype=np.int64)

    def decoder(self) -> "StreamDecoder | StreamText":
        """Incremental decoding for streaming: a character split over tokens is given once whole."""
        if self._byte_level:
            return StreamDecoder(self.token_bytes)
        return StreamText(lambda ids: self._tok.decode(ids, skip_special_tokens=False))

    def to_json(self) -> str:
        """The tokenizer.json text (the same bytes for the same tokenizer)."""
        return self._tok.to_str()

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def to_info(self) -> dict[str, Any]:
        return {"tokenizer": self.kind, "tokenizer_file": TOKENIZER_FILE, "vocab_size": self.vocab_size,
                "tokenizer_sha256": self.sha256}

    def __repr__(self) -> str:
        return f"HFTokenizer({self.kind}, vocab_size={self.vocab_size})"


def _cut(text: str, size: int) -> list[str]:
    """`text` in pieces of about `size` characters, cut just after a newline that stands between two
    non-space characters: GPT-2's pre-tokenizer makes such a newline a token of its own, so the pieces'
    tokens are those of the whole text. A text with no such newline stays whole."""
    pieces, start = [], 0
    while len(text) - start > 2 * size:
        cut = text.find("\n", start + size, len(text) - 1)
        while cut > 0 and (text[cut - 1].isspace() or text[cut + 1].isspace()):
            cut = text.find("\n", cut + 1, len(text) - 1)
        if cut < 0:
            break
        pieces.append(text[start:cut + 1])
        start = cut + 1
    pieces.append(text[start:])
    return pieces


def learn_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """A byte-level BPE learned from `texts` (the training text, in pieces), with <|endoftext|> as id 0.

    Deterministic: the same texts give the same tokenizer.json, byte for byte (the library breaks ties
    between equally frequent pairs by the pair itself)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # No prefix space: a token's bytes are then exactly the text's (bits per byte counts them).
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=MIN_PAIR_FREQUENCY, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[EOT])
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok, "bpe")


def read_tokenizer_file(path: str | os.PathLike[str], kind: str = "file") -> HFTokenizer:
    """A Hugging Face tokenizer.json (any tokenizer of the `tokenizers` library); one line if it is not one."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the tokenizer file {p}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return HFTokenizer.from_json(text, kind)
    except Exception as e:  # noqa: BLE001 - the library raises its own kinds for malformed files
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{p} is not a tokenizer file: expected a Hugging Face tokenizer.json "
                        f"(the tokenizers library said: {first})") from None
