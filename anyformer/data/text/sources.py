"""Where a text corpus comes from: a text file, a folder of them (every file below it that is text, in
sorted path order), or the name ``shakespeare`` (Tiny Shakespeare), which resolves like the image
datasets: ``$ANYFORMER_DATA/tinyshakespeare/input.txt``, then ``<cache>/tinyshakespeare/input.txt``,
then a checksummed download of karpathy's char-rnn file into the cache. In a folder, hidden files and
binary ones (images, archives) are skipped and counted in one DataWarning.
"""

from __future__ import annotations

import codecs
import os
import warnings
from pathlib import Path

from ...files import sha256_file
from ..download import download as _download
from ..errors import DataError, DataWarning
from ..locations import default_cache_dir

__all__ = ["TEXT_NAMES", "resolve_text"]

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
