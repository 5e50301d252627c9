"""The shared atomic writer: all or nothing, and one clear error when it cannot write."""

from __future__ import annotations

import errno
import os

import pytest

from cosample import files
from cosample.files import (
    DIRECT_CHUNK,
    FileWriteError,
    write_atomic,
    write_bytes_atomic,
    write_text_atomic,
)


def test_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    write_text_atomic(path, "old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failing_writer_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    write_text_atomic(path, "old")

    def explode(stream):
        stream.write("half")
        raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        write_atomic(path, explode)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(FileWriteError, match="nowhere/out.txt: cannot write: No such file"):
        write_text_atomic(tmp_path / "nowhere" / "out.txt", "x")


def test_mode_and_parents(tmp_path):
    path = write_atomic(
        tmp_path / "keys" / "private.pem",
        lambda stream: stream.write(b"k"),
        binary=True,
        mode=0o600,
        parents=True,
    )
    assert path.read_bytes() == b"k"
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "size", [0, 1, 4095, 4096, 4097, DIRECT_CHUNK - 1, DIRECT_CHUNK, 2 * DIRECT_CHUNK + 4097]
)
def test_uncached_bytes_are_the_bytes(tmp_path, size):
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    path = write_bytes_atomic(tmp_path / "state.json", data, mode=0o600, cached=False)
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_uncached_on_a_file_system_without_direct_writes(tmp_path, monkeypatch):
    """A file system that refuses to open a file for O_DIRECT: the same bytes, buffered."""
    setfl = files.fcntl.fcntl

    def refuse(fd, command, *args):
        if command == files.fcntl.F_SETFL and args[0] & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return setfl(fd, command, *args)

    monkeypatch.setattr(files.fcntl, "fcntl", refuse)
    data = b"x" * 10_000
    assert write_bytes_atomic(tmp_path / "f", data, cached=False).read_bytes() == data


def test_uncached_falls_back_when_aligned_writes_are_refused(tmp_path, monkeypatch):
    """A device whose blocks are larger than ``DIRECT_BLOCK`` refuses the aligned writes with
    EINVAL, possibly after some went through: the file starts again, buffered."""

    def refuse(fd, data):
        os.write(fd, b"\0" * 4096)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(files, "_write_direct", refuse)
    data = b"plan" * 3000
    assert write_bytes_atomic(tmp_path / "f", data, cached=False).read_bytes() == data


def test_uncached_write_errors_are_one_clear_error(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    write_bytes_atomic(tmp_path / "f", b"old")
    monkeypatch.setattr(files, "_write_direct", full)
    with pytest.raises(FileWriteError, match="f: cannot write: No space left on device"):
        write_bytes_atomic(tmp_path / "f", b"new" * 5000, cached=False)
    assert (tmp_path / "f").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
