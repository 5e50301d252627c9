"""Kernel drops are a number an operator sees (issue 48): a live analyser that could not keep up
says, in the window's snapshot and on /metrics, how many frames the kernel dropped, their share
of the window's frames, and that the window's counts are a lower bound.

A real ``appmon run --interface`` (a 1-MiB ring: four blocks) in a namespace of its own reads one
end of a veth pair; it is stopped (SIGSTOP) while 20,000 TCP frames arrive, so the ring fills and
the kernel drops the rest, then continued. A window with traffic and no drop is the control.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from waiting import wait_for

from cosample.appmon.pcap import tcp_frame
from cosample.lab.netns import Lab, netns_available


def frames(count: int, client: str) -> list[bytes]:
    """Requests of 50 connections to 10.9.0.2:80, each segment new data (no retransmission)."""
    payload = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    return [
        tcp_frame(
            client, "10.9.0.2", 40000 + n % 50, 80, 1 + (n // 50) * len(payload), 0x18, payload
        )
        for n in range(count)
    ]


def windows(state) -> list[dict]:
    path = state / "windows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.root
def test_a_window_with_kernel_drops_says_how_many_and_is_a_lower_bound(tmp_path):
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    lab = Lab(prefix=f"dr{os.getpid() % 100000}")
    analyser = None
    try:
        inside = lab.namespace("r")
        outside = lab.veth(f"{lab.prefix}s", namespace=inside, peer="eth0")
        state = tmp_path / "state"
        analyser = subprocess.Popen(
            lab.exec_argv(
                inside,
                [
                    sys.executable,
                    "-m",
                    "cosample",
                    "appmon",
                    "run",
                    "--interface",
                    "eth0",
                    "--ring-mib",
                    "1",
                    "--window",
                    "1s",
                    "--state-dir",
                    str(state),
                    "--duration",
                    "60s",
                ],
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert b"capturing on" in analyser.stderr.readline()
        sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        sender.bind((outside, 0))
        quiet = frames(500, "10.9.0.1")  # the control: read as it comes, no drop
        for frame in quiet:
            sender.send(frame)
        clean = wait_for(
            lambda: next((w for w in windows(state) if w.get("kernel_frames")), None), 15
        )
        analyser.send_signal(signal.SIGSTOP)
        try:
            burst = frames(20_000, "10.9.0.3")
            for frame in burst:
                sender.send(frame)
            time.sleep(0.3)  # the last block is handed over (100 ms)
        finally:
            analyser.send_signal(signal.SIGCONT)
        sender.close()
        lossy = wait_for(
            lambda: next((w for w in windows(state) if w.get("kernel_drops")), None), 15
        )
        metrics_state = windows(state)[-1]
    finally:
        if analyser is not None:
            if analyser.poll() is None:
                analyser.terminate()
            analyser.wait(timeout=30)
        lab.teardown()
    assert clean["kernel_frames"] == len(quiet) and clean["kernel_drops"] == 0
    assert clean["lower_bound"] is False and clean["kernel_drop_share"] == 0
    # four 256-KiB blocks hold a few thousand of these frames: most of the burst is dropped
    assert lossy["kernel_frames"] == len(burst)
    assert 0 < lossy["kernel_drops"] < len(burst)
    assert lossy["kernel_drop_share"] == pytest.approx(lossy["kernel_drops"] / len(burst))
    assert lossy["lower_bound"] is True
    served = sum(s["requests"] for s in lossy["services"])
    assert served == len(burst) - lossy["kernel_drops"]  # what was not dropped was counted
    assert metrics_state["dropped"]["kernel_drops"] == lossy["kernel_drops"]  # the total


def test_losses_per_window_and_on_metrics():
    """``Losses`` hands each closing window the part since the last one; /metrics shows the
    totals and the last window's ratios and lower-bound flag."""
    from cosample.appmon.losses import Losses
    from cosample.appmon.metrics import AppMetrics, State
    from cosample.appmon.snapshot import snapshot
    from cosample.appmon.windows import Window

    losses = Losses()
    losses.update(kernel_frames=1000, kernel_drops=0)
    first = losses.close(frames=True, records=False)
    losses.update(kernel_frames=5000, kernel_drops=1000, record_datagrams=9)
    second = losses.close(frames=True, records=True)
    assert (first.kernel_frames, first.kernel_drops, first.lower_bound) == (1000, 0, False)
    assert first.record_datagrams is None and first.record_loss_share is None
    assert (second.kernel_frames, second.kernel_drops) == (4000, 1000)
    assert second.kernel_drop_share == 0.25 and second.lower_bound
    assert (second.record_datagrams, second.record_loss_share) == (9, 0.0)
    snap = snapshot(
        Window(1.7e9, 1.0, {}),
        analyser="a",
        frames=4000,
        connections=0,
        dropped={"kernel_drops": 1000},
        ignored={},
        losses=second,
    )
    text = (
        AppMetrics(lambda: State(snapshot=snap, kernel_frames=5000, kernel_drops=1000))
        .text()
        .decode()
    )
    for line in (
        "cosample_appmon_kernel_frames_total 5000.0",
        "cosample_appmon_kernel_drops_total 1000.0",
        "cosample_appmon_kernel_drop_ratio 0.25",
        "cosample_appmon_record_loss_ratio 0.0",
        "cosample_appmon_window_lower_bound 1.0",
    ):
        assert line in text.splitlines()
