"""Issue 41, item 3: compact records from anyone but the planned sniffer change nothing.

The attacks, each against a real ``cosample appmon run --receive-records`` on loopback: a
stranger's datagrams (from another address, or from the sender's address without the pair's
key) that would turn 10 req/s of 200s into 234 req/s of 503s or mask real 503s as success; a
genuine datagram sent again (a replay); 100,000 services in three windows (memory); a record
dated 290 s ahead (it used to close the current window early and stop publication for five
minutes). The genuine sender (127.0.0.2, with the key) is the control in each: its records
count, so a test fails when a check is gone.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
from waiting import wait_for

from cosample.appmon.records import RecordBuffer

SENDER, STRANGER = "127.0.0.2", "127.0.0.3"
SERVICE = (socket.inet_aton("10.0.0.2"), 80)
KEY = bytes(range(32))


class Receiver:
    """``appmon run --receive-records`` on 127.0.0.1 with 1-s windows, taking records only
    from SENDER under KEY (unless ``extra`` says otherwise)."""

    def __init__(self, tmp_path, *extra: str) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            self.endpoint = ("127.0.0.1", probe.getsockname()[1])
        key = tmp_path / "record.key"
        key.write_text(KEY.hex() + "\n")
        key.chmod(0o600)
        self.state = tmp_path / "state"
        trust = (
            list(extra)
            if "--insecure-records" in extra
            else ["--record-key", str(key), "--records-from", SENDER, *extra]
        )
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cosample",
                "appmon",
                "run",
                "--receive-records",
                f"{self.endpoint[0]}:{self.endpoint[1]}",
                *trust,
                "--window",
                "1s",
                "--metrics-port",
                "0",
                "--state-dir",
                str(self.state),
                "--name",
                "attacked",
                "--duration",
                "60s",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        line = ""
        while "HTTP on" not in line:
            line = self.process.stderr.readline().decode()
            assert line, "the receiver did not start"
        self.metrics = "http://{}:{}/metrics".format(
            *re.search(r"HTTP on ([\d.]+):(\d+)", line).groups()
        )

    def send(self, datagrams, source: str = SENDER) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            out.bind((source, 0))
            for data in datagrams:
                out.sendto(data, self.endpoint)

    def counters(self) -> Counter:
        text = urllib.request.urlopen(self.metrics, timeout=30).read().decode()
        return Counter(
            {
                m.group(1): int(float(m.group(2)))
                for m in re.finditer(r'cosample_appmon_unused_total\{reason="(\w+)"\} (\S+)', text)
            }
        )

    def windows(self) -> list[dict]:
        path = self.state / "windows.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def peak_rss_mb(self) -> float:
        status = open(f"/proc/{self.process.pid}/status").read()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def receiver(tmp_path):
    running = Receiver(tmp_path)
    yield running
    running.stop()


def traffic(start: float, requests: int, status: int, service_time: float, key: bytes = KEY):
    """``requests`` requests and their responses within 10 ms after ``start``, as datagrams."""
    buffer = RecordBuffer(Counter(), rate=1e6, key=key)
    for number in range(requests):
        at = start + number * 0.01 / requests
        buffer.request(SERVICE, at)
        buffer.response(SERVICE, at + service_time, status, service_time)
    return buffer.take(partial=True)


def next_window(after: float) -> float:
    """The start of a window (1 s) that begins at least 0.2 s after ``after``."""
    return math.floor(after + 1.2)


def served(windows: list[dict], start: float) -> dict | None:
    for window in windows:
        stamp = window["window_start"]
        if abs(_epoch(stamp) - start) < 0.5:
            return next(iter(window["services"]), None)
    return None


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_strangers_records_count_nowhere(receiver):
    start = next_window(time.time())
    genuine = traffic(start + 0.3, 10, 200, 0.002)  # 10 req/s of 200s in 10 ms
    forged_keyless = traffic(start + 0.4, 224, 503, 1.99, key=bytes(32))
    forged_elsewhere = traffic(start + 0.5, 224, 503, 1.99)  # the right key, another address
    time.sleep(max(0.0, start + 0.6 - time.time()))
    receiver.send(genuine)
    receiver.send(forged_keyless)  # from the sender's own address: no key, no count
    receiver.send(forged_elsewhere, source=STRANGER)
    window = wait_for(lambda: served(receiver.windows(), start), timeout_s=10)
    assert window["requests"] == 10 and window["status_classes"]["5xx"] == 0
    assert window["success_rate"] == 1.0 and window["service_time_s"]["p95"] < 0.01
    counters = receiver.counters()
    assert counters["record_datagrams_unauthenticated"] == len(forged_keyless)
    assert counters["record_datagrams_wrong_sender"] == len(forged_elsewhere)


def test_real_503s_are_not_masked_and_a_replay_counts_once(receiver):
    start = next_window(time.time())
    genuine = traffic(start + 0.3, 20, 503, 0.002)
    masking = traffic(start + 0.4, 480, 200, 0.002, key=bytes(32))  # would give success 0.96
    time.sleep(max(0.0, start + 0.6 - time.time()))
    receiver.send(genuine)
    receiver.send(masking)
    receiver.send(genuine)  # captured on the wire and sent again, from the sender's address
    window = wait_for(lambda: served(receiver.windows(), start), timeout_s=10)
    assert window["requests"] == 20 and window["success_rate"] == 0.0
    counters = receiver.counters()
    assert counters["record_datagrams_replayed"] == len(genuine)
    assert counters["record_datagrams_unauthenticated"] == len(masking)


def test_a_record_far_ahead_closes_no_window_early(receiver):
    now = time.time()
    ahead = traffic(now + 290, 5, 200, 0.001)
    receiver.send(ahead)
    start = next_window(time.time())
    time.sleep(max(0.0, start + 0.6 - time.time()))
    receiver.send(traffic(start + 0.3, 10, 200, 0.002))
    soon = traffic(start + 1.3, 7, 200, 0.002)  # the next window's: 0.7 s ahead, it waits
    receiver.send(soon)
    window = wait_for(lambda: served(receiver.windows(), start), timeout_s=10)
    assert window["requests"] == 10
    following = wait_for(lambda: served(receiver.windows(), start + 1), timeout_s=10)
    assert following["requests"] == 7
    # publication goes on, one window per second (closed by the receiver's clock)
    wait_for(lambda: served(receiver.windows(), start + 3), timeout_s=10)
    starts = [_epoch(w["window_start"]) for w in receiver.windows()]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert receiver.counters()["record_datagrams_ahead"] == len(ahead)


@pytest.mark.slow
def test_a_hundred_thousand_services_stay_bounded(tmp_path):
    """A lab receiver (--insecure-records, any sender): 100k services in three windows. Bounded
    by ``MAX_SERVICES`` per window, the rest counted; the process's peak memory stays far from
    the 1 GB the unbounded analyser reached."""
    running = Receiver(tmp_path, "--insecure-records")
    try:
        baseline = running.peak_rss_mb()
        for round_ in range(3):
            start = next_window(time.time())
            buffer = RecordBuffer(Counter(), rate=1e9)
            for number in range(34_000):
                address = (number + 34_000 * round_).to_bytes(4, "big")
                buffer.request((address, 80), start + 0.3 + number * 1e-6)
            time.sleep(max(0.0, start + 0.2 - time.time()))
            datagrams = buffer.take(partial=True)
            for part in range(0, len(datagrams), 100):
                running.send(datagrams[part : part + 100], source=STRANGER)
                time.sleep(0.005)  # the receive buffer is 8 MB: no drop to hide the bound
        wait_for(lambda: len(running.windows()) >= 4, timeout_s=15)
        peak = running.peak_rss_mb()
        counters = running.counters()
    finally:
        running.stop()
    largest = max(len(w["services"]) for w in running.windows())
    assert largest == 4096  # MAX_SERVICES
    assert counters["services_over_limit"] > 0
    assert peak - baseline < 300, (baseline, peak)
    assert os.path.getsize(running.state / "windows.jsonl") < 200 << 20
