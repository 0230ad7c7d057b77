"""Checksummed downloads: stream to a temp file, verify, then atomically rename.

A file only ever appears at its final path once its sha256 has been verified,
so an interrupted or tampered download can never be mistaken for a good one.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from ..files import atomic_path, sha256_file
from .errors import DataError

__all__ = ["download", "sha256_file"]

_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")


def download(
    url: str,
    dest: str | os.PathLike[str],
    sha256: str,
    timeout: float = 30,
    *,
    gunzip: bool = False,
) -> Path:
    """Download `url` to `dest` and verify its sha256 (lower-case hex).

    If `dest` already exists with the right sha256 nothing is fetched.
    With ``gunzip=True`` a gzip stream is decompressed on the fly and `sha256`
    is that of the decompressed bytes (what gets stored); this lets us verify
    against the published checksums of the raw MNIST files whichever mirror
    recompressed them. A stream that is not gzip is stored as-is.
    Any failure raises DataError and leaves no partial file behind.
    """
    sha256 = sha256.lower()
    if not _HEX64.fullmatch(sha256):
        raise DataError(f"bad sha256 for {url}: {sha256!r}, expected 64 hex digits")
    dest = Path(dest)
    if dest.is_file() and sha256_file(dest) == sha256:
        return dest
    # atomic_path renames the temp file onto `dest` only if the block ends without an error, so a
    # failed check below leaves `dest` as it was. The hash is taken as the bytes stream in: the
    # download is read once.
    with atomic_path(dest, suffix=".part") as tmp:
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
                inflater = None
                first = True
                while chunk := resp.read(_CHUNK):
                    if first and gunzip and chunk[:2] == b"\x1f\x8b":
                        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip wrapper
                    first = False
                    if inflater is not None:
                        chunk = inflater.decompress(chunk)
                    h.update(chunk)
                    out.write(chunk)
                if inflater is not None:
                    tail = inflater.flush()
                    h.update(tail)
                    out.write(tail)
                    if not inflater.eof:
                        raise DataError(
                            f"download of {url} ended mid gzip stream; the transfer was cut, try again"
                        )
        except DataError:
            raise
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, zlib.error, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise DataError(
                f"download failed: {url} -> {reason}; check the network or place the file at {dest} yourself"
            ) from None
        except OSError as e:
            raise DataError(f"download failed: {url} -> {e}; check the network and that {dest.parent} is writable") from None
        got = h.hexdigest()
        if got != sha256:
            raise DataError(
                f"sha256 mismatch for {url}: expected {sha256}, got {got}; the mirror or file is "
                "corrupt or tampered with, try another source"
            )
    return dest
