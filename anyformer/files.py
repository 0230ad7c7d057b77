"""Files that are whole or absent, and their checksums: the one copy every floor uses.

A write goes to a temporary file beside the target ('.<name>.<random>'), is flushed to disk,
then renamed onto the target, and the folder is synced so that the rename survives a power cut.
A kill at any moment leaves either the old file or the new one, never half of one; the
temporary file is removed on failure (a SIGKILL can leave one, which `remove_temp_files` clears).
Standard library only, so that `nn`, `models`, `data` and `train` may all import it.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

__all__ = ["atomic_write", "atomic_path", "atomic_write_text", "commit", "sha256_file", "remove_temp_files",
           "write_temp"]

_CHUNK = 1 << 20


class _File:
    """A file that remembers the first OSError of a write: torch.save reports a failed write
    (a full disk) as a RuntimeError about stream positions, and we want the real reason."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not every platform opens folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_beside(path: Path, suffix: str = "") -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it private; the result should be like any new file
    return fd, tmp


def commit(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename a temporary file written by `write_temp` onto `path`, and sync the folder so that the
    rename survives a power cut. On failure the temporary file is removed."""
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(Path(path).parent)


def write_temp(path: str | os.PathLike[str], writer: Callable[[IO[bytes]], Any]) -> str:
    """The first half of `atomic_write`: call writer(file) on a temporary file beside `path` and
    fsync it; its name, for `commit` (or removal) once whoever must agree to it has. `path` is not
    touched. On any failure the temporary file is removed."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    f = None
    try:
        with os.fdopen(fd, "wb") as raw:
            f = _File(raw)
            writer(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if f is not None and f.error is not None and f.error is not e:
            raise f.error from None
        raise
    return tmp


def atomic_write(path: str | os.PathLike[str], writer: Callable[[IO[bytes]], Any]) -> None:
    """Call writer(file) on a temporary file beside `path`, fsync, then rename it onto `path`.
    On any failure the temporary file is removed and `path` is left as it was."""
    commit(write_temp(path, writer), path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[str]:
    """A temporary path beside `path` for a library that writes to a name (safetensors, numpy);
    renamed onto `path` when the block ends without an error, removed otherwise."""
    path = Path(path)
    fd, tmp = _temp_beside(path, suffix)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        commit(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def remove_temp_files(folder: str | os.PathLike[str], targets: Iterable[str]) -> None:
    """Remove temporary files that a killed `atomic_write` to `folder/<target>` left behind."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    prefixes = tuple(f".{name}." for name in targets)
    for p in folder.iterdir():
        if p.name.startswith(prefixes) and p.is_file():
            p.unlink(missing_ok=True)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in chunks so large files need little memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
