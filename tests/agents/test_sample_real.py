"""The ``sample`` local mechanism on real OVS (the twins of test_sample.py's fake-host tests).

``test_sample_plan_in_the_sandbox`` uses the agents' sandbox (fixed device names: run it under
``flock /tmp/cosample-ovs.lock``): the rows and the flow an agent writes, a second cycle with no
write, a rollback and a garbage plan refused without a write, back to sFlow removing everything.

``test_sampled_share_on_real_traffic`` (names randomised per run, no lock needed): a userspace
ovs-vswitchd in a namespace with two VM namespaces; ``cosample agent apply`` converges a plan
whose host samples at P = 26214/65535 (0.4); VM1 sends K UDP packets to VM2 through a flow of
someone else's at a priority above every agent flow (a stand-in for the agents' own drop and
application-monitoring flows: a packet meets it after the sample flow). The IPFIX records
(decoded by tshark's ``cflow``) count the packets sampled: within 5 binomial standard deviations
of K P (none escaped, none drawn twice), each record in the plan's observation domain with the
observation point id P. OVS writes ``65535 // P`` per sampled packet into ``packetDeltaCount``
(integer division: 2 at P = 26214), so the sampled count is the sum divided by that. Needs root, namespaces, OVS, tcpdump, tshark; about 15 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
from agentsandbox import BRIDGE, agent

from cosample.agents.sample import SAMPLE_COOKIE
from cosample.dataplane.ipfix import SAMPLE_COLLECTOR_SET_ID
from cosample.dataplane.run import run
from cosample.lab.netns import Lab, netns_available
from cosample.lab.ovs import OvsInstance, ovs_available

PROBABILITY, DOMAIN = 26214, 167772161
PACKETS, PPS, PORT, IPFIX_TARGET_PORT = 4000, 2000, 9979, 14739


def sample_plan(
    version: int,
    *,
    probability: int | None = PROBABILITY,
    bridge: str,
    vm_ports=None,
    ipfix_target: str = "127.0.0.1:4739",
) -> dict:
    """Host s1 alone, sampling with the sample action (``probability``) or with sFlow 1-in-4."""
    host = {"role": "sender", "bridge": bridge, "mirrors": [], "receives": []}
    if vm_ports:
        host["vm_ports"] = list(vm_ports)
    if probability is None:
        host.update(local_rate=0.25, sflow_sampling=4)
    else:
        host.update(
            local_mechanism="sample",
            sflow_sampling=None,
            local_rate=probability / 65535,
            sample_probability=probability,
            observation_domain=DOMAIN,
        )
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "version": version,
        "created": stamp(now - 60 + version),
        "expires": stamp(now + 3600),
        "plan_id": f"sample-{version}",
        "sflow": {"collector": "127.0.0.1:6343", "agent": "127.0.0.1"},
        "ipfix": {"collector": ipfix_target},
        "hosts": {"s1": host},
    }


def exporter_rows(ovs) -> tuple[list, list]:
    def table(name, columns):
        out = json.loads(ovs.vsctl("--format=json", f"--columns={columns}", "list", name))
        return [dict(zip(out["headings"], row)) for row in out["data"]]

    return (
        table("Flow_Sample_Collector_Set", "id,external_ids"),
        table("IPFIX", "targets,cache_active_timeout,cache_max_flows,external_ids"),
    )


def sample_flows(ovs, bridge: str) -> list[str]:
    out = ovs.ofctl(
        "--no-stats",
        "dump-flows",
        f"unix:{ovs.directory}/{bridge}.mgmt",
        f"cookie={SAMPLE_COOKIE:#x}/-1",
    )
    return [line.strip() for line in out.splitlines() if "cookie=" in line]


# the sandbox ---------------------------------------------------------------------------------
def test_sample_plan_in_the_sandbox(sandbox):
    ovs, config, plan_path, write_plan = sandbox
    write_plan(sample_plan(10, bridge=BRIDGE))
    a = agent(config)
    assert a.cycle().result == "ok"
    sets, ipfixes = exporter_rows(ovs)
    assert [(r["id"], r["external_ids"]) for r in sets] == [
        (SAMPLE_COLLECTOR_SET_ID, ["map", [["cosample-owner", "agent"]]])
    ]
    assert [(r["targets"], r["cache_active_timeout"], r["cache_max_flows"]) for r in ipfixes] == [
        ("127.0.0.1:4739", 1, 1024)
    ]
    [flow] = sample_flows(ovs, BRIDGE)
    assert (
        f"sample(probability={PROBABILITY},collector_set_id={SAMPLE_COLLECTOR_SET_ID},"
        f"obs_domain_id={DOMAIN},obs_point_id={PROBABILITY})" in flow
    )
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() == "[]"
    report = agent(config).cycle()  # a second agent, a second pass: nothing to write
    assert report.result == "ok" and report.commands == ()
    assert report.desired["local_mechanism"] == "sample"
    good = exporter_rows(ovs), sample_flows(ovs, BRIDGE), plan_path.read_bytes()

    write_plan(sample_plan(9, probability=1000, bridge=BRIDGE))  # a rollback
    b = agent(config)
    assert b.cycle().plan_version == 10 and b.host.writes == 0
    plan_path.write_bytes(b'{"format": "cosample.plan", "hosts": 7')  # garbage
    b = agent(config)
    assert b.cycle().errors and b.host.writes == 0
    bad = sample_plan(11, bridge=BRIDGE)
    bad["hosts"]["s1"]["sflow_sampling"] = 2  # both mechanisms at once
    write_plan(bad)
    b = agent(config)
    report = b.cycle()
    assert "hosts.s1.sflow_sampling" in " ".join(report.errors) and b.host.writes == 0
    assert (exporter_rows(ovs), sample_flows(ovs, BRIDGE)) == good[:2]

    write_plan(sample_plan(12, probability=1000, bridge=BRIDGE))
    assert agent(config).cycle().result == "ok"
    [flow] = sample_flows(ovs, BRIDGE)
    assert "probability=1000," in flow and exporter_rows(ovs) == good[0]

    write_plan(sample_plan(13, probability=None, bridge=BRIDGE))  # back to sFlow
    assert agent(config).cycle().result == "ok"
    assert exporter_rows(ovs) == ([], []) and sample_flows(ovs, BRIDGE) == []
    assert (
        ovs.vsctl(
            "get", "sFlow", ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip(), "sampling"
        ).strip()
        == "4"
    )


# real traffic --------------------------------------------------------------------------------
SENDER = r"""
import socket, sys, time
dst, port, count, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
for i in range(count):
    sock.sendto(i.to_bytes(8, "big") + b"sample-plan", (dst, port))
    delay = start + (i + 1) / pps - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""
#: OVS exports on a connected UDP socket: without a listener, ICMP errors lose every other
#: message (docs/ovs-facts.md), so a socket stays bound at the target.
SINK = r"""
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", int(sys.argv[1])))
print("bound", flush=True)
time.sleep(120)
"""


@pytest.fixture
def lab():
    reason = ovs_available() or netns_available()
    if reason:
        pytest.skip(f"needs root, namespaces and OVS: {reason}")
    with Lab.unique("cs") as lab:
        yield lab


def agent_cli(lab: Lab, namespace: str, *args: str) -> str:
    result = run(
        lab.exec_argv(namespace, [sys.executable, "-m", "cosample", "agent", *args]),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def ipfix_records(capture, ipfix_port: int, dst_port: int) -> list[tuple[int, int, int]]:
    """(observation domain, observation point id, packetDeltaCount) of every IPFIX data record
    for UDP destination ``dst_port`` in ``capture``, decoded by tshark (one record per flow and
    export interval: the exporter's cache is on)."""
    out = run(
        ["tshark", "-r", str(capture), "-d", f"udp.port=={ipfix_port},cflow", "-T", "json"],
        timeout=60,
    ).stdout
    records = []
    for packet in json.loads(out or "[]"):
        message = packet["_source"]["layers"].get("cflow", {})
        for key, flow_set in message.items():
            if not key.startswith("Set") or not isinstance(flow_set, dict):
                continue
            for name, record in flow_set.items():
                if name.startswith("Flow") and record.get("cflow.dstport") == str(dst_port):
                    records.append(
                        (
                            int(message["cflow.od_id"]),
                            int(record["cflow.observation_point_id"]),
                            int(record["cflow.packets"]),
                        )
                    )
    return records


def test_sampled_share_on_real_traffic(lab, tmp_path):
    p = lab.prefix
    host = lab.namespace("h")
    vm1 = lab.veth(f"{p}a", lab.namespace("a"), address="10.218.0.1/24", host_namespace=host)
    vm2 = lab.veth(f"{p}b", lab.namespace("b"), address="10.218.0.2/24", host_namespace=host)
    bridge = f"{p}br"
    plan_path, config = tmp_path / "plan.json", tmp_path / "agent.toml"
    target = f"127.0.0.1:{IPFIX_TARGET_PORT}"
    with OvsInstance(tmp_path / "ovs", dummy=False, namespace=host) as ovs:
        ovs.vsctl(
            "add-br",
            bridge,
            "--",
            "set",
            "Bridge",
            bridge,
            "datapath_type=netdev",
            "--",
            "add-port",
            bridge,
            vm1,
            "--",
            "add-port",
            bridge,
            vm2,
        )
        ovs.wait_for_ports(vm1, vm2)
        management = f"unix:{ovs.directory}/{bridge}.mgmt"
        # someone else's flow above every agent flow but the sample flow, ending in NORMAL
        ovs.ofctl("add-flow", management, f"priority=50000,udp,tp_dst={PORT},actions=NORMAL")
        config.write_text(
            f'host = "s1"\nplan = "{plan_path}"\novsdb = "{ovs.remote}"\n'
            f'state_dir = "{tmp_path / "state"}"\ninsecure_unsigned = true\n'
        )
        plan_path.write_text(
            json.dumps(sample_plan(1, bridge=bridge, vm_ports=(vm1, vm2), ipfix_target=target))
        )
        sink = subprocess.Popen(
            lab.exec_argv(host, [sys.executable, "-c", SINK, str(IPFIX_TARGET_PORT)]),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        capture = None
        try:
            assert sink.stdout.readline().strip() == b"bound"
            # from before the exporter exists: data records decode only with their templates
            capture = subprocess.Popen(
                lab.exec_argv(
                    host,
                    [
                        "tcpdump",
                        "-i",
                        "lo",
                        "-U",
                        "-w",
                        str(tmp_path / "ipfix.pcap"),
                        "udp",
                        "port",
                        str(IPFIX_TARGET_PORT),
                    ],
                ),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            capture.stderr.readline()  # "listening on ...": the capture is open
            assert "ok: plan version 1" in agent_cli(
                lab, host, "apply", "--once", "--config", str(config)
            )
            assert "0 command(s)" in agent_cli(lab, host, "apply", "--config", str(config))
            for vm, peer in (("a", "10.218.0.2"), ("b", "10.218.0.1")):  # ARP, MAC learning
                run(
                    lab.exec_argv(
                        f"{p}{vm}", [sys.executable, "-c", SENDER, peer, str(PORT + 1), "20", "100"]
                    ),
                    timeout=30,
                )
            run(
                lab.exec_argv(
                    f"{p}a",
                    [sys.executable, "-c", SENDER, "10.218.0.2", str(PORT), str(PACKETS), str(PPS)],
                ),
                timeout=60,
            )
            time.sleep(3.0)  # the cache's active timeout is 1 s: every record has left
            forwarded = ovs.ofctl("dump-flows", management, f"udp,tp_dst={PORT}")
            plan_path.write_text(
                json.dumps(sample_plan(2, probability=None, bridge=bridge, vm_ports=(vm1, vm2)))
            )
            assert "ok: plan version 2" in agent_cli(
                lab, host, "apply", "--once", "--config", str(config)
            )
            after_sflow = exporter_rows(ovs), sample_flows(ovs, bridge)
        finally:
            for process in (capture, sink):
                if process is not None:
                    process.terminate()
                    process.wait(timeout=10)
            agent_cli(lab, host, "remove", "--config", str(config))
    records = ipfix_records(tmp_path / "ipfix.pcap", IPFIX_TARGET_PORT, PORT)
    # OVS counts each sampled packet as 65535 // P packets in packetDeltaCount
    # (ofproto-dpif-ipfix.c: "USHRT_MAX / probability"; docs/ovs-facts.md)
    per_sample = 65535 // PROBABILITY
    assert all(count % per_sample == 0 for _, _, count in records)
    sampled = sum(count for _, _, count in records) // per_sample
    share = PROBABILITY / 65535
    print(
        f"\n{PACKETS} packets sent; IPFIX records {len(records)}, sampled packets "
        f"{sampled} (planned {PACKETS * share:.0f}); {forwarded.strip().splitlines()[-1]}"
    )
    assert records and {(d, pt) for d, pt, _ in records} == {(DOMAIN, PROBABILITY)}
    assert abs(sampled - PACKETS * share) <= 5 * math.sqrt(PACKETS * share * (1 - share))
    n_packets = int(forwarded.split("n_packets=")[1].split(",")[0])
    assert n_packets >= PACKETS  # the other flow still ran for every packet after sampling
    assert after_sflow == (([], []), [])


def test_the_fake_host_says_what_the_real_one_says(sandbox):
    """Command for command, for a sample plan and back to sFlow (cf. test_sandbox)."""
    from cosample.agents.desired import desired_state
    from cosample.agents.fakehost import FakeHost
    from cosample.agents.reconcile import reconcile
    from cosample.plan.document import plan_from_dict

    _, config, _, write_plan = sandbox
    write_plan(sample_plan(1, bridge=BRIDGE))
    real = agent(config)
    fake = FakeHost(bridge=BRIDGE)
    for version, probability in ((1, PROBABILITY), (2, 1000), (3, None)):
        desired = desired_state(
            plan_from_dict(sample_plan(version, probability=probability, bridge=BRIDGE)),
            real.config,
        )
        real_commands = reconcile(desired, real.host.observe(BRIDGE))
        fake_commands = reconcile(desired, fake.observe(BRIDGE))
        assert _without_uuids(real_commands) == _without_uuids(fake_commands), version
        for command in real_commands:
            real.host.apply(command)
        for command in fake_commands:
            fake.apply(command)
        assert reconcile(desired, real.host.observe(BRIDGE)) == []
        assert reconcile(desired, fake.observe(BRIDGE)) == []


def _without_uuids(commands):
    """Commands with the OVSDB row ids (the fake's are its own) replaced by a mark."""
    from dataclasses import fields, replace

    return [
        replace(
            c,
            **{
                f.name: "UUID"
                for f in fields(c)
                if f.name in ("uuid", "ipfix_uuid") and getattr(c, f.name)
            },
        )
        for c in commands
    ]


def test_collector_change_in_place_and_bridge_change(sandbox):
    """A new IPFIX collector updates the IPFIX row in place (same set); a host moved to another
    bridge leaves no row and no flow on the old one."""
    ovs, config, _, write_plan = sandbox
    write_plan(sample_plan(1, bridge=BRIDGE))
    assert agent(config).cycle().result == "ok"
    uuids = ovs.vsctl("--columns=_uuid", "--bare", "list", "Flow_Sample_Collector_Set").split()
    write_plan(sample_plan(2, bridge=BRIDGE, ipfix_target="127.0.0.1:4740"))
    report = agent(config).cycle()
    assert report.result == "ok" and len(report.commands) == 1, report.commands
    assert (
        ovs.vsctl("--columns=_uuid", "--bare", "list", "Flow_Sample_Collector_Set").split() == uuids
    )
    assert [r["targets"] for r in exporter_rows(ovs)[1]] == ["127.0.0.1:4740"]
    other = "cabr9"
    ovs.vsctl("add-br", other, "--", "set", "Bridge", other, "datapath_type=dummy")
    try:
        moved = agent(config, bridge=other)
        assert moved.cycle().result == "ok"
        assert sample_flows(ovs, BRIDGE) == [] and len(sample_flows(ovs, other)) == 1
        sets = json.loads(
            ovs.vsctl("--format=json", "--columns=bridge", "list", "Flow_Sample_Collector_Set")
        )["data"]
        bridge_uuid = ovs.vsctl("get", "Bridge", other, "_uuid").strip()
        assert sets == [[["uuid", bridge_uuid]]]
        assert moved.cycle().commands == ()
        agent(config, bridge=other).remove()
        assert exporter_rows(ovs) == ([], []) and sample_flows(ovs, other) == []
    finally:
        ovs.vsctl("--if-exists", "del-br", other)
