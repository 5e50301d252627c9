"""Each protocol's monitoring costs, calibrated as HTTP/1.x's are: the calibration JSON's
``appmon.protocols`` (issue 45 item 4).

The rig is ``cosample.lab.securemirror``: the HTTP/1.x calibration's (``appmon_costs``: load ->
userspace OVS -> nginx + its backend, an analysis node behind OVS's VXLAN port, the kernel
mirror's own tunnel) with nginx's secure ports. Per protocol, the service and its load:

| protocol | port | load | segments a mirror copies (``DEFAULT_SEGMENTS``) |
|---|---|---|---|
| http | 80 | wrk | PSH |
| tls | 443 | wrk over https | every segment |
| h2c | 8080 | h2load, one stream at a time per connection | every segment, never truncated |
| h2 | 8443 | h2load, likewise | every segment |

Each round runs, protocol after protocol (their order rotated from round to round), the arms of
``appmon_costs`` on that protocol's service in rotated order: none, the on-site analyser, the
selective mirror at shares 1/4, 1/2 and 1, the same truncated to ``TRUNCATE_BYTES`` (not h2c),
the kernel mirror at the three shares; the analysers are told the protocol (``--protocol
PORT=NAME``, as the agents pass a plan's). The same counters, and the same fit
(``appmon_costs.fit``: per round, then Student t intervals over rounds), per protocol.

Adaptive stopping: from ``--min-rounds`` on, after each round, every monitored-host coefficient
``a`` (on-site, selective, truncated and kernel mirror) of every protocol is refitted; the run
stops when each interval's half-width is at most ``max(--target-ci x |a|, --target-ci-abs)``
(``costmodel.adaptive.Target``, the sFlow calibration's rule), or at ``--rounds``, or when
``--max-minutes`` have passed (no round started after them). ``metadata`` records, per
protocol, whether each target was met, the rounds, and the load averages at start and end.

    python -m cosample.experiments.appmon_protocol_calibration --out cal.json [--csv phases.csv]
        [--protocols http,tls,h2,h2c] [--seconds 4] [--rounds 20] [--min-rounds 6]
        [--target-ci 0.1] [--target-ci-abs 0.02] [--max-minutes 30] [--connections 32]
        [--base calibration.json]
    python -m cosample.experiments.appmon_protocol_calibration --from-csv phases.csv --out cal.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from cosample.costmodel import appmon_fit
from cosample.costmodel.adaptive import Target
from cosample.costmodel.calibration_file import (
    CalibrationDocument,
    CalibrationFileError,
    read_calibration_file,
)
from cosample.dataplane.run import CommandError
from cosample.experiments import appmon_costs
from cosample.experiments.appmon_costs import ARMS, Service
from cosample.experiments.errors import ExperimentError
from cosample.experiments.files import read_csv, write_csv, write_json
from cosample.plan.appmon import UNCUT
from cosample.times import format_time
from cosample.validation import validate

PORTS = {"http": 80, "tls": 443, "h2c": 8080, "h2": 8443}
COLUMNS = ("protocol", "port", *appmon_costs.COLUMNS, *appmon_costs.LATER_COLUMNS)
#: the monitored host's entries whose coefficient ``a`` the stopping rule waits for
STOPPING = ("sniffer_onsite", "selective_mirror", "truncated_mirror", "kernel_mirror")


def arms(protocol: str) -> tuple:
    """The arms a protocol's service runs: no truncated mirror for a protocol never cut."""
    return tuple(arm for arm in ARMS if not (arm.truncate and protocol in UNCUT))


def optional_arms(protocol: str) -> tuple[str, ...]:
    return appmon_costs.OPTIONAL_ARMS + (("truncated_mirror",) if protocol in UNCUT else ())


def fit(frame: pd.DataFrame, confidence: float = 0.95) -> dict[str, dict]:
    """Each protocol's section (``appmon_costs.fit`` on its phases), with its service's
    port and segments in the metadata."""
    out = {}
    for protocol, phases in frame.groupby("protocol", sort=True):
        try:
            section = appmon_costs.fit(phases, confidence, optional_arms(protocol))
        except appmon_fit.AppmonFitError as exc:
            raise appmon_fit.AppmonFitError(f"protocol {protocol}: {exc}") from None
        service = Service(protocol, int(phases["port"].iloc[0]))
        section["metadata"] |= {
            "method": "appmon_protocol_calibration",
            "protocol": protocol,
            "port": service.port,
            "segments": service.segments,
        }
        out[protocol] = section
    return out


def half_widths(sections: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """``protocol.mechanism`` -> (a, half-width of its interval; inf without one)."""
    out = {}
    for protocol, section in sections.items():
        for name in STOPPING:
            entry = section["mechanisms"].get(name)
            if entry is None:
                continue
            low, high = entry["coefficient_ci"]
            half = (high - low) / 2 if low is not None and high is not None else float("inf")
            out[f"{protocol}.{name}"] = (entry["coefficient"], half)
    return out


def targets_met(frame: pd.DataFrame, target: Target) -> dict[str, bool] | None:
    """Whether each coefficient's interval meets ``target`` (None: not fittable yet)."""
    try:
        widths = half_widths(fit(frame, target.confidence))
    except appmon_fit.AppmonFitError:
        return None
    return {name: target.met(a, half) for name, (a, half) in widths.items()}


def measure(settings, scratch: Path, target: Target) -> tuple[pd.DataFrame, dict]:
    """Rounds of every protocol's arms until the targets are met, ``--rounds`` or
    ``--max-minutes``; the phases and how the run stopped."""
    from cosample.lab.securemirror import SecureMirrorRig, secure_rig_unavailable

    reason = secure_rig_unavailable()
    if reason:
        raise ExperimentError(f"appmon_protocol_calibration cannot run here: {reason}")
    protocols = settings.protocols
    rows, started = [], time.monotonic()
    started_at = format_time(time.time())
    deadline = started + 60 * settings.max_minutes
    stopped = "rounds"
    load_start = list(os.getloadavg())
    with SecureMirrorRig(scratch / "rig", seed=settings.seed) as rig:
        for number in range(settings.rounds):
            if number and time.monotonic() > deadline:
                stopped = "max_minutes"
                break
            shift = number % len(protocols)
            for protocol in protocols[shift:] + protocols[:shift]:
                service, own = Service(protocol, PORTS[protocol]), arms(protocol)
                turn = number % len(own)
                for arm in own[turn:] + own[:turn]:
                    row = appmon_costs.run_arm(rig, arm, number, scratch, settings, service)
                    rows.append({"protocol": protocol, "port": service.port, **row})
                    print(progress(protocol, row), flush=True)
            if number + 1 >= settings.min_rounds:
                met = targets_met(pd.DataFrame(rows, columns=list(COLUMNS)), target)
                if met and all(met.values()):
                    stopped = "target"
                    break
    return pd.DataFrame(rows, columns=list(COLUMNS)), {
        "stopped": stopped,
        "rounds_run": number + 1 if stopped != "max_minutes" else number,
        "minutes": round((time.monotonic() - started) / 60, 2),
        "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()),
        "started": started_at,
    }


def progress(protocol: str, row: dict) -> str:
    requests = max(row["requests"], 1)
    return (
        f"round {row['round']} {protocol:<4} {row['arm']:<17} s={row['share_nominal']:.2f} "
        f"{row['requests_per_s']:8.1f} req/s  server {1e6 * row['server_cpu_s'] / requests:6.1f}"
        f"  vswitchd {1e6 * row['vswitchd_cpu_s'] / requests:6.1f}  monitor "
        f"{1e6 * row['monitor_cpu_s'] / requests:6.1f} us/req  fabric "
        f"{row['analysis_bytes'] / requests:6.1f} B/req"
    )


def versus_http(section: dict, http: dict) -> dict[str, float | None]:
    """Per mechanism, CPU per request of ``section``'s protocol over HTTP/1.x's, both measured
    in the same run (None where HTTP/1.x's is not above 0)."""
    out = {}
    for name, entry in sorted(section["mechanisms"].items()):
        theirs = http["mechanisms"].get(name, {}).get("cpu_s_per_request")
        ratio = entry["cpu_s_per_request"] / theirs if theirs and theirs > 0 else None
        out[name] = None if ratio is None else round(ratio, 3)
    return out


def document(sections: dict[str, dict], base: Path | None) -> dict:
    """The calibration JSON: ``base``'s with ``appmon.protocols`` set (the protocols other than
    HTTP/1.x, each with its CPU over HTTP/1.x's when both were measured); without a base (or one
    without an ``appmon`` section) the HTTP/1.x phases' section is the ``appmon`` section."""
    out = {}
    http = sections.get("http")
    sections = {name: section for name, section in sections.items() if name != "http"}
    if http is not None:  # measured side by side: each protocol's cost over HTTP/1.x's
        for section in sections.values():
            section["metadata"]["cpu_vs_http"] = versus_http(section, http)
    if base is not None:
        read_calibration_file(base, error=ExperimentError)
        out = json.loads(base.read_text())
    if out.get("appmon") is None:
        if http is None:
            raise ExperimentError(
                "no HTTP/1.x costs to put beside the protocols': give --base with an appmon "
                "section (python -m cosample.experiments.appmon_costs) or measure http too"
            )
        out["appmon"] = dict(http)
    out["appmon"]["protocols"] = sections
    validate(
        CalibrationDocument, out, where="appmon_protocol_calibration output", error=ExperimentError
    )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="calibration JSON to write")
    parser.add_argument("--csv", type=Path, help="phases CSV (default: beside --out)")
    parser.add_argument(
        "--from-csv", type=Path, metavar="FILE", help="measure nothing: fit these phases"
    )
    parser.add_argument(
        "--base", type=Path, help="calibration JSON whose appmon section (HTTP/1.x) to keep"
    )
    parser.add_argument(
        "--protocols",
        default="tls,h2,h2c",
        help="comma-separated, of http, tls, h2, h2c (default tls,h2,h2c)",
    )
    parser.add_argument("--seconds", type=int, default=4, help="load per phase (default 4)")
    parser.add_argument("--rounds", type=int, default=20, help="at most (default 20)")
    parser.add_argument(
        "--min-rounds", type=int, default=6, help="rounds before stopping may (default 6)"
    )
    parser.add_argument("--target-ci", type=float, default=0.10, help="relative (default 0.1)")
    parser.add_argument("--target-ci-abs", type=float, default=0.02, help="absolute (0.02)")
    parser.add_argument(
        "--max-minutes", type=float, default=30.0, help="start no round after this (default 30)"
    )
    parser.add_argument("--connections", type=int, default=32, help="connections (default 32)")
    parser.add_argument("--mean-ms", type=float, default=1.0, help="backend service time, ms")
    parser.add_argument("--size", type=int, default=4000, help="response body bytes")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=1, help="backend's random seed")
    settings = parser.parse_args(argv)
    settings.protocols = [name for name in settings.protocols.split(",") if name]
    unknown = sorted(set(settings.protocols) - set(PORTS))
    if unknown or not settings.protocols or len(set(settings.protocols)) < len(settings.protocols):
        parser.error(
            f"--protocols {','.join(settings.protocols)}: each of {', '.join(PORTS)} at most once"
        )
    if min(settings.seconds, settings.rounds, settings.connections, settings.min_rounds) < 1:
        parser.error("--seconds, --rounds, --min-rounds and --connections >= 1")
    if not 0 < settings.confidence < 1:
        parser.error(f"--confidence {settings.confidence}: expected between 0 and 1")
    return settings


def _interrupted(number: int, frame) -> None:
    raise KeyboardInterrupt(f"signal {number}")


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    csv_path = settings.csv or settings.out.with_suffix(".csv")
    signal.signal(signal.SIGTERM, _interrupted)  # the rig's with-block removes everything
    run = {}
    try:
        target = Target(
            relative=settings.target_ci,
            absolute=settings.target_ci_abs,
            max_time_s=min(max(60 * settings.max_minutes, 10.0), 24 * 3600.0),
            min_rounds=settings.min_rounds,
            confidence=settings.confidence,
        )
        if settings.from_csv:
            frame = read_csv(settings.from_csv, required=COLUMNS)
        else:
            with tempfile.TemporaryDirectory(prefix="appmon-protocol-calibration-") as scratch:
                frame, run = measure(settings, Path(scratch), target)
            write_csv(frame, csv_path, float_format=None)  # the JSON refits from it exactly
        sections = fit(frame, settings.confidence)
        met = targets_met(frame, target) or {}
        for protocol, section in sections.items():
            section["metadata"]["target_ci"] = {
                "relative": target.relative,
                "absolute": target.absolute,
            }
            section["metadata"]["target_met"] = {
                name.split(".", 1)[1]: value
                for name, value in met.items()
                if name.startswith(f"{protocol}.")
            }
            if run:  # how the measurement went (not in the phases: a refit has none)
                section["metadata"]["run"] = run
        out = document(sections, settings.base)
    except (
        ExperimentError,
        CommandError,
        CalibrationFileError,
        appmon_fit.AppmonFitError,
    ) as exc:
        print(f"appmon_protocol_calibration: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "appmon_protocol_calibration: interrupted; what it started was removed", file=sys.stderr
        )
        return 130
    write_json(out, settings.out)
    for protocol, section in sections.items():
        for name, entry in section["mechanisms"].items():
            law = (
                f"a = {entry['coefficient']:.3f} {entry['coefficient_ci']}"
                if entry["law"] == "share"
                else "linear"
            )
            print(
                f"{protocol:<4} {name:<20} {law}  {1e6 * entry['cpu_s_per_request']:.1f} "
                f"us/request  {entry['fabric_bytes_per_request']:.0f} B/request on the fabric"
            )
    print(f"wrote {settings.out}" + ("" if settings.from_csv else f" and {csv_path}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
