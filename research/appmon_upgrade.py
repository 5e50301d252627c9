"""h2c reached by HTTP/1.1's ``Upgrade``: the analyser against the server's log and tshark.

nginx takes no ``Upgrade: h2c``; nghttpx (Debian nghttp2-proxy, the nghttp2 project's reverse
proxy) does. In the web rig (``cosample.lab.web``, root) it listens in clear text on
``UPGRADE_PORT`` in front of the rig's backend and logs every request: its status, client port,
HTTP version (``HTTP/1.1`` for an Upgrade request, answered on HTTP/2's stream 1) and time. The
clients ask for the Upgrade on their first request: ``curl --http2`` (then one stream at a time
on the connection) and ``nghttp -u`` (then all the others at once). The capture (tcpdump on the
client's veth end) is read by the analyser with the port declared ``h2c`` and undeclared (told
by the first bytes: HTTP/1.x, then the 101), and by tshark (``appmon_peers.tshark_h2``), which
follows the Upgrade too.

    python -m research.appmon_upgrade [--connections 6] [--requests 8]
    python -m research.appmon_upgrade --sample tests/data/appmon/upgrade-nghttpx.pcap
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cosample.dataplane.run import CommandError, require, run
from research.appmon_peers import pairs, tshark_h2

UPGRADE_PORT = 8082
LOG_FORMAT = "$remote_port $status $request_time $protocol_version"


def upgrade_available() -> str | None:
    """None when the rig, nghttpx, curl and nghttp are here, else why not."""
    from cosample.lab.web import web_available

    reason = web_available()
    if reason:
        return reason
    for program, package in (
        ("nghttpx", "nghttp2-proxy"),
        ("nghttp", "nghttp2-client"),
        ("curl", "curl"),
        ("tshark", "tshark"),
    ):
        try:
            require(program, package)
        except CommandError as exc:
            return str(exc)
    return None


@dataclass(frozen=True)
class Logged:
    """One line of nghttpx's access log."""

    client_port: int
    status: int
    request_time: float
    version: str


def start_proxy(rig, directory: Path, timeout_s: float = 10.0) -> Path:
    """nghttpx in the server namespace on ``UPGRADE_PORT`` before the rig's backend, answering
    before this returns (stopped by the rig, by PID); its access log's path, holding the line
    of the probe that answered (nghttpx writes it after the answer: counted before it is
    there, it would be taken for the first recorded request's)."""
    from cosample.lab.web import BACKEND_PORT, SERVER_ADDRESS

    log = directory / "nghttpx-access.log"
    rig._spawn(
        rig.server,
        [
            "nghttpx",
            "--conf=/dev/null",
            "--single-process",
            f"--frontend={SERVER_ADDRESS},{UPGRADE_PORT};no-tls",
            f"--backend=127.0.0.1,{BACKEND_PORT}",
            f"--accesslog-file={log}",
            f"--accesslog-format={LOG_FORMAT}",
            f"--errorlog-file={directory / 'nghttpx-error.log'}",
        ],
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        probe = ["curl", "-s", "-o", "/dev/null", "-w", "%{local_port}", "--max-time", "2"]
        answered = run(rig.lab.exec_argv(rig.client, [*probe, url(0, 0)]), check=False, timeout=5)
        if answered.returncode == 0:
            port = int(answered.stdout)
            while time.monotonic() < deadline:
                if any(entry.client_port == port for entry in read_log(log)):
                    return log
                time.sleep(0.05)
            break
        time.sleep(0.1)
    raise CommandError(f"nghttpx did not answer and log within {timeout_s:g} s (see {directory})")


def wait_logged(log: Path, lines: int, timeout_s: float) -> None:
    """Until nghttpx's access log holds ``lines`` lines, at most ``timeout_s`` (short: the
    caller counts what is there)."""
    deadline = time.monotonic() + timeout_s
    while len(read_log(log)) < lines and time.monotonic() < deadline:
        time.sleep(0.05)


def url(connection: int, request: int) -> str:
    """The ``request``-th URL of a connection: service times of 1-5 ms, every fourth a 500,
    every third a 12,000-byte body (HTTP/2 DATA over many segments)."""
    from cosample.lab.web import SERVER_ADDRESS

    index = connection * 7 + request
    query = f"mean_ms={1 + index % 5}&error={1 if index % 4 == 3 else 0}"
    query += f"&size={12000 if index % 3 == 2 else 200}"
    return f"http://{SERVER_ADDRESS}:{UPGRADE_PORT}/?{query}"


def drive(rig, connections: int, requests: int) -> None:
    """Each connection upgrades on its first request; even ones with curl (the rest one at a
    time), odd ones with nghttp (the rest at once)."""
    for connection in range(connections):
        urls = [url(connection, number) for number in range(requests)]
        if connection % 2 == 0:
            argv = ["curl", "-s", "--http2", "--max-time", "30"]
            for one in urls:
                argv += ["-o", "/dev/null", one]
        else:
            argv = ["nghttp", "-u", "-n", "-t", "30", *urls]
        run(rig.lab.exec_argv(rig.client, argv), timeout=60)


def read_log(path: Path) -> list[Logged]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else ():
        port, status, seconds, version = line.split(" ")
        out.append(Logged(int(port), int(status), float(seconds), version))
    return out


def record(out: Path, connections: int = 4, requests: int = 6) -> list[Logged]:
    """A capture of ``connections`` upgraded connections of ``requests`` each at ``out``, and
    what nghttpx logged for them."""
    from cosample.lab.web import WebRig

    with tempfile.TemporaryDirectory(prefix="appmon-upgrade-") as scratch:
        with WebRig(Path(scratch) / "web", seed=11) as rig:
            log = start_proxy(rig, Path(scratch))
            before = len(read_log(log))
            dump = rig.tcpdump(out)
            time.sleep(0.3)
            drive(rig, connections, requests)
            wait_logged(log, before + connections * requests, 10.0)
            time.sleep(0.5)
            rig.stop(dump)
            return read_log(log)[before:]


def compare(capture: Path, logged: list[Logged] | None = None) -> list[dict]:
    """What the analyser reads of the capture (the port declared h2c, and undeclared) against
    tshark per stream and, when given, nghttpx's log: one row per metric."""
    peer = tshark_h2(capture, UPGRADE_PORT)
    theirs = Counter(
        (port, round(entry["request"], 6), round(entry["response"], 6), entry["status"])
        for (port, _), entry in peer.items()
        if "response" in entry
    )
    upgrades = sum(1 for (_, stream), entry in peer.items() if stream == 1 and "response" in entry)
    rows = []
    if logged is not None:
        rows.append(_row("nghttpx's log", "requests", None, len(logged)))
        rows.append(
            _row(
                "nghttpx's log",
                "Upgrade requests",
                None,
                sum(entry.version == "HTTP/1.1" for entry in logged),
            )
        )
    for how, protocols in (("declared h2c", {UPGRADE_PORT: "h2c"}), ("undeclared", {})):
        mine = pairs(capture, protocols)
        answers = Counter(
            (port, round(asked, 6), round(when, 6), status)
            for port, entry in mine.items()
            for when, status, asked in entry["answers"]
            if asked is not None
        )
        first = {port: min(entry["requests"], default=None) for port, entry in mine.items()}
        rows += [
            _row(how, "requests", sum(len(e["requests"]) for e in mine.values()), len(peer)),
            _row(
                how,
                "answers at tshark's times and status",
                sum((answers & theirs).values()),
                sum(theirs.values()),
            ),
            _row(
                how,
                "Upgrade requests answered on stream 1",
                sum(
                    1 for port, asked, _, _ in answers.elements() if asked == round(first[port], 6)
                ),
                upgrades,
            ),
        ]
        if logged is not None:
            rows.append(
                _row(
                    how,
                    "5xx",
                    sum(n for key, n in answers.items() if key[3] >= 500),
                    sum(entry.status >= 500 for entry in logged),
                )
            )
    return rows


def _row(how: str, metric: str, analyser, reference) -> dict:
    return {"how": how, "metric": metric, "analyser": analyser, "reference": reference}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=6, help="connections (default 6)")
    parser.add_argument("--requests", type=int, default=8, help="per connection (default 8)")
    parser.add_argument("--sample", type=Path, metavar="PCAP", help="keep the capture here")
    args = parser.parse_args(argv)
    if not (1 <= args.connections <= 100 and 1 <= args.requests <= 100):
        parser.error("--connections and --requests: 1 to 100")
    reason = upgrade_available()
    if reason:
        print(f"appmon_upgrade: cannot run here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="appmon-upgrade-") as scratch:
        capture = args.sample or Path(scratch) / "upgrade.pcap"
        try:
            logged = record(capture, args.connections, args.requests)
        except CommandError as exc:
            print(f"appmon_upgrade: {exc}", file=sys.stderr)
            return 2
        rows = compare(capture, logged)
    print("| how | metric | analyser | reference |\n|---|---|---:|---:|")
    for row in rows:
        analyser = "-" if row["analyser"] is None else row["analyser"]
        print(f"| {row['how']} | {row['metric']} | {analyser} | {row['reference']} |")
    if args.sample:
        print(f"wrote {args.sample}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
