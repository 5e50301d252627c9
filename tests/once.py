"""A set-up that several tests only read, made once per test run, also under pytest-xdist.

A module-scoped fixture is made once per worker process, and ``bin/test`` hands every test that
needs no root to whichever worker is free (tests/xdist_groups.py): a module's tests that share
a costly set-up (a benchmark's run) land on several workers and each made it again. ``once``
makes it in a folder all of a run's workers see (the parent of a worker's base temporary
folder, ``pytest-N``; the base folder itself in a serial run), under a lock: the first test to
ask makes it, the others wait for it and read it. Each run makes it anew.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name``, filled by ``make(folder)`` for the first test of this run that asks;
    a ``make`` that raised is tried again by the next test (it fails in each that asks)."""
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # pytest-N/popen-gwK: pytest-N is this run's, shared by its workers
    folder = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = folder / ".made"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a make that raised left
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
