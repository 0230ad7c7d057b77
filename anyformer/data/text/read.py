"""Reading a text source: each file decoded (UTF-8, with or without a byte-order mark, or UTF-16 with
one; any script, emoji included) in chunks, and the files joined into one stream of text. A file that
is not text (a NUL byte, a byte that does not decode) is refused in one line naming it and the byte's
offset.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import DataError
from .sources import _BOMS, _SNIFF_BYTES, _binary_head, resolve_text

__all__ = ["read_text"]

_CHUNK_BYTES = 16 << 20


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
