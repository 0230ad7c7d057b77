"""Reader for the IDX format used by MNIST and Fashion-MNIST.

Format: 2 zero bytes, a dtype code byte, a byte with the number of dimensions,
then one big-endian uint32 per dimension, then the data in C order, big-endian.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError

__all__ = ["read_idx", "read_idx_bytes", "parse_idx", "idx_bytes", "IDX_DTYPES"]

# dtype code -> big-endian numpy dtype (from the format's definition).
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"


def read_idx_bytes(path: str | os.PathLike[str]) -> bytes:
    """Return the raw (decompressed) IDX bytes of `path`, gzip or not.

    Compression is detected from the magic bytes, not the name, because
    mirrors and users rename files freely.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DataError(f"IDX file not found: {p}; check the path") from None
    except OSError as e:
        raise DataError(f"cannot read IDX file {p}: {e.strerror or e}; check permissions") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(
                f"corrupt gzip file {p}: {e}; expected a complete gzip-compressed IDX file, "
                "delete it and download it again"
            ) from None
    return data


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse IDX bytes into a native-endian, writable numpy array.

    The size must match the header exactly: a short file means a truncated
    download and trailing bytes mean it is not really IDX, so both are errors.
    """
    if len(data) < 4:
        raise DataError(
            f"not an IDX file: {source} has {len(data)} bytes, expected at least a 4-byte header; "
            "the file is truncated or of another type"
        )
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in IDX_DTYPES or ndim == 0:
        raise DataError(
            f"not an IDX file: {source} starts with {data[:4].hex()}, expected 0000 + dtype code "
            f"({', '.join(f'{c:02x}' for c in IDX_DTYPES)}) + ndim>0; pass a real IDX file"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(
            f"truncated IDX file: {source} has {len(data)} bytes, shorter than its {header}-byte "
            "header; download it again"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = IDX_DTYPES[code]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "oversized"
        raise DataError(
            f"{what} IDX file: {source} has {len(data)} bytes but its header (shape {tuple(dims)}, "
            f"{dtype.name}) needs {expected}; download it again"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    # Native byte order and a private copy: callers get a normal writable array.
    return arr.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzip-compressed or not) into a numpy array.

    Raises DataError if the file is missing, not IDX, or its size does not match
    its header (truncated or padded).
    """
    return parse_idx(read_idx_bytes(path), str(path))


def idx_bytes(arr: np.ndarray) -> bytes:
    """A uint8 array as the bytes of an IDX file (what `parse_idx` reads back): rebuilding them is how
    arrays that came from elsewhere are checked against the published sha256 of the IDX files."""
    return struct.pack(f">HBB{arr.ndim}I", 0, 0x08, arr.ndim, *arr.shape) + arr.tobytes()
