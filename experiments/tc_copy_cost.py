"""What one kernel (tc) mirror copy costs, in CPU time of the process whose send makes it.

The application rig's kernel mirror (``cosample.lab.appmirror``, ``tc``) copies in the kernel,
on the time of whoever sends the packet; on the shared machine that cost is below the noise of
the web server's CPU (docs/results.md). Here one process sends datagrams as fast as it can
through a veth whose egress hook carries the mirror, and counts its own CPU time (user +
system, ``getrusage``): the clone, the classic-BPF match, the kernel VXLAN encapsulation and
the copy's transmission happen in its send calls, and so does the receiving namespace's
processing of both packets (veth delivers within the sender's softirq), so the difference per
packet is an upper bound on the sender's cost per copy. Arms, rotated per round: no filter, a
filter that matches nothing (the classifier alone), the mirror (every packet copied).

    python -m cosample.experiments.tc_copy_cost [--packets 200000] [--rounds 5] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from cosample.experiments.errors import ExperimentError

ARMS = ("none", "classifier", "mirror")
SENDER, RECEIVER, UNDERLAY_S, UNDERLAY_R = "10.81.0.1", "10.81.0.2", "10.82.0.1", "10.82.0.2"
#: cBPF: match nothing (the classifier's own cost) / match every packet
NO_MATCH, MATCH = "1,6 0 0 0", "1,6 0 0 4294967295"
SEND = (
    "import resource, socket, sys\n"
    "n = int(sys.argv[1]); s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "payload, target = b'x' * 100, (sys.argv[2], 9)\n"
    "before = resource.getrusage(resource.RUSAGE_SELF)\n"
    "for _ in range(n):\n"
    "    s.sendto(payload, target)\n"
    "after = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)\n"
)


def build(lab) -> tuple[str, str, str]:
    """Sender and receiver namespaces, the sent path and the copies' kernel VXLAN path."""
    from cosample.dataplane.run import run

    sender, receiver = lab.namespace("s"), lab.namespace("r")
    data, underlay, tunnel = f"{lab.prefix}d", f"{lab.prefix}u", f"{lab.prefix}t"
    lab.veth(data, receiver, peer="eth0", address=f"{RECEIVER}/24", host_namespace=sender)
    lab.veth(underlay, receiver, peer="eth1", address=f"{UNDERLAY_R}/24", host_namespace=sender)
    s, r = ["ip", "-n", sender], ["ip", "-n", receiver]
    for argv in (
        [*s, "addr", "add", f"{SENDER}/24", "dev", data],
        [*s, "addr", "add", f"{UNDERLAY_S}/24", "dev", underlay],
        [
            *s,
            "link",
            "add",
            tunnel,
            "type",
            "vxlan",
            "id",
            "4243",
            "local",
            UNDERLAY_S,
            "remote",
            UNDERLAY_R,
            "dstport",
            "4789",
            "dev",
            underlay,
        ],
        [*s, "link", "set", tunnel, "up"],
        [
            "ip",
            "netns",
            "exec",
            sender,
            "sysctl",
            "-q",
            "-w",
            f"net.ipv6.conf.{tunnel}.disable_ipv6=1",
        ],
        [
            *r,
            "link",
            "add",
            "vx1",
            "type",
            "vxlan",
            "id",
            "4243",
            "local",
            UNDERLAY_R,
            "dstport",
            "4789",
            "dev",
            "eth1",
        ],
        [*r, "link", "set", "vx1", "up"],
        # the receiver has no socket on port 9: no ICMP answers to charge anyone with
        ["ip", "netns", "exec", receiver, "sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=1000000"],
    ):
        run(argv)
    return sender, data, tunnel


def run_rounds(settings: argparse.Namespace) -> list[dict[str, Any]]:
    from cosample.dataplane.run import run
    from cosample.dataplane.tcmirror import (
        clsact_add_argv,
        clsact_delete_argv,
        selective_filter_argv,
    )
    from cosample.lab.netns import Lab, netns_available

    reason = netns_available()
    if reason:
        raise ExperimentError(f"tc_copy_cost cannot run here: {reason}")
    rows = []
    with Lab.unique("tq") as lab:  # unique among concurrent runs
        sender, data, tunnel = build(lab)
        for round_number in range(settings.rounds):
            shift = round_number % len(ARMS)
            for arm in ARMS[shift:] + ARMS[:shift]:
                if arm != "none":
                    run(clsact_add_argv(data, netns=sender))
                    run(
                        selective_filter_argv(
                            data,
                            tunnel,
                            MATCH if arm == "mirror" else NO_MATCH,
                            prio=40,
                            direction="egress",
                            netns=sender,
                        )
                    )
                before = _rx_packets(lab, "vx1")
                cpu = float(
                    run(
                        lab.exec_argv(
                            sender, [sys.executable, "-c", SEND, str(settings.packets), RECEIVER]
                        ),
                        timeout=300,
                    ).stdout
                )
                copies = _rx_packets(lab, "vx1") - before
                if arm != "none":
                    run(clsact_delete_argv(data, netns=sender))
                row = {
                    "round": round_number,
                    "arm": arm,
                    "packets": settings.packets,
                    "copies": copies,
                    "cpu_s": cpu,
                    "us_per_packet": 1e6 * cpu / settings.packets,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def _rx_packets(lab, device: str) -> int:
    from cosample.dataplane.run import run

    receiver = next(name for name in lab.namespaces if name.endswith("r"))
    stats = json.loads(run(["ip", "-n", receiver, "-s", "-j", "link", "show", device]).stdout)[0][
        "stats64"
    ]["rx"]
    return stats["packets"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not 1000 <= args.packets <= 5_000_000 or not 1 <= args.rounds <= 50:
        parser.error("--packets 1000..5000000, --rounds 1..50")
    try:
        rows = run_rounds(args)
    except ExperimentError as exc:
        print(f"tc_copy_cost: {exc}", file=sys.stderr)
        return 1
    medians = {
        arm: statistics.median(r["us_per_packet"] for r in rows if r["arm"] == arm) for arm in ARMS
    }
    for arm in ARMS:
        mine = sorted(r["us_per_packet"] for r in rows if r["arm"] == arm)
        copies = sum(r["copies"] for r in rows if r["arm"] == arm)
        print(
            f"{arm:<10} {medians[arm]:.3f} µs per packet sent (range {mine[0]:.3f}-"
            f"{mine[-1]:.3f}), {medians[arm] - medians['none']:+.3f} over none; copies "
            f"received {copies} of {args.packets * args.rounds}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"settings": vars(args) | {"json": None}, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
