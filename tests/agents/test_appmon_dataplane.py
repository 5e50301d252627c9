"""Application-monitoring mechanisms on real packets: the agents apply them, a real HTTP exchange
runs through the bridge, and the analysis host's tunnel device shows exactly what was copied.

    C (client 10.214.0.1) --amc--+ H: host s1, userspace OVS, bridge amb1; the agent adds the
    S (server 10.214.0.2) --ams--+    appmon VXLAN device toward s4 as a port of amb1
        H amu 10.214.3.1 --- eth0 in A (10.214.3.2): host s4, the analysis host; its agent
                             creates the receive device the analyser reads (a dummy OVS only
                             for the agent's OVSDB)

The server answers HTTP/1.1 on port 8080 (the monitored service) and 8081 (another service on
the same VM). The client opens keep-alive connections to both. Ground truth is the client's
own capture (every frame of its connections, both directions) and the server's (every frame of
its port). Checked, frame by frame, as byte strings:

- selective mirror: the copies are exactly the PSH-bearing frames of the 8080 connections,
  nothing of 8081, no ARP; with ``truncate_bytes`` each copy is the frame's first bytes;
- port mirror with ``snaplen``: the copies are exactly the frames of the server's port
  (both services, ARP too), each cut to ``snaplen``;
- kernel mirror (``kernel_mirror`` on the server's port ``ams``, beside the sFlow tc chain
  mirroring everything s1's VM ports send to s4): the copies on the receive device are exactly
  the PSH-bearing frames of the 8080 connections (one per request sent, and the responses);
  the chain still copies what the server sends (the kernel mirror's verdict is ``continue``); a
  second pass changes nothing; with ``share`` 0.5 exactly the connections whose client port's
  low 8 bits are below 128 are copied; dropping the entry leaves the chain's filter alone;
- ``cosample agent remove`` leaves no owned device, port, Mirror or flow, and nothing is copied.

Packets and bytes copied per mechanism are printed (``pytest -s``) for docs/appmon-mechanisms.md.
Needs root (namespaces, userspace OVS); about 30 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pytest

from cosample.agents.appmon_host import AppmonSide
from cosample.agents.appmon_state import APPMON_ALIAS, APPMON_COOKIE_MASK, APPMON_COOKIE_TAG
from cosample.agents.ledger import Ledger
from cosample.agents.ovsdb import OvsdbSide
from cosample.dataplane.run import run
from cosample.lab.netns import Lab, disable_tx_offload
from cosample.lab.ovs import OvsInstance

pytestmark = [pytest.mark.root, pytest.mark.slow]
SERVICE, OTHER = 8080, 8081
BODY_SIZES = (120, 2600, 7000, 40)  # bytes; the larger ones span several segments

SERVER = r"""
import http.server, socketserver, sys, threading
sizes = [int(x) for x in sys.argv[2].split(",")]
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/big":  # status line, headers and body in one write: one PSH, at its end
            body = b"y" * 6000
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        size = sizes[int(self.path.strip("/") or 0) % len(sizes)]
        self.send_response(200 if size != 40 else 404)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(b"x" * size)
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
servers = [Server((sys.argv[1], port), Handler) for port in (8080, 8081)]
for server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

CLIENT = r"""
import http.client, sys
host = sys.argv[1]
for port in (8080, 8081):
    for connection in range(3):
        c = http.client.HTTPConnection(host, port, timeout=10)
        for path in [f"/{connection + k}" for k in range(4)] + ["/big"]:
            c.request("GET", path)
            r = c.getresponse()
            assert r.status in (200, 404), r.status
            r.read()
        c.close()
print("done", flush=True)
"""

SNIFFER = r"""
import json, select, socket, sys
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock.bind((sys.argv[1], 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
incoming_only = sys.argv[2] == "in"
print("ready", flush=True)
frames = []
while True:
    ready, _, _ = select.select([sock, sys.stdin], [], [], 20.0)
    if sys.stdin in ready or not ready:
        break
    frame, address = sock.recvfrom(65535)
    if incoming_only and address[2] == socket.PACKET_OUTGOING:
        continue
    frames.append(frame.hex())
print(json.dumps(frames), flush=True)
"""


class Sniffer:
    """A raw-socket capture in a namespace: start before the traffic, ``frames()`` after it."""

    def __init__(self, lab: Lab, namespace: str, device: str, incoming_only: bool) -> None:
        self.process = subprocess.Popen(
            lab.exec_argv(
                namespace,
                [sys.executable, "-c", SNIFFER, device, "in" if incoming_only else "both"],
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready"

    def frames(self) -> list[bytes]:
        out, _ = self.process.communicate("stop\n", timeout=30)
        return [bytes.fromhex(x) for x in json.loads(out.strip().splitlines()[-1])]


def tcp(frame: bytes) -> tuple[int, int, int] | None:
    """(source port, destination port, flags) of an Ethernet/IPv4/TCP frame, else None."""
    if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return None
    at = 14 + (frame[14] & 15) * 4
    return (
        int.from_bytes(frame[at : at + 2], "big"),
        int.from_bytes(frame[at + 2 : at + 4], "big"),
        frame[at + 13],
    )


def payload(frame: bytes) -> bytes:
    """The TCP payload of an Ethernet/IPv4/TCP frame (as far as the frame goes)."""
    at = 14 + (frame[14] & 15) * 4
    return frame[at + (frame[at + 12] >> 4) * 4 :]


def unique(frames) -> list[bytes]:
    """One frame per TCP segment (ports and sequence number): a retransmission counts once."""
    seen = {}
    for frame in frames:
        at = 14 + (frame[14] & 15) * 4
        seen.setdefault((frame[at : at + 4], frame[at + 4 : at + 8]), frame)
    return list(seen.values())


def of_service(frame: bytes, port: int) -> bool:
    ports = tcp(frame)
    return ports is not None and port in ports[:2]


def has_psh(frame: bytes) -> bool:
    ports = tcp(frame)
    return ports is not None and bool(ports[2] & 0x08)


def appmon_plan(version: int, entries: list[dict]) -> dict:
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    idle = {"role": "idle", "local_rate": 0.0, "sflow_sampling": None}
    return {
        "format": "cosample.plan",
        "format_version": 1,
        "version": version,
        "created": stamp(now - 60),
        "expires": stamp(now + 3600),
        "plan_id": f"appmon{version}",
        "hosts": {
            "s1": {**idle, "bridge": "amb1", "tunnel_ip": "10.214.3.1", "appmon": entries},
            "s4": {**idle, "bridge": "amb4", "tunnel_ip": "10.214.3.2"},
        },
    }


@pytest.fixture
def rig(dataplane, tmp_path):
    with Lab.unique("am") as lab:
        h, c, s, a = (lab.namespace(x) for x in ("H", "C", "S", "A"))
        for ns in (h, c, s, a):  # no IPv6 chatter: every frame in a capture is the test's
            run(
                lab.exec_argv(
                    ns,
                    [
                        "sysctl",
                        "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1",
                    ],
                )
            )
        for name, ns, address in (
            ("amc", c, "10.214.0.1/24"),
            ("ams", s, "10.214.0.2/24"),
            ("amu", a, "10.214.3.2/24"),
        ):
            run(
                [
                    "ip",
                    "-n",
                    h,
                    "link",
                    "add",
                    name,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                ]
            )
            run(["ip", "-n", ns, "addr", "add", address, "dev", "eth0"])
            for where, device in ((h, name), (ns, "eth0")):
                run(["ip", "-n", where, "link", "set", device, "up"])
                disable_tx_offload(device, where)
        run(["ip", "-n", h, "addr", "add", "10.214.3.1/24", "dev", "amu"])
        with (
            OvsInstance(tmp_path / "ovs1", dummy=False, namespace=h) as ovs1,
            OvsInstance(tmp_path / "ovs4", dummy=True) as ovs4,
        ):
            ovs1.vsctl("add-br", "amb1", "--", "set", "Bridge", "amb1", "datapath_type=netdev")
            ovs1.vsctl("add-port", "amb1", "amc", "--", "add-port", "amb1", "ams")
            ovs1.wait_for_ports("amc", "ams")
            ovs4.vsctl("add-br", "amb4")
            server = subprocess.Popen(
                lab.exec_argv(
                    s, [sys.executable, "-c", SERVER, "10.214.0.2", ",".join(map(str, BODY_SIZES))]
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert server.stdout.readline().strip() == "ready"
                yield Rig(lab, tmp_path, {"s1": (h, ovs1), "s4": (a, ovs4)}, c, s)
            finally:
                server.communicate("", timeout=10)


class Rig:
    def __init__(self, lab, tmp_path, hosts, client_ns, server_ns):
        self.lab, self.tmp_path, self.hosts = lab, tmp_path, hosts
        self.client_ns, self.server_ns = client_ns, server_ns
        self.plan_path = tmp_path / "plan.json"

    def config(self, host: str) -> str:
        ns, ovs = self.hosts[host]
        path = self.tmp_path / f"{host}.toml"
        path.write_text(
            f'host = "{host}"\nplan = "{self.plan_path}"\novsdb = "{ovs.remote}"\n'
            f'state_dir = "{self.tmp_path / ("state-" + host)}"\n'
            f"insecure_unsigned = true\nrun_analysers = false\n"
        )
        return str(path)

    def agent(self, host: str, *args: str) -> str:
        ns, _ = self.hosts[host]
        result = run(
            self.lab.exec_argv(
                ns,
                [sys.executable, "-m", "cosample", "agent", *args, "--config", self.config(host)],
            ),
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def apply(self, version: int, entries: list[dict]) -> dict:
        self.plan_path.write_text(json.dumps(appmon_plan(version, entries)))
        for host in ("s4", "s1"):  # the analysis host first
            assert f"ok: plan version {version}" in self.agent(host, "apply", "--once")
        spec = json.loads(
            run(
                self.lab.exec_argv(
                    self.hosts["s4"][0],
                    [
                        sys.executable,
                        "-m",
                        "cosample",
                        "agent",
                        "appmon-spec",
                        "--state-dir",
                        str(self.tmp_path / "state-s4"),
                    ],
                ),
                timeout=60,
            ).stdout
        )
        return spec

    def exchange(self, device: str) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """(frames at the client, frames at the server, frames received on ``device`` at s4)."""
        at_client = Sniffer(self.lab, self.client_ns, "eth0", incoming_only=False)
        at_server = Sniffer(self.lab, self.server_ns, "eth0", incoming_only=False)
        received = Sniffer(self.lab, self.hosts["s4"][0], device, incoming_only=True)
        out = run(
            self.lab.exec_argv(self.client_ns, [sys.executable, "-c", CLIENT, "10.214.0.2"]),
            timeout=60,
        ).stdout
        assert "done" in out
        time.sleep(1.0)  # the last copies cross the tunnel
        return at_client.frames(), at_server.frames(), received.frames()


def cost(name: str, copied: list[bytes], service: list[bytes]) -> None:
    """One line of the cost table: copies against the frames they were taken from (the tunnel
    adds 50 bytes of outer headers per copy)."""
    sent, own = sum(map(len, copied)), sum(map(len, service))
    print(
        f"\nCOST {name}: {len(copied)} copies / {len(service)} frames, {sent} B / "
        f"{own} B = {sent / own:.1%}; on the underlay {sent + 50 * len(copied)} B"
    )


def test_mechanisms_copy_exactly_what_they_must(rig):
    selective = {
        "service": {"address": "10.214.0.2", "port": SERVICE},
        "mechanism": "selective_mirror",
        "to": "s4",
    }
    spec = rig.apply(1, [selective])
    (item,) = spec["analyser"]
    device = item["interface"]
    assert (item["mechanism"], item["from"], item["segments"]) == ("selective_mirror", "s1", "psh")

    # selective, whole frames: the PSH-bearing frames of the service's connections, nothing else
    client, _, received = rig.exchange(device)
    service = [f for f in client if of_service(f, SERVICE)]
    expected = [f for f in service if has_psh(f)]
    assert len(expected) >= 2 * 3 * 5  # every request and every response end (3 connections)
    assert any(of_service(f, OTHER) for f in client)  # the other service ran too
    assert Counter(received) == Counter(expected)
    cost("selective mirror (PSH)", received, service)
    starts = unique(f for f in service if payload(f).startswith((b"GET ", b"HTTP/1.1 ")))
    copied = [f for f in starts if has_psh(f)]
    big = [f for f in starts if payload(f).startswith(b"HTTP/1.1 200 OK\r\nContent-Length: 6000")]
    print(
        f"\nSTARTS request and status lines in PSH segments: {len(copied)} of {len(starts)}; "
        f"of the single-write 6000-byte responses: {len([f for f in big if has_psh(f)])} of "
        f"{len(big)}"
    )
    assert len(starts) == 2 * 3 * 5 and len(big) == 3
    assert all(has_psh(f) for f in starts if f not in big)  # one write, one segment: PSH

    # truncated: the first 96 bytes of each
    rig.apply(2, [{**selective, "truncate_bytes": 96}])
    client, _, received = rig.exchange(device)
    service = [f for f in client if of_service(f, SERVICE)]
    assert Counter(received) == Counter(f[:96] for f in service if has_psh(f))
    assert max(map(len, received)) == 96 and any(len(f) > 96 for f in service if has_psh(f))
    statuses = unique(
        f for f in received if tcp(f)[0] == SERVICE and payload(f)[:9] == b"HTTP/1.1 "
    )
    assert len(statuses) == 3 * 4  # 96 bytes keep the status line "HTTP/1.1 200"
    assert all(payload(f)[9:12] in (b"200", b"404") for f in statuses)
    cost("selective mirror (PSH, truncated to 96 B)", received, service)

    # connection ends too
    rig.apply(3, [{**selective, "truncate_bytes": 96, "segments": "psh+ends"}])
    client, _, received = rig.exchange(device)
    service = [f for f in client if of_service(f, SERVICE)]
    ends = [f for f in service if tcp(f)[2] & 0x0D]  # PSH, FIN or RST
    assert len(ends) > len([f for f in service if has_psh(f)])
    assert Counter(received) == Counter(f[:96] for f in ends)
    cost("selective mirror (PSH+FIN+RST, truncated to 96 B)", received, service)

    # port mirror, whole frames (full-size segments cross the tunnel too), then with snaplen
    port_mirror = {
        "service": {"address": "10.214.0.2", "port": SERVICE},
        "mechanism": "port_mirror",
        "to": "s4",
        "interface": "ams",
    }
    rig.apply(4, [port_mirror])
    _, server, received = rig.exchange(device)
    assert Counter(received) == Counter(server)
    assert max(map(len, received)) == 1514 and any(of_service(f, OTHER) for f in received)
    cost("port mirror (both services on the port)", received, server)
    rig.apply(5, [{**port_mirror, "truncate_bytes": 128}])
    _, server, received = rig.exchange(device)
    assert Counter(received) == Counter(f[:128] for f in server)
    cost("port mirror (snaplen 128, both services on the port)", received, server)

    # both on one tunnel: the Mirror's copies plus the flows' copies of the other service
    rig.apply(
        6,
        [
            {**port_mirror, "truncate_bytes": 128},
            {
                **selective,
                "truncate_bytes": 96,
                "service": {"address": "10.214.0.2", "port": OTHER},
            },
        ],
    )
    _, server, received = rig.exchange(device)
    assert Counter(received) == Counter(f[:128] for f in server) + Counter(
        f[:96] for f in server if of_service(f, OTHER) and has_psh(f)
    )

    # a port mirror of a port that is not on the bridge: refused, the host keeps plan 6
    before = rig.hosts["s1"][1].ofctl(
        "--no-stats", "dump-flows", f"unix:{rig.hosts['s1'][1].directory}/amb1.mgmt"
    )
    rig.plan_path.write_text(json.dumps(appmon_plan(7, [{**port_mirror, "interface": "amu"}])))
    result = run(
        rig.lab.exec_argv(
            rig.hosts["s1"][0],
            [
                sys.executable,
                "-m",
                "cosample",
                "agent",
                "apply",
                "--once",
                "--config",
                rig.config("s1"),
            ],
        ),
        timeout=60,
        check=False,
    )
    assert (
        result.returncode != 0 and "amu not a port of bridge amb1" in result.stdout + result.stderr
    )
    assert (
        rig.hosts["s1"][1].ofctl(
            "--no-stats", "dump-flows", f"unix:{rig.hosts['s1'][1].directory}/amb1.mgmt"
        )
        == before
    )

    # the check made before every truncating command finds the truncate action here
    h_ovs = rig.hosts["s1"][1]
    side = AppmonSide(OvsdbSide(h_ovs.remote, str(h_ovs.directory)), Ledger(rig.tmp_path / "l"))
    assert "Truncate action: Yes" in side.ovs_appctl("dpif/show-dp-features", "amb1")
    side._require_truncate("amb1")

    # removal: nothing owned is left, and nothing crosses the underlay any more
    rig.agent("s1", "remove")
    rig.agent("s4", "remove")
    assert_nothing_owned(rig)
    _, server, underlay = rig.exchange("eth0")
    assert server and not [f for f in underlay if udp_port(f) == 4789]


def udp_port(frame: bytes) -> int | None:
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    at = 14 + (frame[14] & 15) * 4
    return int.from_bytes(frame[at + 2 : at + 4], "big")


def assert_nothing_owned(rig: Rig) -> None:
    for host, (ns, ovs) in rig.hosts.items():
        links = json.loads(run(["ip", "-n", ns, "-j", "link", "show"]).stdout)
        assert not [x["ifname"] for x in links if x.get("ifalias", "").startswith(APPMON_ALIAS)]
        assert "cosample-appmon" not in ovs.vsctl("--columns=external_ids", "list", "Port")
        assert ovs.vsctl("--columns=_uuid", "list", "Mirror").strip() == ""
        for bridge in ovs.vsctl("list-br").split():
            flows = ovs.ofctl(
                "dump-flows",
                f"unix:{ovs.directory}/{bridge}.mgmt",
                f"cookie={APPMON_COOKIE_TAG:#x}/{APPMON_COOKIE_MASK:#x}",
            )
            assert "cookie=" not in flows, flows


# facts about OVS's own tunnel ports on this userspace datapath (docs/appmon-mechanisms.md) ------
def test_native_tunnel_ports_truncate_right_with_max_len_and_wrong_with_snaplen(
    dataplane, tmp_path
):
    """Why the agent's tunnels are Linux VXLAN devices attached as ports, not OVS tunnel ports.

    With the br-phy pattern (the underlay address on an OVS bridge), OVS encapsulates itself,
    GRE included (the kernel here has no GRE). ``output(port=T,max_len=N)`` cuts the inner frame
    and sends a well-formed packet; a ``Mirror`` with ``snaplen`` cuts the *encapsulated* packet,
    so the outer IP header claims more bytes than the frame holds and the receiver drops it.
    """
    with Lab.unique("an") as lab:
        h, c, s, r = (lab.namespace(x) for x in ("H", "C", "S", "R"))
        for ns in (h, c, s, r):
            run(
                lab.exec_argv(
                    ns,
                    [
                        "sysctl",
                        "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1",
                    ],
                )
            )
        for name, ns, address in (
            ("anc", c, "10.215.0.1/24"),
            ("ans", s, "10.215.0.2/24"),
            ("anu", r, "10.215.3.2/24"),
        ):
            run(
                [
                    "ip",
                    "-n",
                    h,
                    "link",
                    "add",
                    name,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                ]
            )
            run(["ip", "-n", ns, "addr", "add", address, "dev", "eth0"])
            for where, device in ((h, name), (ns, "eth0")):
                run(["ip", "-n", where, "link", "set", device, "up"])
                disable_tx_offload(device, where)
        with OvsInstance(tmp_path / "ovs", dummy=False, namespace=h) as ovs:
            ovs.vsctl("add-br", "anb", "--", "set", "Bridge", "anb", "datapath_type=netdev")
            ovs.vsctl("add-port", "anb", "anc", "--", "add-port", "anb", "ans")
            ovs.vsctl(
                "add-br",
                "anp",
                "--",
                "set",
                "Bridge",
                "anp",
                "datapath_type=netdev",
                "--",
                "add-port",
                "anp",
                "anu",
            )
            run(["ip", "-n", h, "addr", "add", "10.215.3.1/24", "dev", "anp"])
            run(["ip", "-n", h, "link", "set", "anp", "up"])
            run(["ip", "-n", h, "link", "set", "anu", "arp", "off"])
            ovs.vsctl(
                "add-port",
                "anb",
                "anx",
                "--",
                "set",
                "Interface",
                "anx",
                "type=vxlan",
                "options:remote_ip=10.215.3.2",
                "options:key=7",
                "ofport_request=10",
                "--",
                "set",
                "Port",
                "anx",
                f"tag={4095}",
            )
            ovs.vsctl(
                "add-port",
                "anb",
                "ang",
                "--",
                "set",
                "Interface",
                "ang",
                "type=gre",
                "options:remote_ip=10.215.3.2",
                "ofport_request=11",
                "--",
                "set",
                "Port",
                "ang",
                f"tag={4095}",
            )
            ovs.wait_for_ports("anc", "ans", "anx", "ang")
            server = subprocess.Popen(
                lab.exec_argv(
                    s, [sys.executable, "-c", SERVER, "10.215.0.2", ",".join(map(str, BODY_SIZES))]
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert server.stdout.readline().strip() == "ready"
                mgmt = f"unix:{ovs.directory}/anb.mgmt"

                def exchange() -> list[bytes]:
                    sniffer = Sniffer(lab, r, "eth0", incoming_only=True)
                    run(lab.exec_argv(c, [sys.executable, "-c", CLIENT, "10.215.0.2"]), timeout=60)
                    time.sleep(1.0)
                    return [
                        f
                        for f in sniffer.frames()
                        if f[12:14] == b"\x08\x00" and (f[23] == 47 or udp_port(f) == 4789)
                    ]

                ovs.ofctl(
                    "add-flow",
                    mgmt,
                    "cookie=0x1,priority=100,tcp,nw_src=10.215.0.2,"
                    "tcp_flags=+psh,actions=output(port=10,max_len=80),"
                    "output(port=11,max_len=80),NORMAL",
                )
                exchange()  # OVS resolves the tunnel's next hop; the first copies may be lost
                frames = exchange()
                vxlan = [f for f in frames if f[23] == 17]
                gre = [f for f in frames if f[23] == 47]
                assert vxlan and len(vxlan) == len(gre)
                for frame in frames:  # well formed: the outer IP length is what arrived
                    assert int.from_bytes(frame[16:18], "big") == len(frame) - 14
                assert {len(f) - 14 - 20 - 8 - 8 for f in vxlan} == {80}  # inner frame cut
                assert {len(f) - 14 - 20 - 4 for f in gre} == {80}

                ovs.ofctl("del-flows", mgmt, "cookie=0x1/-1")
                ovs.vsctl(
                    "--",
                    "--id=@p",
                    "get",
                    "Port",
                    "ans",
                    "--",
                    "--id=@o",
                    "get",
                    "Port",
                    "anx",
                    "--",
                    "--id=@m",
                    "create",
                    "Mirror",
                    "name=m",
                    "select_src_port=@p",
                    "select_dst_port=@p",
                    "output_port=@o",
                    "snaplen=100",
                    "--",
                    "add",
                    "Bridge",
                    "anb",
                    "mirrors",
                    "@m",
                )
                ovs.appctl("revalidator/purge")
                frames = [f for f in exchange() if f[23] == 17]
                assert frames and max(map(len, frames)) <= 100  # the outer packet was cut...
                assert any(int.from_bytes(f[16:18], "big") > len(f) - 14 for f in frames)  # ...
            finally:
                server.communicate("", timeout=10)


# the kernel mirror (kernel_mirror) beside the sFlow mirror chain -------------------------------
def sflow_sender_plan(version: int, entries: list[dict]) -> dict:
    """s1 also mirrors every packet its VM ports send to s4 (the sFlow tc chain, rate 1)."""
    doc = appmon_plan(version, entries)
    doc["sflow"] = {"collector": "127.0.0.1:6343", "agent": "127.0.0.1"}
    doc["hosts"]["s1"].update(
        role="sender", local_rate=0.0, sflow_sampling=None, mirrors=[{"to": "s4", "rate": 1.0}]
    )
    doc["hosts"]["s4"].update(
        role="receiver",
        local_rate=1.0,
        sflow_sampling=1,
        receives=[{"from": "s1", "rate": 1.0, "pps": 100.0}],
    )
    return doc


#: keep-alive requests to the service: one connection per residue of the client port's low 8
#: bits (argv[2]), from the first free port with it (an earlier connection of the test may hold
#: one in TIME_WAIT); prints the ports.
PORTS_CLIENT = r"""
import errno, http.client, sys
ports = []
for residue in map(int, sys.argv[2].split(",")):
    for port in range(256 * 150 + residue, 61000, 256):
        c = http.client.HTTPConnection(sys.argv[1], 8080, timeout=10,
                                       source_address=("10.214.0.1", port))
        try:
            c.connect()
            break
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
    else:
        raise SystemExit(f"no free client port with residue {residue}")
    ports.append(port)
    for path in ("/0", "/1", "/big"):
        c.request("GET", path)
        r = c.getresponse()
        r.read()
    c.close()
print("ports", *ports, flush=True)
print("done", flush=True)
"""


def tc_filters(rig: Rig, device: str) -> list[tuple[str, int, str | None]]:
    """(hook, prio, mirred cookie) of every filter on ``device`` in s1's namespace."""
    out = []
    for hook in ("ingress", "egress"):
        text = run(
            ["tc", "-n", rig.hosts["s1"][0], "-j", "filter", "show", "dev", device, hook]
        ).stdout.strip()
        for entry in json.loads(text or "[]"):
            if "options" in entry:
                cookies = [x.get("cookie") for x in entry["options"].get("actions", [])]
                out.append((hook, entry["pref"], cookies[0] if cookies else None))
    return sorted(out)


def vxlan_inner(frame: bytes, vni: int) -> bytes | None:
    """The inner frame of a VXLAN packet with ``vni`` on the underlay, else None."""
    if udp_port(frame) != 4789:
        return None
    at = 14 + (frame[14] & 15) * 4 + 8
    return frame[at + 8 :] if int.from_bytes(frame[at + 4 : at + 7], "big") == vni else None


def test_kernel_mirror_copies_the_psh_segments_and_leaves_the_sflow_chain(rig):
    from cosample.agents.state import FILTER_COOKIE, PRIO_BASE
    from cosample.dataplane.tcmirror import KERNEL_MIRROR_COOKIE_TAG, KERNEL_MIRROR_PRIO_BASE
    from cosample.dataplane.tunnels import pair_vni

    entry = {
        "service": {"address": "10.214.0.2", "port": SERVICE},
        "mechanism": "kernel_mirror",
        "to": "s4",
        "interface": "ams",
    }
    rig.plan_path.write_text(json.dumps(sflow_sender_plan(1, [entry])))
    for host in ("s4", "s1"):
        assert "ok: plan version 1" in rig.agent(host, "apply", "--once")
    second = rig.agent("s1", "apply", "--once")  # idempotent: nothing left to change
    assert "ok: plan version 1" in second and "0 command(s) applied" in second, second
    filters = tc_filters(rig, "ams")
    ours = [f for f in filters if f[2] and f[2].startswith(KERNEL_MIRROR_COOKIE_TAG)]
    assert [f[:2] for f in ours] == [
        ("egress", KERNEL_MIRROR_PRIO_BASE),
        ("ingress", KERNEL_MIRROR_PRIO_BASE),
    ]
    chain = [f for f in filters if f[2] == FILTER_COOKIE]
    assert chain == [("ingress", PRIO_BASE, FILTER_COOKIE)]
    spec = json.loads(
        run(
            rig.lab.exec_argv(
                rig.hosts["s4"][0],
                [
                    sys.executable,
                    "-m",
                    "cosample",
                    "agent",
                    "appmon-spec",
                    "--state-dir",
                    str(rig.tmp_path / "state-s4"),
                ],
            ),
            timeout=60,
        ).stdout
    )
    (item,) = spec["analyser"]
    assert item["mechanism"] == "kernel_mirror"

    underlay = Sniffer(rig.lab, rig.hosts["s4"][0], "eth0", incoming_only=True)
    _, server, received = rig.exchange(item["interface"])
    sflow_copies = [
        x
        for x in (vxlan_inner(f, pair_vni("s1", "s4")) for f in underlay.frames())
        if x is not None
    ]
    expected = [f for f in server if of_service(f, SERVICE) and has_psh(f)]
    requests = [
        f for f in server if tcp(f) and tcp(f)[1] == SERVICE and payload(f).startswith(b"GET ")
    ]
    assert len(requests) == 3 * 5
    assert Counter(received) == Counter(expected)  # every PSH segment, both ways, nothing else
    assert len([f for f in received if payload(f).startswith(b"GET ")]) == len(requests)
    # the chain still sees every frame the server sends (the kernel mirror's verdict continues),
    # the copied PSH segments too; copies of frames over 1464 bytes exceed the 1500-byte underlay
    # and are sent as IP fragments, which this capture does not reassemble (docs/ovs-facts.md)
    from_server = Counter(
        f
        for f in server
        if f[12:14] == b"\x08\x00" and f[26:30] == bytes([10, 214, 0, 2]) and len(f) <= 14 + 1450
    )
    assert any(f in from_server for f in expected)
    copied = Counter(sflow_copies)
    assert from_server and all(copied[f] >= n for f, n in from_server.items())
    cost("kernel mirror (PSH)", received, [f for f in server if of_service(f, SERVICE)])

    # a share of the connections: those whose client port's low 8 bits are below 128
    rig.plan_path.write_text(json.dumps(sflow_sender_plan(2, [{**entry, "share": 0.5}])))
    for host in ("s4", "s1"):
        assert "ok: plan version 2" in rig.agent(host, "apply", "--once")
    at_server = Sniffer(rig.lab, rig.server_ns, "eth0", incoming_only=False)
    receiving = Sniffer(rig.lab, rig.hosts["s4"][0], item["interface"], incoming_only=True)
    out = run(
        rig.lab.exec_argv(
            rig.client_ns, [sys.executable, "-c", PORTS_CLIENT, "10.214.0.2", "64,164"]
        ),
        timeout=60,
    ).stdout
    assert "done" in out
    inside, outside = (int(p) for p in out.split("ports")[1].split()[:2])
    assert (inside % 256, outside % 256) == (64, 164)  # in the share, and out of it
    time.sleep(1.0)
    server, received = at_server.frames(), receiving.frames()
    client_port = lambda f: tcp(f)[1] if tcp(f)[0] == SERVICE else tcp(f)[0]  # noqa: E731
    service = [f for f in server if of_service(f, SERVICE) and has_psh(f)]
    assert {client_port(f) for f in service} == {inside, outside}
    assert Counter(received) == Counter(f for f in service if client_port(f) == inside)

    # the entry dropped: its filters go, the sFlow chain stays
    rig.plan_path.write_text(json.dumps(sflow_sender_plan(3, [])))
    for host in ("s4", "s1"):
        assert "ok: plan version 3" in rig.agent(host, "apply", "--once")
    assert "0 command(s) applied" in rig.agent("s1", "apply", "--once")
    assert tc_filters(rig, "ams") == chain
    rig.agent("s1", "remove")
    rig.agent("s4", "remove")
    assert tc_filters(rig, "ams") == []
    assert_nothing_owned(rig)
