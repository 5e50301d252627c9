"""What removes a forger holding an agent's address: source address validation at the first hop
(docs/collector.md, "Removing it: an authenticated management network"), with the commands the
page gives, run as written.

A collector's network namespace has a link to each of two hosts' namespaces (a routed
management network, one link per host); the real daemon listens in it. Host 2 sends a
datagram claiming host 1's agent address, from that address (``IP_TRANSPARENT``), over its own
link. Before the commands the kernel delivers it and it is counted as host 1's (the control:
the collector's own admission cannot tell, the UDP source is the agent's); after them the kernel
drops it (strict reverse-path filtering: ``IPReversePathFilter``), and both hosts' own
datagrams are still counted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from collector_daemon import Daemon
from waiting import wait_for

from cosample.collector.snapshot import parse_snapshot
from cosample.lab.netns import Lab, netns_available

PAGE = Path(__file__).resolve().parents[2] / "docs" / "collector.md"
HOST1, HOST2 = "10.41.1.2", "10.41.2.2"

pytestmark = pytest.mark.skipif(netns_available() is not None, reason=str(netns_available()))

#: Sends one sFlow datagram of one flow sample (1-in-16) from AGENT to TARGET:PORT, numbered N.
SEND = """
import sys
from cosample.collector.encode import SampleSpec, datagram, flow_sample
from cosample.lab.agentsource import AgentSender
from cosample.lab.sflowstream import frame, vm_address
agent, target, port, number = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
header, length = frame(vm_address(0), vm_address(1, 2), 500)
spec = SampleSpec(number, 16, 16 * number, header, length, source_index=int(sys.argv[5]))
with AgentSender() as sender:
    sender.send(datagram(agent, number, 1000 * number, [flow_sample(spec)]), (target, port))
"""


def documented_commands() -> list[str]:
    section = PAGE.read_text().split("### Removing it: an authenticated management network", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "no sh block under 'Removing it' in docs/collector.md"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def reverse_path_drops(namespace: str) -> int:
    text = subprocess.run(
        ["ip", "netns", "exec", namespace, "cat", "/proc/net/netstat"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.splitlines()
    names, values = (line.split() for line in text if line.startswith("TcpExt:"))
    return int(values[names.index("IPReversePathFilter")])


def test_strict_reverse_path_filtering_stops_a_forged_agent_address(tmp_path):
    commands = documented_commands()
    assert commands == [
        "sysctl -w net.ipv4.conf.all.rp_filter=1",
        "sysctl -w net.ipv4.conf.default.rp_filter=1",
    ]
    plan = {
        "format": "cosample.plan",
        "format_version": 1,
        "version": 1,
        "created": "2020-01-01T00:00:00Z",
        "expires": "2099-01-01T00:00:00Z",
        "plan_id": "d" * 64,
        "hosts": {
            name: {
                "role": "sender",
                "local_rate": 1 / 16,
                "sflow_sampling": 16,
                "mirrors": [],
                "receives": [],
                "tunnel_ip": agent,
            }
            for name, agent in (("h1", HOST1), ("h2", HOST2))
        },
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    with Lab(prefix=f"i41v{os.getpid() % 100000}") as lab:
        collector = lab.namespace("c")
        hosts = [lab.namespace("h1"), lab.namespace("h2")]
        for k, host in enumerate(hosts, start=1):
            end = lab.veth(
                f"{lab.prefix}l{k}", host, "eth0", f"10.41.{k}.2/30", host_namespace=collector
            )
            subprocess.run(
                ["ip", "-n", collector, "addr", "add", f"10.41.{k}.1/30", "dev", end],
                check=True,
                timeout=10,
            )
        for link in ("all", "default", f"{lab.prefix}l1", f"{lab.prefix}l2"):  # before: none
            subprocess.run(
                ["ip", "netns", "exec", collector, "sysctl", "-qw"]
                + [f"net.ipv4.conf.{link}.rp_filter=0"],
                check=True,
                timeout=10,
            )
        daemon = Daemon(
            path,
            "--insecure-unsigned",
            "--listen",
            "0.0.0.0:0",
            "--state-dir",
            str(tmp_path / "state"),  # its HTTP is on the namespace's loopback: read the file
            prefix=("ip", "netns", "exec", collector),
        )
        port = daemon.listen[1]
        number = 0

        def send(host: str, agent: str, target: str) -> None:
            nonlocal number
            number += 1
            subprocess.run(
                ["ip", "netns", "exec", host, sys.executable, "-c", SEND]
                + [agent, target, str(port), str(number), str(number)],
                check=True,
                timeout=30,
            )

        def samples() -> dict[str, int] | None:
            try:
                snapshot = parse_snapshot((tmp_path / "state" / "snapshot.json").read_bytes())
            except FileNotFoundError:  # before the first export
                return None
            return {name: snapshot.servers[name].samples for name in ("h1", "h2")}

        try:
            send(hosts[1], HOST1, "10.41.2.1")  # host 2, claiming host 1, over its own link
            before = wait_for(lambda: (s := samples()) and s["h1"] == 1 and s)
            dropped = reverse_path_drops(collector)
            for command in commands:  # as the page gives them, on the collector
                subprocess.run(
                    ["ip", "netns", "exec", collector, *command.split()], check=True, timeout=10
                )
            send(hosts[1], HOST1, "10.41.2.1")  # the same forgery
            send(hosts[0], HOST1, "10.41.1.1")  # host 1's own
            send(hosts[1], HOST2, "10.41.2.1")  # host 2's own
            after = wait_for(lambda: (s := samples()) and s["h1"] == 2 and s["h2"] == 1 and s)
            assert wait_for(lambda: reverse_path_drops(collector) > dropped)
        finally:
            daemon.stop()
    assert before == {"h1": 1, "h2": 0}  # the control: the forgery counted as host 1's
    assert after == {"h1": 2, "h2": 1}  # the forgery dropped, the hosts' own counted
