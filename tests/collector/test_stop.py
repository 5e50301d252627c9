"""A collector daemon stopped while its poller parses a new plan exits 0.

The poller parses a plan on a thread of its own (``collector/workers.py``): seconds of CPU for
a large plan, inside pydantic-core. A SIGTERM in that time used to end the daemon with SIGABRT
and glibc's "FATAL: exception not rethrown" (seen once at the end of test_scale.py under load):
the interpreter's finalization stops a thread still running with ``pthread_exit``, whose
unwinding pydantic-core's Rust frames catch (CPython gh-87135). The daemon now ends itself once
stopped (``collector/cli.py``, ``_end_process``).
"""

from __future__ import annotations

import os

from collector_daemon import Daemon
from waiting import wait_for

from research.collector_scale import plan_document, status, write

SERVERS = 20_000  # a parse of seconds of CPU (the poller's, the daemon otherwise idle)


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_daemon_stopped_while_it_parses_a_plan_exits_cleanly(tmp_path):
    path = tmp_path / "plan.json"
    write(path, plan_document(SERVERS, 1, seed=1))
    second = plan_document(SERVERS, 2, seed=2)
    daemon = Daemon(path, "--insecure-unsigned", "--plan-interval", "1", "--export-interval", "60")
    try:
        wait_for(lambda: (status(daemon.http) or {}).get("plan_version") == 1, timeout_s=300.0)
        before = cpu_s(daemon.process.pid)
        write(path, second)
        # the poller has read the new plan and is parsing it: the idle daemon's CPU rises
        wait_for(lambda: cpu_s(daemon.process.pid) > before + 0.5, timeout_s=120.0)
        parsed_before_stop = any("versions 2" in line for line in daemon.lines)
        daemon.process.terminate()
        code = daemon.process.wait(timeout=60)
    finally:
        log = daemon.stop()
    assert not parsed_before_stop, log  # the stop came during the parse
    assert "FATAL" not in log, log
    assert code == 0, log
    assert "versions 2" not in log  # the parse was discarded, not waited for
