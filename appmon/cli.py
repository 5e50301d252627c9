"""``cosample appmon run|replay``: HTTP service time, load and success rate from packets."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from cosample.durations import duration_argument
from cosample.events import add_event_arguments, event_options


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "appmon",
        help="application monitor: HTTP service time, load, success rate from packets",
        description="Match HTTP/1.x requests to responses in captured packets and report, per "
        "service and window, load, service-time distribution, status classes and "
        "success rate (docs/appmon.md).",
    )
    commands = parser.add_subparsers(dest="appmon_command", metavar="ACTION")
    commands.required = True

    run = commands.add_parser("run", help="live analyser on an interface (AF_PACKET, root)")
    run.add_argument(
        "--interface",
        help="interface to capture (a mirror or tunnel endpoint, "
        "a VM's port, lo); needed unless --receive-records",
    )
    run.add_argument(
        "--ring-mib",
        type=int,
        default=64,
        metavar="N",
        help="packet ring size in MiB of kernel memory (default 64: at least 25 s of "
        "traffic at low rates, about 0.6 s at 300,000 frames/s); frames that find it full "
        "are kernel drops",
    )
    run.add_argument(
        "--send-records",
        metavar="ADDRESS:PORT",
        help="off-site sniffer: also send every request and response as a compact "
        "record (UDP) to the analysis host's --receive-records",
    )
    run.add_argument(
        "--record-rate",
        type=float,
        default=None,
        metavar="N",
        help="most records sent per second (default 50000; the rest are counted "
        "as records_over_rate)",
    )
    run.add_argument(
        "--receive-records",
        metavar="ADDRESS:PORT",
        help="analysis host: listen for compact records here and count them in "
        "the same windows as packets",
    )
    run.add_argument(
        "--record-key",
        metavar="FILE",
        help="the pair's key for compact records (hexadecimal, mode 600): the sender "
        "authenticates each datagram with it, the receiver takes none without it "
        "(the agents derive it from their record_secret)",
    )
    run.add_argument(
        "--records-from",
        metavar="ADDRESS",
        help="with --receive-records: the only address records are taken from "
        "(the sender's, as the plan names it)",
    )
    run.add_argument(
        "--send-records-from",
        metavar="ADDRESS",
        help="with --send-records: send from this local address (the one the receiver expects)",
    )
    run.add_argument(
        "--insecure-records",
        action="store_true",
        help="compact records without a key (a well-known one) and, on a receiver, from "
        "any address: anyone who reaches the port can forge the windows (labs only)",
    )
    run.add_argument(
        "--share-residues",
        type=int,
        default=None,
        metavar="N",
        help="analyse only the connections whose client port's low 8 bits are "
        "below N (1-256: a plan's share of connections, N/256); the snapshot "
        "states the share and renormalises the rate's interval by it",
    )
    _common(run)
    run.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve /metrics, /snapshot and /healthz over HTTP on this port",
    )
    run.add_argument("--http-host", default="127.0.0.1", help="address of the HTTP server")
    run.add_argument(
        "--state-dir",
        type=Path,
        help="write snapshot.json (last window) and append windows.jsonl here as windows close",
    )
    run.add_argument(
        "--snapshot-key",
        metavar="PRIVATE.pem",
        help="ed25519 key that signs /snapshot (header X-Cosample-Signature) and "
        "snapshot.json.sig; the controller verifies with --analyser-key",
    )
    add_event_arguments(run)
    run.add_argument(
        "--duration",
        type=duration_argument,
        metavar="DURATION",
        help="stop after this long (default: until SIGTERM or SIGINT)",
    )
    run.set_defaults(func=_run)

    replay = commands.add_parser("replay", help="the analyser on a pcap capture")
    replay.add_argument("capture", type=Path, metavar="CAPTURE.pcap")
    _common(replay)
    replay.add_argument(
        "--json", action="store_true", help="print each window's snapshot as one JSON line"
    )
    replay.set_defaults(func=_replay)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window",
        type=duration_argument,
        default=10.0,
        metavar="DURATION",
        help="window width (default 10s); windows are aligned to multiples of it in Unix time",
    )
    parser.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="only services on this port (repeat for several; default: any "
        "TCP connection that speaks HTTP/1.x)",
    )
    parser.add_argument(
        "--protocol",
        action="append",
        default=[],
        metavar="PORT=PROTOCOL",
        help="what the service on PORT speaks: http (HTTP/1.x), h2c, tls (HTTP/1.1 over TLS) or "
        "h2 (HTTP/2 over TLS); repeat for several (default: told by each connection's first "
        "bytes, TLS as tls unless ALPN shows h2)",
    )
    parser.add_argument(
        "--name",
        default=socket.gethostname(),
        help="analyser name in the snapshot (default: host name)",
    )
    parser.add_argument(
        "--pure-python",
        action="store_true",
        help="decode every frame in Python, not through the compiled fast path (its "
        "reference: the same windows, slower; for comparisons)",
    )


def _settings(args) -> tuple[float, frozenset[int]]:
    from cosample.appmon.errors import AppmonError

    if not args.window > 0:
        raise AppmonError(f"--window: must be > 0, got {args.window}")
    for port in args.port:
        if not 0 < port < 65536:
            raise AppmonError(f"--port: expected 1-65535, got {port}")
    return args.window, frozenset(args.port)


def _protocols(args) -> dict[int, str]:
    from cosample.appmon.errors import AppmonError
    from cosample.appmon.protocols import parse_declarations

    try:
        return parse_declarations(args.protocol)
    except ValueError as exc:
        raise AppmonError(f"--protocol: {exc}") from None


def _run(args) -> int:
    import signal

    from cosample.appmon.errors import AppmonError
    from cosample.appmon.recordlink import parse_endpoint
    from cosample.appmon.records import DEFAULT_RATE
    from cosample.appmon.service import Service, Settings

    window, ports = _settings(args)
    protocols = _protocols(args)
    band, max_silence_s = event_options(args)
    if args.duration is not None and not args.duration > 0:
        raise AppmonError(f"--duration: must be > 0, got {args.duration}")
    if args.interface is None and args.receive_records is None:
        raise AppmonError(
            "appmon run: give --interface (packets), --receive-records (compact records), or both"
        )
    if args.send_records and args.interface is None:
        raise AppmonError("--send-records: needs --interface (records come from packets)")
    if args.record_rate is not None and not args.send_records:
        raise AppmonError("--record-rate: only with --send-records")
    from cosample.plan.appmon import SHARE_BITS

    selected = 1 << SHARE_BITS if args.share_residues is None else args.share_residues
    if not 0 < selected <= 1 << SHARE_BITS:
        raise AppmonError(f"--share-residues: expected 1-{1 << SHARE_BITS}, got {selected}")
    rate = DEFAULT_RATE if args.record_rate is None else args.record_rate
    if not rate > 0:
        raise AppmonError(f"--record-rate: must be > 0, got {rate:g}")
    send_to = parse_endpoint(args.send_records, "--send-records") if args.send_records else None
    receive_at = (
        parse_endpoint(args.receive_records, "--receive-records") if args.receive_records else None
    )
    key, records_from = _record_trust(args)
    if not 1 <= args.ring_mib <= 4096:
        raise AppmonError(f"--ring-mib: expected 1-4096, got {args.ring_mib}")
    settings = Settings(
        interface=args.interface,
        name=args.name,
        window_s=window,
        ports=ports,
        metrics_port=args.metrics_port,
        http_host=args.http_host,
        state_dir=args.state_dir,
        events=args.events,
        band=band,
        max_silence_s=max_silence_s,
        duration_s=args.duration,
        send_records=send_to,
        record_rate=rate,
        receive_records=receive_at,
        snapshot_key=args.snapshot_key,
        selected=selected,
        receive_buffer=args.ring_mib << 20,
        record_key=key,
        records_from=records_from,
        send_records_from=args.send_records_from,
        protocols=protocols,
        compiled=not args.pure_python,
    )
    service = Service(settings).start()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: service.stop())
    http = (
        f", HTTP on {service.http_address[0]}:{service.http_address[1]}"
        if settings.metrics_port is not None
        else ""
    )
    sources = ([f"capturing on {settings.interface}"] if settings.interface else []) + (
        [f"receiving records on {args.receive_records}"] if settings.receive_records else []
    )
    sending = f", sending records to {args.send_records}" if settings.send_records else ""
    print(
        f"appmon {settings.name}: {' and '.join(sources)}{http}{sending}",
        file=sys.stderr,
        flush=True,
    )
    service.run()
    return 0


def _record_trust(args) -> tuple[bytes, str | None]:
    """The records' key and the receiver's one sender, checked; secure unless
    ``--insecure-records`` says otherwise, loudly."""
    import ipaddress

    from cosample.appmon.errors import AppmonError
    from cosample.appmon.recordlink import read_key
    from cosample.appmon.records import INSECURE_KEY

    records = args.send_records or args.receive_records
    for option, value in (
        ("--record-key", args.record_key),
        ("--records-from", args.records_from),
        ("--send-records-from", args.send_records_from),
        ("--insecure-records", args.insecure_records),
    ):
        if value and not records:
            raise AppmonError(f"{option}: only with --send-records or --receive-records")
    if args.records_from and not args.receive_records:
        raise AppmonError("--records-from: only with --receive-records")
    if args.send_records_from and not args.send_records:
        raise AppmonError("--send-records-from: only with --send-records")
    for option, value in (
        ("--records-from", args.records_from),
        ("--send-records-from", args.send_records_from),
    ):
        if value:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise AppmonError(f"{option} {value!r}: expected an IP address") from None
    if args.insecure_records:
        if args.record_key:
            raise AppmonError("--insecure-records: not with --record-key")
        print(
            "appmon: warning: --insecure-records: compact records are not authenticated; "
            "anyone who reaches the port can forge the windows",
            file=sys.stderr,
            flush=True,
        )
        return INSECURE_KEY, args.records_from
    if records and not args.record_key:
        raise AppmonError(
            "compact records need --record-key FILE (the pair's key; or --insecure-records, "
            "for labs)"
        )
    if args.receive_records and not args.records_from:
        raise AppmonError(
            "--receive-records: give --records-from ADDRESS, the sender's address "
            "(or --insecure-records, for labs)"
        )
    return (read_key(args.record_key) if args.record_key else INSECURE_KEY), args.records_from


def _replay(args) -> int:
    from cosample.appmon.replay import replay, table

    window, ports = _settings(args)
    protocols = _protocols(args)
    windows = 0
    for snap in replay(
        args.capture,
        window_s=window,
        ports=ports,
        name=args.name,
        protocols=protocols,
        compiled=not args.pure_python,
    ):
        print(snap.to_json() if args.json else table(snap), end="\n" if args.json else "")
        windows += 1
    if not windows:  # say so: an empty answer reads like a tool that did nothing
        on = f" on port(s) {', '.join(map(str, sorted(ports)))}" if ports else ""
        print(
            f"cosample: {args.capture}: no HTTP request or response{on} in this capture; "
            "nothing to report",
            file=sys.stderr,
        )
    return 0
