"""Issue 15's failures, each replayed against a real private OVS (and real ip/tc) as a regression.

The bad-plan corpus (``CORPUS``) is a table: mutation -> the message the rejection must carry.
Every entry goes through ``cosample agent apply --once`` on a host converged on a good plan and
must exit 2, report ``rejected``, leave OVS and tc exactly as they were and the last good plan
byte-identical. Add a row for every new way a plan can be wrong.
"""

from __future__ import annotations

import http.server
import json
import socketserver
import stat
import threading
import time
from datetime import timedelta

import pytest
from agentsandbox import (
    BRIDGE,
    PORT_PREFIX,
    VM_PORTS,
    agent,
    fingerprint,
    receiver_plan,
)

from cosample.agents import commands as c
from cosample.agents.runner import LAST_GOOD_FILE
from cosample.agents.state import SflowSettings, pair_vni, short_hash
from cosample.cli import main
from cosample.dataplane.run import run

pytestmark = pytest.mark.ovs


def _stamp(moment) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _tc(device: str) -> str:
    return run(["tc", "filter", "show", "dev", device, "ingress"]).stdout


def _host_state(ovs):
    """What OVS and tc look like, for before/after comparisons."""
    return ovs.vsctl("show"), ovs.vsctl("list", "sFlow"), _tc(VM_PORTS[0]), _tc(VM_PORTS[1])


def _set(path, value):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    mutate.__name__ = ".".join(map(str, path))
    return mutate


def _version_far_ahead(doc):
    doc["version"] = 10**30


def _sampling_2_40(doc):
    doc["hosts"]["s1"]["sflow_sampling"] = 2**40
    doc["hosts"]["s1"]["local_rate"] = 2.0**-40


def _sampling_1e30(doc):
    doc["hosts"]["s1"]["sflow_sampling"] = 10**30
    doc["hosts"]["s1"]["local_rate"] = 1e-30


def _mirrors_over_one(doc):
    doc["hosts"]["s1"]["mirrors"] = [{"to": "s2", "rate": 0.7}, {"to": "s3", "rate": 0.4}]
    doc["hosts"]["s2"]["receives"][0]["rate"] = 0.7
    doc["hosts"]["s3"]["receives"][0]["rate"] = 0.4


def _peer_ipv6_on_ipv4_host(doc):
    doc["hosts"]["s2"]["tunnel_ip"] = "2001:db8::2"


#: (mutation, text the one-line rejection must contain). Issue 15 items 1, 2, 7 and more.
CORPUS = [
    (_set(["hosts", "s2", "tunnel_ip"], "224.0.0.1"), "hosts.s2.tunnel_ip: expected a unicast"),
    (_set(["hosts", "s2", "tunnel_ip"], "fe80::1"), "hosts.s2.tunnel_ip: expected a unicast"),
    (_set(["hosts", "s1", "tunnel_ip"], "0.0.0.0"), "hosts.s1.tunnel_ip"),
    (_set(["hosts", "s1", "tunnel_ip"], "255.255.255.255"), "hosts.s1.tunnel_ip"),
    (_peer_ipv6_on_ipv4_host, "hosts.s2.tunnel_ip: 2001:db8::2 is not of the IP family"),
    (_sampling_1e30, "hosts.s1.sflow_sampling: input should be less than or equal to 4294967295"),
    (_sampling_2_40, "hosts.s1.sflow_sampling"),
    (_set(["sflow", "agent"], 'eth0" header=1'), "sflow.agent: expected an interface name"),
    (_set(["sflow", "collector"], '127.0.0.1:1","192.0.2.66:6343'), "sflow.collector"),
    (_set(["sflow", "collector"], "collector.example:6343"), "sflow.collector"),
    (_set(["sflow", "collector"], "::1:6343"), "sflow.collector"),
    (_set(["sflow", "header_bytes"], 10**6), "sflow.header_bytes"),
    (_set(["sflow", "polling_s"], -1), "sflow.polling_s"),
    (_version_far_ahead, "version: more than 3600 s ahead of created"),
    (_set(["version"], True), "version"),
    (_set(["hosts", "s1", "bridge"], "br0; rm"), "hosts.s1.bridge"),
    (_set(["hosts", "s1", "vm_ports"], ["caV1", "../x"]), "hosts.s1.vm_ports[1]"),
    (_set(["hosts", "s1", "mirrors", 0, "rate"], float("nan")), "hosts.s1.mirrors[0].rate"),
    (_mirrors_over_one, "hosts.s1.mirrors: applied mirror shares sum to 1.1 > 1"),
    (_set(["hosts"], {}), "hosts"),
]


@pytest.mark.parametrize("mutate,message", CORPUS, ids=[m.__name__ for m, _ in CORPUS])
def test_bad_plan_corpus_rejected_without_any_change(
    sandbox, make_plan, mutate, message, tmp_path, capsys
):
    ovs, config, _, write_plan = sandbox
    write_plan(receiver_plan(make_plan, 1))
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 0
    last_good = (tmp_path / "state" / LAST_GOOD_FILE).read_bytes()
    before = _host_state(ovs)
    doc = make_plan(version=2)
    mutate(doc)
    write_plan(doc)
    capsys.readouterr()
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 2  # issue 15 item 6
    err = capsys.readouterr().err
    assert message in err, err
    assert _host_state(ovs) == before
    assert (tmp_path / "state" / LAST_GOOD_FILE).read_bytes() == last_good
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["result"] == "rejected" and status["plan_version"] == 1
    metrics = (tmp_path / "state" / "metrics.prom").read_text()
    assert 'cosample_agent_last_result{result="rejected"} 1.0' in metrics


def test_deeply_nested_json_is_a_reported_rejection(sandbox, make_plan, tmp_path, capsys):
    """Item 5: 200k nested '[' was a RecursionError traceback, exit 1 and a stale 'ok'."""
    ovs, config, plan_path, write_plan = sandbox
    write_plan(receiver_plan(make_plan, 1))
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 0
    before = _host_state(ovs)
    plan_path.write_bytes(b"[" * 200_000)
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    assert json.loads((tmp_path / "state" / "status.json").read_text())["result"] == "rejected"
    assert _host_state(ovs) == before


def test_plan_failing_on_the_host_is_not_adopted_and_the_host_returns(sandbox, make_plan, tmp_path):
    """Item 1: a plan whose commands fail is never "last good"; the host goes back to it."""
    ovs, config, _, write_plan = sandbox
    write_plan(receiver_plan(make_plan, 1))
    a = agent(config)
    assert a.cycle().result == "ok"
    good = fingerprint(a)
    last_good = (tmp_path / "state" / LAST_GOOD_FILE).read_bytes()
    # A foreign VXLAN device holding the s1->s2 key: the kernel refuses the agent's device.
    run(
        [
            "ip",
            "link",
            "add",
            "cafx0",
            "type",
            "vxlan",
            "id",
            str(pair_vni("s1", "s2")),
            "dstport",
            "4789",
            "remote",
            "10.0.0.2",
        ]
    )
    try:
        write_plan(make_plan(version=2))  # s1 becomes a sender mirroring to s2 and s3
        report = a.cycle()
        assert report.result == "rejected" and report.plan_version == 1, report
        assert "plan version 2 failed on this host" in report.errors[-1]
        assert fingerprint(a) == good
        assert (tmp_path / "state" / LAST_GOOD_FILE).read_bytes() == last_good
        restarted = agent(config)
        report = restarted.cycle()  # a restarted agent tries once more, and returns again
        assert report.result == "rejected" and fingerprint(restarted) == good
        writes = restarted.host.writes
        report = restarted.cycle()  # then it does not retry the same content every cycle
        assert report.result == "rejected" and "failed on this host before" in report.errors[0]
        assert restarted.host.writes == writes
    finally:
        run(["ip", "link", "del", "cafx0"], check=False)
    write_plan(make_plan(version=3))
    assert restarted.cycle().result == "ok"


def test_version_far_ahead_is_refused_and_a_signed_reset_recovers(
    sandbox, make_plan, now, tmp_path
):
    """Item 2: versions are bounded by created; 'reset: true' lowers the floor, signed."""
    from cosample.plan.signing import generate_keypair, sign_file

    _, config, plan_path, write_plan = sandbox
    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    signed = lambda doc: (write_plan(doc), sign_file(plan_path, tmp_path / "k"))  # noqa: E731
    high = make_plan(version=int(now.timestamp()) + 3000)  # within the bound, but high
    signed(high)
    a = agent(config, public_key=str(tmp_path / "k.pub"))
    assert a.cycle().plan_version == high["version"]
    signed(make_plan(version=5, sampling=20))
    report = a.cycle()
    assert report.result == "rejected" and "rollback refused" in report.errors[0]
    reset = make_plan(version=5, sampling=20, created=now)
    reset["reset"] = True
    signed(reset)
    report = a.cycle()
    assert report.result == "ok" and report.plan_version == 5
    assert a.host.observe(BRIDGE).sflow.settings.sampling == 20
    signed(make_plan(version=6, created=now))
    assert a.cycle().plan_version == 6
    reset["version"] = 4  # an old reset replayed later (created before the running plan)
    reset["created"] = _stamp(now - timedelta(minutes=5))
    signed(reset)
    assert "reset created" in a.cycle().errors[0]


def test_same_version_with_new_content_is_refused(sandbox, make_plan, tmp_path):
    """Item 3: v100 with the same plan_id but other rates is not applied under the old name."""
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan(version=100))
    a = agent(config)
    assert a.cycle().result == "ok"
    before = _host_state(ovs)
    write_plan(make_plan(version=100, sender_mirrors=(("s2", 0.4), ("s3", 0.3))))
    report = a.cycle()
    assert report.result == "rejected" and "reused with different content" in report.errors[0]
    assert _host_state(ovs) == before


class _Trickle(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def _trickle_handler(body: bytes, pause_s: float):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(pause_s)

        def log_message(self, *args):
            pass

    return Handler


def test_trickling_plan_server_cannot_hold_the_agent(sandbox, make_plan, to_bytes, capsys):
    """Item 4: the fetch has one total deadline (it was per read: 50 s for a 3 s timeout)."""
    ovs, config, _, write_plan = sandbox
    write_plan(receiver_plan(make_plan, 1))
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 0
    before = _host_state(ovs)
    server = _Trickle(("127.0.0.1", 0), _trickle_handler(to_bytes(make_plan(version=2)), 0.2))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/plan.json"
        code = main(
            ["agent", "apply", "--once", "--config", str(config), "--plan", url, "--timeout", "1s"]
        )
        assert code == 1
        assert "not fetched within the 1 s deadline" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
    assert _host_state(ovs) == before


def test_values_reach_ovsdb_typed_never_spliced(sandbox):
    """Item 7: a hostile string stays one OVSDB value (validation refuses it long before)."""
    ovs, config, _, _ = sandbox
    a = agent(config)
    hostile = '127.0.0.1:1","192.0.2.66:6343'
    a.host.apply(c.SetSflow(BRIDGE, SflowSettings(hostile, 64, agent='x" header=1')))
    row = json.loads(ovs.vsctl("--format=json", "--columns=targets,agent,header", "list", "sFlow"))[
        "data"
    ][0]
    assert row == [hostile, 'x" header=1', 128]
    peer = 's9",external_ids:evil="1'
    a.host.apply(
        c.AddTunnelPort(BRIDGE, "car-test", peer, (("remote_ip", "10.0.0.9"), ("key", "7")), 64999)
    )
    ids = json.loads(
        ovs.vsctl("--format=json", "--columns=external_ids", "list", "Interface", "car-test")
    )["data"][0][0]
    assert sorted(ids[1]) == [["cosample-owner", "agent"], ["cosample-peer", peer]]


def test_foreign_objects_are_left_alone_and_the_rest_is_configured(sandbox, make_plan):
    """Item 8: a foreign device named like ours, a foreign filter in our prio range and a
    foreign ingress qdisc: each is reported, none is touched, everything else is configured."""
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    a = agent(config)
    device = f"{a.config.mirror_device_prefix}-{short_hash('s2')}"
    run(
        [
            "ip",
            "link",
            "add",
            device,
            "type",
            "vxlan",
            "id",
            "77",
            "dstport",
            "4790",
            "remote",
            "192.0.2.77",
        ]
    )
    try:
        report = a.cycle()
        assert report.result == "degraded", report
        assert any(
            f"interface {device} exists and is not the agent's" in p for p in report.problems
        )
        assert device in run(["ip", "link", "show", "dev", device]).stdout  # still there
        assert (
            ovs.vsctl(
                "get", "sFlow", ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip(), "sampling"
            ).strip()
            == "10"
        )  # sFlow configured all the same
        assert "mirred" not in _tc(VM_PORTS[0])  # all or nothing: no partial chain
        assert main(["agent", "remove", "--config", str(config)]) == 0
        assert device in run(["ip", "link", "show", "dev", device]).stdout
    finally:
        run(["ip", "link", "del", device], check=False)

    run(["tc", "qdisc", "add", "dev", VM_PORTS[0], "ingress"])  # excludes clsact
    run(["tc", "qdisc", "add", "dev", VM_PORTS[1], "clsact"])
    run(
        [
            "tc",
            "filter",
            "add",
            "dev",
            VM_PORTS[1],
            "ingress",
            "protocol",
            "all",
            "prio",
            "49153",
            "handle",
            "1",
            "bpf",
            "bytecode",
            "1,6 0 0 4294967295",
            "action",
            "mirred",
            "egress",
            "mirror",
            "dev",
            VM_PORTS[0],
        ]
    )  # like the agent's, but without its cookie
    report = agent(config).cycle()
    assert report.result == "degraded"
    assert any(f"{VM_PORTS[0]}: a foreign ingress qdisc" in p for p in report.problems)
    assert any(
        f"{VM_PORTS[1]}: 1 foreign tc filter(s) in the agent's prio range" in p
        for p in report.problems
    )
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() != "[]"
    assert main(["agent", "remove", "--config", str(config)]) == 0
    assert "pref 49153" in _tc(VM_PORTS[1])  # the foreign filter survived remove
    assert "ingress" in run(["tc", "qdisc", "show", "dev", VM_PORTS[0]]).stdout
    run(["tc", "qdisc", "del", "dev", VM_PORTS[0], "ingress"])
    run(["tc", "qdisc", "del", "dev", VM_PORTS[1], "clsact"])


def test_moving_to_another_bridge_leaves_nothing_behind(sandbox, make_plan, tmp_path):
    """Item 9: owned sFlow row, tunnel ports and drop flows on the old bridge are removed."""
    ovs, config, _, write_plan = sandbox
    ovs.vsctl("add-br", "cabr9", "--", "set", "Bridge", "cabr9", "datapath_type=dummy")
    text = config.read_text().replace(f'bridge = "{BRIDGE}"\n', "")
    config.write_text(text)

    def owned(bridge):
        a = agent(config)
        exists, sflow, ports, _ = a.host.ovs.observe(bridge)
        return (
            sflow is not None and sflow.owned,
            [p.name for p in ports if p.owned],
            [f.cookie for f in a.host.ovs.flows(bridge)],
        )

    first = receiver_plan(make_plan, 1)
    first["hosts"]["s1"]["bridge"] = BRIDGE
    write_plan(first)
    assert agent(config).cycle().result == "ok"
    assert owned(BRIDGE)[0] and owned(BRIDGE)[1] and owned(BRIDGE)[2]
    moved = receiver_plan(make_plan, 2)
    moved["hosts"]["s1"]["bridge"] = "cabr9"
    write_plan(moved)
    report = agent(config).cycle()
    assert report.result == "ok", report
    assert owned(BRIDGE) == (False, [], [])
    assert owned("cabr9")[0] and owned("cabr9")[1]
    assert main(["agent", "remove", "--config", str(config)]) == 0
    assert owned(BRIDGE) == (False, [], []) and owned("cabr9") == (False, [], [])


def test_secure_by_default(sandbox, make_plan, tmp_path, capsys):
    """Item 10: no key and no --insecure-unsigned: refused; insecure warns; private state."""
    ovs, config, _, write_plan = sandbox
    write_plan(make_plan())
    config.write_text(config.read_text().replace("insecure_unsigned = true\n", ""))
    assert main(["agent", "apply", "--once", "--config", str(config)]) == 2
    assert "public_key: required" in capsys.readouterr().err
    assert ovs.vsctl("get", "Bridge", BRIDGE, "sflow").strip() == "[]"
    assert main(["agent", "apply", "--once", "--config", str(config), "--insecure-unsigned"]) == 0
    assert "WARNING: INSECURE" in capsys.readouterr().err
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    status = json.loads((state / "status.json").read_text())
    assert status["warnings"] and "INSECURE" in status["warnings"][0]


def test_underlay_and_detached_ports_are_never_mirrored(sandbox, make_plan):
    """Item 11: a VM port carrying the tunnels' underlay route, or not on the bridge, is refused."""
    ovs, config, _, write_plan = sandbox
    underlay, detached = f"{PORT_PREFIX}U1", f"{PORT_PREFIX}V3"
    run(["ip", "link", "add", underlay, "type", "veth", "peer", "name", f"{underlay}p"])
    run(["ip", "link", "add", detached, "type", "veth", "peer", "name", f"{detached}p"])
    try:
        run(["ip", "link", "set", underlay, "up"])
        run(["ip", "link", "set", f"{underlay}p", "up"])
        ovs.vsctl("add-port", BRIDGE, underlay)
        run(["ip", "route", "add", "198.51.100.2/32", "dev", underlay])
        doc = make_plan(vm_ports=[VM_PORTS[0], underlay, detached])
        doc["hosts"]["s2"]["tunnel_ip"] = "198.51.100.2"
        write_plan(doc)
        report = agent(config).cycle()
        assert report.result == "degraded", report
        assert any(f"{underlay} carries the underlay route" in p for p in report.problems)
        assert any(f"{detached} is not a port of bridge" in p for p in report.problems)
        assert "mirred" in _tc(VM_PORTS[0])
        assert "clsact" not in run(["tc", "qdisc", "show", "dev", underlay]).stdout
        assert "clsact" not in run(["tc", "qdisc", "show", "dev", detached]).stdout
        assert main(["agent", "remove", "--config", str(config)]) == 0
    finally:
        run(["ip", "link", "del", underlay], check=False)
        run(["ip", "link", "del", detached], check=False)
