"""The application mechanisms' costs, measured on real traffic, written as the calibration's
``appmon`` section (issue 27 item 1).

The rig is the comparison's (``cosample.lab.appmirror``): wrk -> userspace OVS -> nginx + its
backend, an analysis node behind OVS's VXLAN port. Each round runs, in rotated order:

| arm | share s | whose CPU is the mechanism's |
|---|---|---|
| none | 0 | - (the host's base: nginx, backend, ovs-vswitchd) |
| sniffer_onsite | 1 | the analyser on the server's switch port |
| selective_mirror | 1/4, 1/2, 1 | ovs-vswitchd (copying, encapsulating); the analyser on vx0 |
| truncated_mirror | 1/4, 1/2, 1 | the same, copies cut to ``max_len`` |
| kernel_mirror | 1/4, 1/2, 1 | the kernel's (tc at the server's port), in ovs-vswitchd and nginx |

The kernel mirror (cls_bpf + mirred to a kernel VXLAN device, ``set_mechanism("tc")``) copies in
whichever task moves the segment: ovs-vswitchd as it transmits a request to the server, nginx
(the softirq of its send) for a response; its cost is the slope of both together, and its
copies are counted on the analysis node's eth1 and vx1.

A share ``s`` of the connections is mirrored by matching the low bits of the client's port
(``selective_flows(share_bits=k)``, the kernel mirror's filter alike: s = 2**-k); the share used
in the fit is the one realised, the analyser's request count over nginx's. ``costmodel.appmon_fit`` turns the phases into the
law's coefficient per mechanism on the monitored host, a linear cost on the analysis host, and
bytes on the fabric per request, each with a Student t interval over rounds.

    python -m cosample.experiments.appmon_costs --out calibration-appmon.json [--csv phases.csv]
        [--seconds 4] [--rounds 5] [--connections 32] [--max-minutes 15] [--base calibration.json]
    python -m cosample.experiments.appmon_costs --from-csv phases.csv --out calibration-appmon.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cosample.costmodel import appmon_fit
from cosample.costmodel.calibration_file import (
    CalibrationDocument,
    CalibrationFileError,
    read_calibration_file,
)
from cosample.dataplane.run import CommandError
from cosample.dataplane.run import run as run_command
from cosample.experiments import appmon_monitors as monitors
from cosample.experiments.appmon_comparison import TRUNCATE_BYTES
from cosample.experiments.errors import ExperimentError
from cosample.experiments.files import read_csv, write_csv, write_json
from cosample.plan.appmon import DEFAULT_SEGMENTS
from cosample.validation import validate


@dataclass(frozen=True)
class Arm:
    name: str
    mechanism: str = "none"
    truncate: int | None = None
    share_bits: int = 0
    monitor: str | None = None


ARMS = (
    Arm("none"),
    Arm("sniffer_onsite", monitor="onsite"),
    *(Arm("selective_mirror", "selective", None, bits, "analysis") for bits in (2, 1, 0)),
    *(Arm("truncated_mirror", "selective", TRUNCATE_BYTES, bits, "analysis") for bits in (2, 1, 0)),
    *(Arm("kernel_mirror", "tc", None, bits, "analysis") for bits in (2, 1, 0)),
)
#: arms a phases CSV may lack (written before the arm existed): the fit leaves their entries out
OPTIONAL_ARMS = ("kernel_mirror",)
COLUMNS = (
    "round",
    "arm",
    "truncate",
    "share_bits",
    "share_nominal",
    "analyser_share",
    "seconds",
    "connections",
    "requests",
    "requests_per_s",
    "server_cpu_s",
    "vswitchd_cpu_s",
    "monitor_cpu_s",
    "monitor_requests",
    "monitor_drops",
    "server_port_packets",
    "analysis_packets",
    "analysis_bytes",
    "analysis_inner_packets",
    "analysis_inner_bytes",
)
#: columns a phases CSV may lack (written before they were counted)
LATER_COLUMNS = ("nginx_cpu_s",)


def port_packets(rig) -> int:
    """Packets in and out of the server's switch port (what the on-site sniffer reads)."""
    stats = json.loads(
        run_command(["ip", "-n", rig.switch, "-s", "-j", "link", "show", rig.server_port]).stdout
    )[0]["stats64"]
    return stats["rx"]["packets"] + stats["tx"]["packets"]


def server_cpu(rig) -> float:
    """CPU seconds of nginx and its backend (the rig's first two processes)."""
    return sum(monitors.cpu_seconds(process.pid) for process in rig._processes[:2])


def nginx_cpu(rig) -> float:
    """CPU seconds of nginx alone (the rig's second process): where the kernel mirror copies
    a response (its backend talks to it over loopback, past no mirror)."""
    return monitors.cpu_seconds(rig._processes[1].pid)


@dataclass(frozen=True)
class Service:
    """What the arms load and monitor: nginx's HTTP/1.x port loaded by wrk (this calibration's
    own), or a port of the secure rig (``cosample.lab.webtls``, ``appmon_protocol_calibration``):
    HTTP/1.1 over TLS loaded by wrk over https, h2c and h2 by h2load with one stream at a time
    per connection, as wrk's. Mirrors copy the segments the plan copies for its protocol."""

    protocol: str = "http"
    port: int = monitors.SERVICE_PORT

    @property
    def segments(self) -> str:
        return DEFAULT_SEGMENTS[self.protocol]

    def logged(self, rig) -> int:
        """Requests nginx has logged for this service so far."""
        return len(rig.access_log() if self.protocol == "http" else rig.port_log(self.port))

    def load(self, rig, settings) -> float:
        """Load the service for ``settings.seconds``; the requests/s its client reports."""
        query = {"mean_ms": settings.mean_ms, "size": settings.size}
        if self.protocol in ("h2c", "h2"):
            url = rig.secure_url(self.port, **query)
            return monitors.parse_h2load(
                rig.h2load_for(url, settings.seconds, settings.connections)
            )
        url = rig.url(**query) if self.protocol == "http" else rig.secure_url(self.port, **query)
        report = rig.load(
            url, duration_s=settings.seconds, connections=settings.connections, latency=True
        )
        return monitors.parse_wrk(report).requests_per_s


HTTP = Service()


def run_arm(rig, arm: Arm, round_number: int, scratch: Path, settings, service=HTTP) -> dict:
    """One phase: apply the mechanism, start the monitor, load, read every counter."""
    from cosample.lab.web import SERVER_ADDRESS

    rig.set_mechanism(
        arm.mechanism,
        arm.truncate,
        service_port=service.port,
        share_bits=arm.share_bits,
        segments=service.segments,
    )
    monitor = (
        monitors.start(
            rig,
            arm.monitor,
            scratch / f"r{round_number}-{service.protocol}-{arm.name}-{arm.share_bits}",
            arm.name,
            port=service.port,
            protocol=None if service.protocol == "http" else service.protocol,
        )
        if arm.monitor
        else None
    )
    time.sleep(0.5)
    log_before = service.logged(rig)
    # the kernel mirror's copies travel on the rig's kernel underlay (eth1, vx1), the others on eth0
    underlay, device = ("eth1", "vx1") if arm.mechanism == "tc" else ("eth0", "vx0")
    outer, inner = rig.analysis_counters(underlay), rig.analysis_counters(device)
    packets = port_packets(rig)
    cpu = (
        server_cpu(rig),
        monitors.cpu_seconds(rig.vswitchd_pid()),
        monitors.cpu_seconds(monitor.process.pid) if monitor else 0.0,
        nginx_cpu(rig),
    )
    requests_per_s = service.load(rig, settings)
    time.sleep(0.5)  # the last responses reach the monitor
    cpu_after = (
        server_cpu(rig),
        monitors.cpu_seconds(rig.vswitchd_pid()),
        monitors.cpu_seconds(monitor.process.pid) if monitor else 0.0,
        nginx_cpu(rig),
    )
    outer_after, inner_after = rig.analysis_counters(underlay), rig.analysis_counters(device)
    packets_after = port_packets(rig)
    requests = service.logged(rig) - log_before
    result = monitors.stop(rig, monitor, f"{SERVER_ADDRESS}:{service.port}") if monitor else {}
    counted = result.get("monitor_requests") or 0
    nominal = 0.0 if arm.mechanism == "none" and not arm.monitor else 2.0**-arm.share_bits
    return {
        "round": round_number,
        "arm": arm.name,
        "truncate": arm.truncate,
        "share_bits": arm.share_bits,
        "share_nominal": nominal,
        "analyser_share": counted / requests if requests else None,
        "seconds": settings.seconds,
        "connections": settings.connections,
        "requests": requests,
        "requests_per_s": requests_per_s,
        "server_cpu_s": cpu_after[0] - cpu[0],
        "vswitchd_cpu_s": cpu_after[1] - cpu[1],
        "monitor_cpu_s": cpu_after[2] - cpu[2],
        "monitor_requests": counted,
        "monitor_drops": result.get("kernel_drops") or 0,
        "server_port_packets": packets_after - packets,
        "analysis_packets": outer_after.packets - outer.packets,
        "analysis_bytes": outer_after.bytes - outer.bytes,
        "analysis_inner_packets": inner_after.packets - inner.packets,
        "analysis_inner_bytes": inner_after.bytes - inner.bytes,
        "nginx_cpu_s": cpu_after[3] - cpu[3],
    }


def measure(settings, scratch: Path) -> pd.DataFrame:
    """Rounds of every arm, rotated, until ``--rounds`` or ``--max-minutes`` (whole rounds)."""
    from cosample.lab.appmirror import MirrorRig, rig_unavailable

    reason = rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_costs cannot run here: {reason}")
    rows, deadline = [], time.monotonic() + 60 * settings.max_minutes
    with MirrorRig(scratch / "rig", seed=settings.seed) as rig:
        for round_number in range(settings.rounds):
            if round_number and time.monotonic() > deadline:
                print(
                    f"appmon_costs: --max-minutes reached after {round_number} rounds",
                    file=sys.stderr,
                )
                break
            shift = round_number % len(ARMS)
            for arm in ARMS[shift:] + ARMS[:shift]:
                row = run_arm(rig, arm, round_number, scratch, settings)
                rows.append(row)
                print(
                    f"round {round_number} {arm.name:<17} s={row['share_nominal']:.2f} "
                    f"{row['requests_per_s']:8.1f} req/s  vswitchd "
                    f"{1e6 * row['vswitchd_cpu_s'] / max(row['requests'], 1):6.1f} us/req  "
                    f"monitor {1e6 * row['monitor_cpu_s'] / max(row['requests'], 1):6.1f} "
                    f"us/req  fabric {row['analysis_bytes'] / max(row['requests'], 1):6.1f} "
                    "B/req",
                    flush=True,
                )
    return pd.DataFrame(rows, columns=list(COLUMNS + LATER_COLUMNS))


def fit(frame: pd.DataFrame, confidence: float = 0.95, optional=OPTIONAL_ARMS) -> dict:
    """The ``appmon`` section of the calibration JSON from the phases (``optional``: arms the
    phases may lack, whose entries are then left out)."""
    frame = frame.assign(
        truncate=frame["truncate"].fillna(0),
        sniffed_packets=frame["server_port_packets"].where(frame["arm"] == "sniffer_onsite", 0),
    )
    base = frame[frame["arm"] == "none"].assign(share=0.0, mirrored_requests=0)
    missing = sorted({arm.name for arm in ARMS} - set(optional) - set(frame["arm"]))
    if missing:
        raise appmon_fit.AppmonFitError(
            f"no phases of arm(s) {', '.join(missing)}"
            + (" (the 'none' arm: no phase without monitoring)" if "none" in missing else "")
        )
    onsite = pd.concat([base, frame[frame["arm"] == "sniffer_onsite"].assign(share=1.0)])
    mechanisms = {
        "sniffer_onsite": {
            "host": "monitored",
            **appmon_fit.host_law(base, onsite, "monitor_cpu_s", "sniffed_packets", confidence),
            "fabric_bytes_per_request": 0.0,
        }
    }
    for name, truncate in (("selective", 0), ("truncated", TRUNCATE_BYTES)):
        arm = frame[(frame["arm"] == f"{name}_mirror") & (frame["truncate"] == truncate)]
        if arm.empty and f"{name}_mirror" in optional:
            continue
        arm = arm.assign(share=appmon_fit.realised_share(arm))
        arm = arm.assign(mirrored_requests=arm["share"] * arm["requests"])
        fabric = appmon_fit.fabric_bytes(pd.concat([base, arm]), confidence=confidence)
        mechanisms[f"{name}_mirror"] = {
            "host": "monitored",
            **appmon_fit.host_law(
                base, arm, "vswitchd_cpu_s", "analysis_inner_packets", confidence
            ),
            **fabric,
            "truncate_bytes": truncate or None,
        }
        mechanisms[f"analysis_{name}"] = {
            "host": "analysis",
            **appmon_fit.linear_cost(
                arm, "monitor_cpu_s", "mirrored_requests", "analysis_inner_packets", confidence
            ),
            **fabric,
            "truncate_bytes": truncate or None,
        }
    if (frame["arm"] == "kernel_mirror").any():
        mechanisms |= kernel_mirror(base, frame, confidence)
    c0 = appmon_fit.over_rounds(
        [appmon_fit.base_cost(rows) for _, rows in base.groupby("round")], confidence
    )
    return {
        "mechanisms": mechanisms,
        "confidence": confidence,
        **c0.to_dict("base_cpu_s_per_request"),
        **appmon_fit.forwarding(base, confidence),
        "metadata": {
            "method": "appmon_costs",
            "rounds": int(frame["round"].nunique()),
            "seconds": float(frame["seconds"].iloc[0]),
            "connections": int(frame["connections"].iloc[0]),
            "requests_per_s_none": float(base["requests_per_s"].median()),
            "share_law": "T(s) = T0/(1 + a s), s = share of connections, cost per request",
        },
    }


def kernel_mirror(base: pd.DataFrame, frame: pd.DataFrame, confidence: float) -> dict:
    """The kernel mirror's entries: its copies are made by whichever task sends or receives
    the segment on the server's port (ovs-vswitchd for requests, nginx's softirq for
    responses), so its sender cost is the slope of nginx's and the switch's CPU together (of
    the server's, backend included, in phases from before nginx's was counted apart)."""
    arm = frame[frame["arm"] == "kernel_mirror"]
    server = (
        arm["nginx_cpu_s"]
        if "nginx_cpu_s" in arm and arm["nginx_cpu_s"].notna().all()
        else arm["server_cpu_s"]
    )
    arm = arm.assign(
        share=appmon_fit.realised_share(arm), host_cpu_s=server + arm["vswitchd_cpu_s"]
    )
    arm = arm.assign(mirrored_requests=arm["share"] * arm["requests"])
    fabric = appmon_fit.fabric_bytes(pd.concat([base, arm]), confidence=confidence)
    return {
        "kernel_mirror": {
            "host": "monitored",
            **appmon_fit.host_law(base, arm, "host_cpu_s", "analysis_inner_packets", confidence),
            **fabric,
            "truncate_bytes": None,
        },
        "analysis_kernel": {
            "host": "analysis",
            **appmon_fit.linear_cost(
                arm, "monitor_cpu_s", "mirrored_requests", "analysis_inner_packets", confidence
            ),
            **fabric,
            "truncate_bytes": None,
        },
    }


def document(section: dict, base: Path | None) -> dict:
    """The calibration JSON to write: ``base``'s (validated) with ``appmon`` set, or only it."""
    out = {}
    if base is not None:
        read_calibration_file(base, error=ExperimentError)
        out = json.loads(base.read_text())
    out["appmon"] = section
    validate(CalibrationDocument, out, where="appmon_costs output", error=ExperimentError)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="calibration JSON to write")
    parser.add_argument("--csv", type=Path, help="phases CSV (default: beside --out)")
    parser.add_argument(
        "--from-csv",
        type=Path,
        metavar="FILE",
        help="measure nothing: fit the phases this command wrote",
    )
    parser.add_argument("--base", type=Path, help="calibration JSON whose alpha/beta to keep")
    parser.add_argument("--seconds", type=int, default=4, help="wrk per phase (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument(
        "--max-minutes", type=float, default=15.0, help="start no round after this (default 15)"
    )
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--mean-ms", type=float, default=1.0, help="backend service time, ms")
    parser.add_argument("--size", type=int, default=4000, help="response body bytes")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=1, help="backend's random seed")
    settings = parser.parse_args(argv)
    if settings.seconds < 1 or settings.rounds < 1 or settings.connections < 1:
        parser.error("--seconds, --rounds and --connections >= 1")
    if not 0 < settings.confidence < 1:
        parser.error(f"--confidence {settings.confidence}: expected between 0 and 1")
    return settings


def _interrupted(number: int, frame) -> None:
    raise KeyboardInterrupt(f"signal {number}")


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    csv_path = settings.csv or settings.out.with_suffix(".csv")
    signal.signal(signal.SIGTERM, _interrupted)  # the rig's with-block removes everything
    try:
        if settings.from_csv:
            frame = read_csv(settings.from_csv, required=COLUMNS)
        else:
            with tempfile.TemporaryDirectory(prefix="appmon-costs-") as scratch:
                frame = measure(settings, Path(scratch))
            write_csv(frame, csv_path, float_format=None)  # the JSON refits from it exactly
        out = document(fit(frame, settings.confidence), settings.base)
    except (ExperimentError, CommandError, CalibrationFileError, appmon_fit.AppmonFitError) as exc:
        print(f"appmon_costs: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("appmon_costs: interrupted; what it started was removed", file=sys.stderr)
        return 130
    write_json(out, settings.out)
    for name, entry in out["appmon"]["mechanisms"].items():
        law = (
            f"a = {entry['coefficient']:.3f} {entry['coefficient_ci']}"
            if entry["law"] == "share"
            else "linear"
        )
        print(
            f"{name:<20} {law}  {1e6 * entry['cpu_s_per_request']:.1f} us/request  "
            f"{entry['fabric_bytes_per_request']:.0f} B/request on the fabric"
        )
    print(f"wrote {settings.out}" + ("" if settings.from_csv else f" and {csv_path}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
