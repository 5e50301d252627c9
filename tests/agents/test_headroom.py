"""The guard's headroom signals: parsers on real text, and the probe on real processes (a thread
that spins, one that sleeps) and a real ovs-vswitchd. How the signal moves under a hog and a
burst is measured on the testbed (docs/results/agents.md, "The guard"), not asserted here: on a shared
machine a thread's run-queue wait is everyone's doing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cosample.agents.errors import HostError
from cosample.agents.headroom import (
    Probe,
    busy_share,
    parse_dpctl,
    parse_proc_stat,
    parse_schedstat,
)

#: ``ovs-appctl dpctl/show -s`` of a testbed server (OVS 3.1, userspace datapath), abridged
DPCTL = """netdev@ovs-netdev:
  lookups: hit:926250 missed:125 lost:7
  flows: 22
  port 0: ovs-netdev (tap)
    RX packets:0 errors:0 dropped:0 overruns:0 frame:0
    TX packets:0 errors:0 dropped:0 aborted:0 carrier:0
  port 3: g71ul
    RX packets:32 errors:0 dropped:0 overruns:0 frame:0
    TX packets:19 errors:0 dropped:0 aborted:0 carrier:0
  port 6: g71v1
    RX packets:1147950 errors:0 dropped:0 overruns:0 frame:0
    TX packets:230 errors:0 dropped:0 aborted:0 carrier:0
"""


def test_parsers():
    assert parse_schedstat("184549 1414226 3\n") == (184549, 1414226)
    with pytest.raises(ValueError):
        parse_schedstat("garbage")
    total, idle = parse_proc_stat("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n")
    assert (total, idle) == (100, 85)
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3")
    assert parse_dpctl(DPCTL) == (7, {"ovs-netdev": 0, "g71ul": 32, "g71v1": 1147950})
    before = {"1": (0, 0), "2": (0, 0)}
    after = {"1": (400_000_000, 100_000_000), "2": (900_000_000, 50_000_000), "3": (5, 5)}
    assert busy_share(before, after, 1.0) == pytest.approx(0.95)
    assert busy_share(before, {}, 1.0) == 0.0


@contextmanager
def _named(tmp_path: Path, body: str, within_s: float = 30.0) -> Iterator[Path]:
    """A child process whose thread is called ``ovs-vswitchd``, running ``body``: the rundir
    whose pidfile names it, once the child has named itself (on a loaded machine a CI run once
    read a spinner still starting, as no thread at all); killed on the way out."""
    code = f"open('/proc/self/comm', 'w').write('ovs-vswitchd')\n{body}"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        rundir = tmp_path / f"run-{child.pid}"
        rundir.mkdir()
        (rundir / "ovs-vswitchd.pid").write_text(f"{child.pid}\n")
        deadline = time.monotonic() + within_s
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != "ovs-vswitchd":
            assert child.poll() is None, f"child {child.pid} exited with {child.returncode}"
            assert time.monotonic() < deadline, f"child {child.pid} not named within {within_s} s"
            time.sleep(0.02)
        yield rundir
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="no schedstat here")
def test_spinning_reads_busy_sleeping_reads_idle(tmp_path):
    spinning = _named(tmp_path, "while True: pass")
    sleeping = _named(tmp_path, "import time\nwhile True: time.sleep(1)")
    with spinning as spin_dir, sleeping as sleep_dir:
        probes = [Probe(str(spin_dir)), Probe(str(sleep_dir))]
        assert [probe.read() for probe in probes] == [None, None]
        time.sleep(1.0)
        spin, sleep = (probe.read() for probe in probes)
        # a spinning thread runs or waits to run all the time (on a shared machine, mostly
        # waits); a sleeping one does neither
        assert spin.busy > 0.9 and sleep.busy < 0.05
        assert spin.drops == sleep.drops == 0


def test_a_missing_daemon_is_a_host_error(tmp_path):
    with pytest.raises(HostError, match="ovs-vswitchd.pid"):
        Probe(str(tmp_path)).read()
    with pytest.raises(ValueError, match="unknown guard signals"):
        Probe(str(tmp_path), signals=("vswitchd", "magic"))


def test_host_signal_reads_proc_stat():
    probe = Probe("/nonexistent", signals=("host",))
    assert probe.read() is None
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # keep at least one CPU busy a while
        pass
    reading = probe.read()
    assert 0.0 < reading.busy <= 1.0


def test_real_vswitchd_threads_and_datapath(ovs_sandbox):
    """ovs-vswitchd's own threads and its ``dpctl/show -s``, read through the probe."""
    ovs_sandbox.vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy")
    probe = Probe(str(ovs_sandbox.directory), signals=("vswitchd", "drops"))
    assert probe.read() is None
    time.sleep(0.5)
    reading = probe.read()
    assert 0.0 <= reading.busy < 0.5 and reading.drops == 0
    threads = probe._threads()
    assert threads and all(len(value) == 2 for value in threads.values())
