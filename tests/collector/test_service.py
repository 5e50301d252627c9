"""``collector run`` as a daemon on loopback: real UDP in, real HTTP scrapes out, plan changes.

The plans' agent addresses are 127.29.0.k and every datagram is sent from the agent address it
names (``AgentSender``), as the collector's source check requires.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from collector_daemon import served_snapshot
from collector_plans import FOUR, plan_document
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from cosample.cli import build_parser
from cosample.collector import snapshotbin
from cosample.collector.merge import merge_snapshots
from cosample.collector.service import Service, Settings
from cosample.collector.snapshot import parse_snapshot
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import simulate
from cosample.plan.document import parse_plan

TRUTH = {"s1": 20_000, "s2": 1_000, "s3": 2_000, "s4": 8_000}
LOOPBACK = "127.29.0"  # the agents' addresses: local on loopback, so senders can use them


@pytest.fixture
def four_plan():
    return parse_plan(json.dumps(plan_document(FOUR, agents=LOOPBACK)).encode())


@pytest.fixture
def write_plan(tmp_path):
    def write(hosts=FOUR, name="plan.json", **kwargs):
        path = tmp_path / name
        path.write_text(json.dumps(plan_document(hosts, agents=LOOPBACK, **kwargs)))
        return path

    return write


class Running:
    """A Service in a thread; ``send`` replays datagrams from one socket per agent."""

    def __init__(self, settings: Settings) -> None:
        self.service = Service(settings, log=lambda line: None).start()
        self.thread = threading.Thread(target=self.service.run, daemon=True)
        self.thread.start()
        self.sockets = AgentSender()

    @property
    def url(self) -> str:
        host, port = self.service.http_address
        return f"http://{host}:{port}"

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return response.read()

    def snapshot(self):
        """The snapshot, or None before the first export (``served_snapshot``)."""
        return served_snapshot(self.get)

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(timeout=10)
        self.sockets.close()


def send(
    datagrams, target, sender: AgentSender, pace_every: int = 200, source: str | None = None
) -> None:
    """Each datagram from its agent's address (or from ``source``: a forgery)."""
    for k, (_, data) in enumerate(datagrams):
        sender.send(data, target, source)
        if k % pace_every == 0:
            time.sleep(0.002)  # stay within the receive buffer on a busy machine


def settings(plan_path, **kwargs) -> Settings:
    values = dict(
        listen=("127.0.0.1", 0),
        plan=str(plan_path),
        name="c1",
        metrics_port=0,
        window_s=600.0,
        export_s=0.2,
        plan_interval_s=0.2,
        insecure_unsigned=True,
    )
    values.update(kwargs)
    return Settings(**values)


def test_daemon_estimates_and_serves_snapshot_and_metrics(write_plan, four_plan, tmp_path):
    stream = simulate(four_plan, TRUTH, duration_s=3.0, seed=6)
    events = tmp_path / "events.jsonl"
    running = Running(settings(write_plan(), state_dir=tmp_path / "state", events=str(events)))
    try:
        send(stream.datagrams, running.service.listen_address, running.sockets)
        send([(0, b"\0\0\0\5\0\0\0\1ga")] * 3, running.service.listen_address, running.sockets)
        snapshot = wait_for(
            lambda: (
                (s := running.snapshot())
                and s.dropped.get("truncated") == 3
                and sum(e.samples for e in s.servers.values()) == stream.samples
                and s
            )
        )
        metrics = running.get("/metrics").decode()
        binary = snapshotbin.decode(running.get("/snapshot.bin"), "/snapshot.bin")
        assert binary.collector == "c1" and set(binary.servers) == set(snapshot.servers)
        assert running.get("/healthz") == b"ok\n"
        with pytest.raises(urllib.error.HTTPError):
            running.get("/nothing")
    finally:
        running.stop()
    for server, packets in TRUTH.items():
        e = snapshot.servers[server]
        assert e.samples > 0 and e.packets_per_s > 0
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    gauge = {
        s.labels["server"]: s.value
        for s in families["cosample_collector_packets_per_second"].samples
    }
    assert set(gauge) == set(FOUR) and all(v > 0 for v in gauge.values())
    dropped = {s.labels["reason"]: s.value for s in families["cosample_collector_dropped"].samples}
    assert dropped["truncated"] == 3
    written = parse_snapshot((tmp_path / "state" / "snapshot.json").read_bytes())
    assert written.collector == "c1"
    # the binary form written beside it, by the same export: the same snapshot
    assert (
        snapshotbin.decode((tmp_path / "state" / "snapshot.bin").read_bytes()).estimates()
        == written.estimates()
    )
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert {line["key"] for line in lines} >= {"s1.packets_per_s", "s4.bytes_per_s"}


def test_plan_changes_are_followed_and_bad_plans_keep_the_last_good(write_plan, tmp_path):
    path = write_plan(version=7)
    running = Running(settings(path))
    try:
        wait_for(lambda: running.service.snapshot and running.service.snapshot.plan.version == 7)
        write_plan(version=8)
        wait_for(lambda: running.service.snapshot.plan.version == 8)
        path.write_text("{not json")
        wait_for(lambda: running.service.status.plan_errors >= 2)
        assert running.service.snapshot.plan.version == 8
        metrics = running.get("/metrics").decode()
        assert "cosample_collector_plan_version 8.0" in metrics
    finally:
        running.stop()


def test_two_instances_owning_agent_sets_merge_to_the_truth(write_plan, four_plan):
    """s1's local samples reach instance a, its copies mirrored to s3 reach instance b."""
    stream = simulate(four_plan, TRUTH, duration_s=3.0, seed=8)
    a = Running(settings(write_plan(), name="a", partial=True))
    b = Running(settings(write_plan(), name="b", partial=True))
    owner = {bytes([127, 29, 0, k]): (a if k <= 2 else b) for k in range(1, 5)}
    try:
        for instance in (a, b):
            send(
                [item for item in stream.datagrams if owner[item[1][8:12]] is instance],
                instance.service.listen_address,
                instance.sockets,
            )
        parts = [
            wait_for(
                lambda i=i: (
                    (s := i.snapshot())
                    and sum(e.samples for e in s.servers.values()) == sum(1 for _ in ()) + expected
                    and s
                )
            )
            for i, expected in ((a, _samples(stream, owner, a)), (b, _samples(stream, owner, b)))
        ]
    finally:
        a.stop()
        b.stop()
    assert parts[0].servers["s1"].local_samples > 0 and parts[1].servers["s1"].mirrored_samples > 0
    merged = merge_snapshots(parts)
    for server, packets in TRUTH.items():
        low, high = merged.servers[server].packets_per_s_ci95
        window = min(p.window_s for p in parts)
        assert low * window * 0.98 <= packets <= high * window * 1.02, server


def _samples(stream, owner, instance) -> int:
    from cosample.collector.decode import parse_datagram

    return sum(
        len(parse_datagram(d).flow_samples)
        for _, d in stream.datagrams
        if owner[d[8:12]] is instance
    )


def test_run_command_line_parses():
    args = build_parser().parse_args(
        [
            "collector",
            "run",
            "--plan",
            "p.json",
            "--listen",
            "0.0.0.0:6343",
            "--metrics-port",
            "9108",
            "--reuse-port",
        ]
    )
    assert args.reuse_port and args.metrics_port == 9108 and args.window == 30.0


def test_run_rejects_a_bad_listen_address(capsys):
    from cosample.cli import main

    assert main(["collector", "run", "--plan", "p.json", "--listen", "nowhere"]) == 2
    assert "--listen: expected HOST:PORT" in capsys.readouterr().err


def test_reuse_port_instances_share_one_address_and_merge_exactly(write_plan, four_plan):
    """SO_REUSEPORT: the kernel picks an instance per agent socket; the merge counts every sample once."""
    stream = simulate(four_plan, TRUTH, duration_s=3.0, seed=10)
    a = Running(settings(write_plan(), name="a", reuse_port=True))
    port = a.service.listen_address[1]
    b = Running(settings(write_plan(), name="b", reuse_port=True, listen=("127.0.0.1", port)))
    try:
        sockets = AgentSender()
        send(stream.datagrams, ("127.0.0.1", port), sockets)

        def merged():
            parts = [i.snapshot() for i in (a, b)]
            if None in parts:
                return False
            total = sum(e.samples for p in parts for e in p.servers.values())
            return total == stream.samples and merge_snapshots(parts)

        result = wait_for(merged)
        sockets.close()
    finally:
        a.stop()
        b.stop()
    assert sorted(result.agents) == [f"{LOOPBACK}.{k}" for k in range(1, 5)]
    for server, packets in TRUTH.items():
        low, high = result.servers[server].packets_per_s_ci95
        assert low * result.window_s * 0.98 <= packets <= high * result.window_s * 1.02, server


@pytest.mark.parametrize("path", ["/snapshot", "/snapshot.bin"])
def test_an_export_not_yet_rendered_is_503_not_an_empty_unsigned_body(
    write_plan, path, monkeypatch
):
    """``export`` sets the snapshot, then the writer thread renders and signs it: a request
    between the two (a controller polling a collector that just started) is told to come back,
    not served an empty body without its signature (seen as a controller's "unsigned snapshot;
    refused" in tests/controller/test_authenticity.py). The writer is held to stay between."""
    rendering, write = threading.Event(), Service._write
    monkeypatch.setattr(
        Service, "_write", lambda self, item: (rendering.wait(10), write(self, item))
    )
    service = Service(settings(write_plan()), log=lambda line: None).start()
    try:
        host, port = service.http_address
        url = f"http://{host}:{port}{path}"
        assert service.snapshot is not None  # start() exported once; the writer is held
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 503
        rendering.set()
        assert wait_for(lambda: _fetched(url))  # rendered: served
    finally:
        rendering.set()
        service.stop()


def _fetched(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read()
    except urllib.error.HTTPError:
        return None
