"""Write files atomically: a reader sees the old file or the new one, never half of either.

Every writer renders into a temporary file in the destination directory and renames it over the
target with ``os.replace`` (atomic on POSIX within one file system). Used for plans, calibration
results, measurement tables, figures, agent status and testbed state alike.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cosample.errors import CosampleError


class FileWriteError(CosampleError):
    """The destination cannot be written (missing folder, no permission, full disk)."""


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[Any]], object],
                 binary: bool = False, mode: int | None = None, parents: bool = False) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it to ``path``.

    The data reach the disk before the rename, so a crash leaves the old file or the new one.
    ``mode`` sets the permissions (default: 0666 less the umask); the temporary file is 0600
    until then, so a private key is never readable by others. ``parents`` creates the folder.
    """
    path = Path(path)
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                             dir=path.parent)
    except OSError as exc:
        raise FileWriteError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(handle, "wb" if binary else "w") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~_umask() if mode is None else mode)
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise FileWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """``write_atomic`` for a string."""
    return write_atomic(path, lambda stream: stream.write(text))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int | None = None,
                       parents: bool = False) -> Path:
    """``write_atomic`` for bytes."""
    return write_atomic(path, lambda stream: stream.write(data), binary=True, mode=mode,
                        parents=parents)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
