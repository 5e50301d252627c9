"""Drive the topology's flows with iperf3: constant-rate UDP between VM namespaces, bounded in time.

One iperf3 server (``--one-off``) per flow in the destination VM, one client in the source VM,
all clients started together; command lines and result parsing are ``costmodel.iperf``'s (the
project's one iperf3 driver), the orchestration of many concurrent flows is this module's; every process has a deadline and is killed by its PID if it
overstays. The result of a flow is what iperf3 itself measured: packets sent, packets lost (as
the receiver counted them), and the received packet rate.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cosample.costmodel import iperf
from cosample.costmodel.errors import HarnessError
from cosample.dataplane.run import run
from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import Flow, Topology

BASE_PORT = 5201
START_TIMEOUT_S = 10.0
GRACE_S = 20.0


@dataclass(frozen=True)
class FlowResult:
    """What iperf3 measured for one flow during one run."""

    flow: Flow
    seconds: float
    sent_packets: int
    lost_packets: int

    @property
    def received_packets(self) -> int:
        return self.sent_packets - self.lost_packets

    @property
    def received_pps(self) -> float:
        return self.received_packets / self.seconds if self.seconds > 0 else 0.0

    @property
    def loss_fraction(self) -> float:
        return self.lost_packets / self.sent_packets if self.sent_packets else 0.0


def netns_exec(namespace: str) -> list[str]:
    return ["ip", "netns", "exec", namespace]


def client_argv(flow: Flow, port: int, duration_s: float, packet_bytes: int) -> list[str]:
    """The iperf3 client for ``flow`` in its source VM: UDP datagrams of ``packet_bytes`` at ``flow.pps``."""
    bits_per_second = max(1, round(flow.pps * packet_bytes * 8))
    return netns_exec(flow.src.namespace) + iperf.client_argv(
        flow.dst.ip,
        port=port,
        duration_s=duration_s,
        protocol="udp",
        packet_bytes=packet_bytes,
        bandwidth=str(bits_per_second),
    )


def server_argv(flow: Flow, port: int) -> list[str]:
    """A one-client iperf3 server in the destination VM, on the VM's address only."""
    return netns_exec(flow.dst.namespace) + iperf.server_argv(port, bind=flow.dst.ip, one_off=True)


def parse_client_json(flow: Flow, text: str) -> FlowResult:
    """A ``FlowResult`` from iperf3's JSON client output (UDP), parsed by the one iperf3 driver."""
    try:
        result = iperf.parse_client_json(text, "udp")
    except HarnessError as exc:
        raise TestbedError(f"{flow.src.name}->{flow.dst.name}: {exc}") from None
    return FlowResult(flow, result.seconds, result.packets, max(0, result.lost_packets))


def run_flows(
    topology: Topology, duration_s: float, flows: Sequence[Flow] | None = None
) -> list[FlowResult]:
    """Run every flow for ``duration_s`` seconds at once; returns their results in order."""
    flows = list(topology.flows if flows is None else flows)
    if not flows:
        return []
    servers: list[subprocess.Popen[str]] = []
    clients: list[subprocess.Popen[str]] = []
    try:
        for k, flow in enumerate(flows):
            servers.append(
                subprocess.Popen(
                    server_argv(flow, BASE_PORT + k),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for k, flow in enumerate(flows):
            _wait_listening(flow, BASE_PORT + k, servers[k])
        for k, flow in enumerate(flows):
            clients.append(
                subprocess.Popen(
                    client_argv(flow, BASE_PORT + k, duration_s, topology.packet_bytes),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = []
        deadline = time.monotonic() + duration_s + GRACE_S
        for flow, client in zip(flows, clients):
            try:
                out, err = client.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TestbedError(
                    f"iperf3 {flow.src.name}->{flow.dst.name}: no result within "
                    f"{duration_s + GRACE_S:g} s"
                ) from None
            if client.returncode != 0 and not out.strip():
                raise TestbedError(
                    f"iperf3 {flow.src.name}->{flow.dst.name}: exit "
                    f"{client.returncode}: {err.strip()[-200:]}"
                )
            results.append(parse_client_json(flow, out))
        return results
    finally:
        for process in clients + servers:
            _stop(process)


def _wait_listening(flow: Flow, port: int, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise TestbedError(
                f"iperf3 server in {flow.dst.namespace} exited: "
                f"{(server.stderr.read() if server.stderr else '').strip()[-200:]}"
            )
        listening = run(
            ["ip", "netns", "exec", flow.dst.namespace, "ss", "-Hltn", f"sport = :{port}"],
            check=False,
        ).stdout
        if listening.strip():
            return
        time.sleep(0.05)
    raise TestbedError(
        f"iperf3 server in {flow.dst.namespace} not listening on {port} "
        f"within {START_TIMEOUT_S:g} s"
    )


def _stop(process: subprocess.Popen[str]) -> None:
    """Terminate one process we started (by its PID) and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=3)
    for stream in (process.stdout, process.stderr):
        if stream:
            stream.close()
