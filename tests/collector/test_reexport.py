"""Re-export checked by a real pmacct ``sfacctd``: its per-agent counts are each server's traffic."""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from cosample.collector.pcap import write_pcap
from cosample.collector.replay import replay
from cosample.intervals import stochastic_round
from cosample.lab.pmacct import count_capture, sfacctd_available
from cosample.lab.sflowstream import simulate

TRUTH = {"s1": 40_000, "s2": 2_000, "s3": 4_000, "s4": 16_000}


def test_stochastic_rounding_is_unbiased():
    rng = random.Random(1)
    for value in (0.3, 1.0, 2.5, 63.9):
        draws = [stochastic_round(value, rng.random()) for _ in range(20_000)]
        assert set(draws) <= {int(value), int(value) + 1}
        assert sum(draws) / len(draws) == pytest.approx(value, rel=0.02)


class Receiver:
    """The downstream end of the re-export: a UDP socket drained by a thread, kept as (time, bytes)."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.datagrams: list[tuple[float, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.datagrams.append((time.time(), self.socket.recv(65535)))
            except OSError:
                continue

    def close(self) -> list[tuple[float, bytes]]:
        time.sleep(0.5)
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()
        return self.datagrams


@pytest.mark.skipif(sfacctd_available() is not None, reason=str(sfacctd_available()))
def test_sfacctd_counts_each_server_right_from_the_reexport(tmp_path, write_plan, four_plan):
    """Raw, sfacctd books s1's copies under s2 and s3; re-exported, it counts every server right."""
    stream = simulate(four_plan, TRUTH, duration_s=4.0, seed=12)
    capture = write_pcap(tmp_path / "in.pcap", stream.datagrams)
    receiver = Receiver()
    snapshot = replay(str(write_plan()), capture, reexport=receiver.socket.getsockname())
    reexported = write_pcap(tmp_path / "out.pcap", receiver.close())
    agents = {f"172.29.0.{k + 1}": name for k, name in enumerate(sorted(TRUTH))}
    raw = {agents[a]: n for a, n in count_capture(tmp_path / "raw", capture).items()}
    fixed = {agents[a]: n for a, n in count_capture(tmp_path / "fixed", reexported).items()}
    assert raw["s2"] > 5 * TRUTH["s2"]  # the problem: another server's copies, scaled by 1
    assert set(fixed) == set(TRUTH)
    for server, packets in TRUTH.items():
        low, high = (b * snapshot.window_s for b in snapshot.servers[server].packets_per_s_ci95)
        slack = 0.02 * packets + 5  # stochastic rounding adds a little variance of its own
        assert low - slack <= fixed[server] <= high + slack, (server, fixed[server], low, high)
    assert fixed["s2"] == TRUTH["s2"]  # sampled 1-in-1: exact
