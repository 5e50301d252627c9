"""Polling for a condition in tests that talk to a real daemon."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout_s: float = 15.0) -> T:
    """The first truthy value of ``condition()``, polled every 0.1 s; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout_s:g} s")


def serves(url: str) -> bool:
    """Whether ``url`` answers 200; a collector that has no snapshot yet answers 503 (seen
    in CI: its first export was late on a loaded machine)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:  # urllib's HTTPError and URLError are OSErrors
        return False


def interrupt(process: subprocess.Popen, signal_number: int, timeout_s: float = 60.0) -> str:
    """Send ``signal_number`` to ``process``, wait for it to exit and return its stderr; a
    process still running at the deadline is killed (and the test fails on its exit code)."""
    try:
        process.send_signal(signal_number)
        _, stderr = process.communicate(timeout=timeout_s)
        return stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
