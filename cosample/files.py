"""Write files atomically: a reader sees the old file or the new one, never half of either.

Every writer renders into a temporary file in the destination directory and renames it over the
target with ``os.replace`` (atomic on POSIX within one file system). Used for plans, calibration
results, measurement tables, figures, agent status and testbed state alike.

A large file read back rarely (the controller's state: a 343 MB plan set per publication at
10^6 hosts) can be written around the page cache (``cached=False``, ``O_DIRECT``): the kernel's
copy into fresh page-cache pages, and the reclaim that makes room for them, cost the writer up to
1 s of CPU per such file; a direct write costs 0.05 s (docs/controller.md, "Cycle time at scale").
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cosample.errors import CosampleError


class FileWriteError(CosampleError):
    """The destination cannot be written (missing folder, no permission, full disk)."""


def write_atomic(
    path: str | os.PathLike[str],
    write: Callable[[IO[Any]], object],
    binary: bool = False,
    mode: int | None = None,
    parents: bool = False,
) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it to ``path``.

    The data reach the disk before the rename, so a crash leaves the old file or the new one.
    ``mode`` sets the permissions (default: 0666 less the umask); the temporary file is 0600
    until then, so a private key is never readable by others. ``parents`` creates the folder.
    """
    path = Path(path)
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
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


#: ``-o -``: the command writes its output to standard output.
STDOUT = "-"


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """``-``, or a path to the file standard output already is (``/dev/stdout``,
    ``/proc/self/fd/1``): written through standard output, never opened a second time (which
    would truncate a redirected file and write over what standard output wrote)."""
    if os.fspath(path) == STDOUT:
        return True
    try:
        target, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such file; no real standard output
        return False
    return (target.st_dev, target.st_ino) == (out.st_dev, out.st_ino)


def write_output(
    path: str | os.PathLike[str], write: Callable[[IO[Any]], object], binary: bool = False
) -> str:
    """A command's output file (``-o PATH``): ``-`` (or a path to standard output's file) is
    standard output; a path that exists and is not a regular file itself (a terminal, a pipe,
    a device, a link) is opened and written in place, never renamed over; anything else is
    written atomically (``write_atomic``). Returns where the output went, for messages."""
    if is_stdout(path):
        stream = sys.stdout.buffer if binary else sys.stdout
        write(stream)
        stream.flush()
        return "standard output"
    try:
        kind = os.lstat(path).st_mode
    except FileNotFoundError:
        kind = None
    except OSError as exc:
        raise FileWriteError(f"{path}: cannot write: {exc.strerror}") from None
    if kind is None or stat.S_ISREG(kind):
        write_atomic(path, write, binary=binary)
        return os.fspath(path)
    if stat.S_ISDIR(kind):
        raise FileWriteError(f"{path}: cannot write: a directory")
    try:
        with open(path, "wb" if binary else "w") as stream:
            write(stream)
    except OSError as exc:
        raise FileWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return os.fspath(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """``write_atomic`` for a string."""
    return write_atomic(path, lambda stream: stream.write(text))


def write_bytes_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    mode: int | None = None,
    parents: bool = False,
    cached: bool = True,
) -> Path:
    """``write_atomic`` for bytes; ``cached=False``: around the page cache where the file
    system allows it (``write_uncached``), through it where not."""
    write = (
        (lambda stream: stream.write(data))
        if cached
        else (lambda stream: write_uncached(stream, data))
    )
    return write_atomic(path, write, binary=True, mode=mode, parents=parents)


#: ``O_DIRECT``'s alignment (of memory, offsets and sizes; 4096 covers 512-byte devices too)
#: and the aligned buffer the bytes are copied through.
DIRECT_BLOCK, DIRECT_CHUNK = 4096, 1 << 24


def write_uncached(stream: IO[bytes], data: bytes) -> None:
    """``data`` into the empty file ``stream`` with ``O_DIRECT``: copied through a page-aligned
    buffer, the last block padded, then the file cut to ``len(data)``. Where the file system
    refuses ``O_DIRECT`` or its alignment, an ordinary write."""
    fd = stream.fileno()
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError:
        stream.write(data)
        return
    try:
        _write_direct(fd, memoryview(data).cast("B"))
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)  # aligned writes refused after all: start again
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        stream.write(data)
        return
    fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    os.ftruncate(fd, len(data))


def _write_direct(fd: int, data: memoryview) -> None:
    with mmap.mmap(-1, DIRECT_CHUNK) as buffer:  # anonymous memory: page-aligned
        aligned = memoryview(buffer)
        try:
            for start in range(0, len(data), DIRECT_CHUNK):
                size = min(DIRECT_CHUNK, len(data) - start)
                padded = -(-size // DIRECT_BLOCK) * DIRECT_BLOCK
                aligned[:size] = data[start : start + size]
                aligned[size:padded] = bytes(padded - size)
                done = 0
                while done < padded:
                    written = os.write(fd, aligned[done:padded])
                    if written <= 0 or written % DIRECT_BLOCK:
                        raise OSError(errno.EIO, "short direct write")
                    done += written
        finally:
            aligned.release()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
