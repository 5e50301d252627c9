"""Each test's CPU, for finding what makes the suite slow (docs/testing.md, "Measured").

With ``COSAMPLE_TEST_CPU=PREFIX`` in the environment, every test appends one line to
``PREFIX.<worker>`` (``PREFIX.main`` in a serial run): CPU seconds of the test's own process,
CPU seconds of the children it reaped meanwhile (daemons it started and stopped; not those that
detach, such as OVS), wall seconds, its root group (``-`` for none), its node id and the CPU
seconds its process spent in Python's cyclic garbage collector (timed by a ``gc`` callback), tab
separated. Wall time on a loaded machine says how long a test waited; CPU says what it costs.
``python tests/testcpu.py PREFIX`` sums the lines by group and lists the costliest tests.
Without the variable nothing is recorded.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from xdist_groups import module_group

VARIABLE = "COSAMPLE_TEST_CPU"
#: CPU seconds in the cyclic collector so far, and when the running collection began.
_collector = [0.0, 0.0]


def _time_collections(phase: str, info: dict) -> None:
    if phase == "start":
        _collector[1] = time.process_time()
    else:
        _collector[0] += time.process_time() - _collector[1]


if os.environ.get(VARIABLE):
    gc.callbacks.append(_time_collections)


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    prefix = os.environ.get(VARIABLE)
    if not prefix:
        yield
        return
    own, children = _cpu()
    started, collected = time.monotonic(), _collector[0]
    yield
    own_after, children_after = _cpu()
    wall, collecting = time.monotonic() - started, _collector[0] - collected
    group = module_group(Path(item.path)) or "-"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{prefix}.{worker}", "a") as out:
        out.write(
            f"{own_after - own:.3f}\t{children_after - children:.3f}\t{wall:.3f}\t"
            f"{group}\t{item.nodeid}\t{collecting:.3f}\n"
        )


def summary(prefix: str, top: int = 30) -> str:
    """Totals by group and the ``top`` costliest tests of the records under ``prefix``."""
    rows = []
    for path in sorted(Path(prefix).parent.glob(Path(prefix).name + ".*")):
        for line in path.read_text().splitlines():
            own, children, wall, group, node, collecting = line.split("\t")
            rows.append((float(own) + float(children), float(wall), group, node, float(collecting)))
    if not rows:
        raise SystemExit(f"testcpu: no records under {prefix}.*")
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0.0])
    for cpu, wall, group, _, collecting in rows:
        totals[group][0] += cpu
        totals[group][1] += wall
        totals[group][2] += 1
        totals[group][3] += collecting
    lines = ["group\ttests\tCPU s\twall s\tof the CPU, in the garbage collector s"]
    lines += [
        f"{g}\t{int(t[2])}\t{t[0]:.0f}\t{t[1]:.0f}\t{t[3]:.1f}" for g, t in sorted(totals.items())
    ]
    lines += ["", "CPU s\twall s\tgroup\ttest"]
    lines += [f"{r[0]:.1f}\t{r[1]:.1f}\t{r[2]}\t{r[3]}" for r in sorted(rows, reverse=True)[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/testcpu.py PREFIX")
    print(summary(sys.argv[1]))
