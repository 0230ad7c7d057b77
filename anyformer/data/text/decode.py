"""Token ids back to text, for every tokenizer: ids checked against the vocabulary (`checked_ids`),
and decoders that give text as ids stream in (`StreamDecoder` for tokens that are byte strings,
`StreamText` for those that are not)."""

from __future__ import annotations

import codecs
from typing import Callable, Iterable

__all__ = ["StreamDecoder", "StreamText", "checked_ids"]


def checked_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """Token ids as ints, each in [0, vocab_size): one outside is a ValueError naming it and its place."""
    ids = [int(i) for i in ids]
    for pos, i in enumerate(ids):
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} at position {pos} is outside the vocabulary [0, {vocab_size})")
    return ids


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


class StreamText:
    """Streaming for tokenizers whose tokens are not byte strings (WordPiece, SentencePiece): the ids so
    far are decoded whole and the new text given, held back while it ends in an unfinished character."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode, self._ids, self._sent = decode, [], 0

    def feed(self, ids: Iterable[int]) -> str:
        self._ids.extend(int(i) for i in ids)
        text = self._decode(self._ids)
        if text.endswith("\ufffd"):
            return ""
        new, self._sent = text[self._sent:], len(text)
        return new

    def flush(self) -> str:
        text = self._decode(self._ids)
        new, self._sent = text[self._sent:], len(text)
        return new
