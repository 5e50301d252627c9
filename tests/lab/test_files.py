"""The shared atomic writer: all or nothing, and one clear error when it cannot write."""

from __future__ import annotations

import pytest

from cosample.files import FileWriteError, write_atomic, write_text_atomic


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
    path = write_atomic(tmp_path / "keys" / "private.pem", lambda stream: stream.write(b"k"),
                        binary=True, mode=0o600, parents=True)
    assert path.read_bytes() == b"k"
    assert path.stat().st_mode & 0o777 == 0o600
