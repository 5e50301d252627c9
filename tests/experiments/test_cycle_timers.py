"""The cycle timers on a tiny fleet (structure only, never timings): the benchmark's three
cycles run with the functions wrapped, and every publishing part is timed."""

from __future__ import annotations

import subprocess
import sys

from cosample.experiments.cycle_timers import TIMED


def test_three_cycles_and_the_functions_they_called():
    done = subprocess.run([sys.executable, "-m", "cosample.experiments.cycle_timers",
                           "--servers", "300"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == [
        "cycle 1 (published)", "cycle 2 (kept)", "cycle 3 (published, two phases)"]
    timed = {line.split()[1] for line in lines[4:]}
    # what a publication through the HTTP target calls (not the folder target's publish)
    called = {f"{module.rsplit('.', 1)[-1]}.{path}" for module, path in TIMED} - {
        "publish.DirectoryTarget.publish"}
    assert called <= timed, called - timed


def test_too_few_servers_is_one_error():
    done = subprocess.run([sys.executable, "-m", "cosample.experiments.cycle_timers",
                           "--servers", "3"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "--servers: at least 10" in done.stderr
