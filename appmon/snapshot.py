"""The appmon snapshot (``cosample.appmon-snapshot`` version 1): one closed window, every service.

Written by ``run`` (``GET /snapshot``, ``--state-dir``) and ``replay --json`` (one per line);
read back with ``parse_snapshot``. Times are seconds; ``window_start`` is UTC in the collector's
form. A service-time block is present only when the window matched a response to its request.
Field meanings are in docs/appmon.md ("Snapshot").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Final, Literal, TypeGuard, get_args

from pydantic import Field

from cosample.appmon.errors import AppmonError
from cosample.appmon.losses import WindowLosses
from cosample.appmon.rateinterval import rate_interval
from cosample.appmon.successinterval import success_interval
from cosample.appmon.windows import QUANTILES, STATUS_CLASSES, StatusClass, Window, service_name
from cosample.validation import Strict, UtcTime, parse_refusal, validate

APP_SNAPSHOT_FORMAT: Final = "cosample.appmon-snapshot"
APP_SNAPSHOT_VERSION: Final = 1
#: What a service's connections speak (``ServiceWindow.protocol``).
WireProtocol = Literal["http", "h2c", "tls", "h2"]
WIRE_PROTOCOLS: Final = get_args(WireProtocol)
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Interval = Annotated[list[Seconds], Field(min_length=2, max_length=2)]  # [low, high]


class ServiceTime(Strict):
    """Request first byte to response status line, over the window's matched responses (and
    the same figures for TLS handshake times)."""

    mean: Seconds
    min: Seconds
    max: Seconds
    p50: Seconds
    p95: Seconds
    p99: Seconds


class ServiceWindow(Strict):
    service: Annotated[str, Field(min_length=1)]
    requests: Count
    requests_per_s: Seconds
    responses: Count
    matched: Count
    status_classes: dict[StatusClass, Count]
    success_rate: Fraction | None
    service_time_s: ServiceTime | None
    #: the share of the service's connections this analyser selected (``--share-residues``; a
    #: mirror's copies arrive selected, its analyser says 1): ``requests_per_s`` is what it saw
    share: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    #: connections with a request in the window, and their request counts squared, summed
    #: (None: some requests came as compact records, which name no connection)
    request_connections: Count | None = None
    request_squares: Count | None = None
    #: 95 % interval of the requests/s over *all* the service's connections, renormalised by
    #: ``share`` at the connection level (``appmon.rateinterval``); None when unknown
    requests_per_s_ci95: Interval | None = None
    #: connections with a final response in the window, and over them the sums of n_i**2,
    #: ok_i*n_i and ok_i**2 (n_i final responses, ok_i of them 2xx/3xx; None: some responses
    #: came as compact records, or a snapshot older than these fields)
    final_connections: Count | None = None
    final_squares: Count | None = None
    final_ok_products: Count | None = None
    ok_squares: Count | None = None
    #: effective degrees of freedom of the success rate's variance over those connections
    #: (``successinterval.degrees_of_freedom``; None: unknown, or every residual 0)
    final_df: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None
    #: 95 % interval of the window's success rate over *all* the service's connections
    #: (``appmon.successinterval``); the rate itself at share 1; None when unknown
    success_rate_ci95: Annotated[list[Fraction], Field(min_length=2, max_length=2)] | None = None
    #: what the service's connections speak: ``http`` (HTTP/1.x), ``h2c``, ``tls`` (HTTP/1.1
    #: over TLS), ``h2`` (HTTP/2 over TLS); over TLS no status is visible, so ``responses``,
    #: ``status_classes`` and ``success_rate`` stay empty: absent, never a rate of 1
    protocol: WireProtocol | None = None
    #: answers whose status could not be read (over TLS: every one), in ``matched`` and
    #: ``service_time_s`` but not in ``responses``
    responses_without_status: Count = 0
    #: connections opened in the window (a client's SYN seen)
    connections_opened: Count = 0
    #: TLS handshakes completed (ClientHello to the client's Finished) and their times
    handshakes: Count = 0
    handshake_s: ServiceTime | None = None


class AppSnapshot(Strict):
    format: Literal["cosample.appmon-snapshot"] = APP_SNAPSHOT_FORMAT
    version: Literal[1] = APP_SNAPSHOT_VERSION
    analyser: Annotated[str, Field(min_length=1)]
    window_start: UtcTime
    window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    #: seconds of the window the live analyser was capturing: less than ``window_s`` in the
    #: window it started in and the one it stopped in (None: a capture's replay)
    covered_s: Seconds | None = None
    frames: Count
    connections: Count
    services: list[ServiceWindow]
    dropped: dict[str, Count]
    ignored: dict[str, Count]
    #: this window's inputs (``appmon.losses``; None: not read, or a capture's replay): frames
    #: the kernel's filter passed and those it dropped (ring full), their share; record
    #: datagrams taken and missing from the senders' sequences, the missing share
    kernel_frames: Count | None = None
    kernel_drops: Count | None = None
    kernel_drop_share: Fraction | None = None
    record_datagrams: Count | None = None
    record_datagrams_lost: Count | None = None
    record_loss_share: Fraction | None = None
    #: the window lost frames or records: its counts (and the renormalised rate, which does
    #: not account for such losses) are lower bounds
    lower_bound: bool = False

    def to_json(self) -> str:
        return self.model_dump_json()


def snapshot(
    window: Window,
    *,
    analyser: str,
    frames: int,
    connections: int,
    dropped: dict[str, int],
    ignored: dict[str, int],
    share: float = 1.0,
    covered_s: float | None = None,
    losses: WindowLosses | None = None,
) -> AppSnapshot:
    """The snapshot of one closed window (counters as they stand when it closed); ``share``:
    of the connections, what the analyser selected."""
    services = []
    for key, stats in sorted(window.services.items(), key=lambda item: service_name(item[0])):
        timing = None
        if stats.matched:
            p50, p95, p99 = _quantiles(stats.quantile)
            timing = ServiceTime(
                mean=stats.total_s / stats.matched,
                min=stats.min_s,
                max=stats.max_s,
                p50=p50,
                p95=p95,
                p99=p99,
            )
        handshake = None
        if stats.handshakes:
            sketch = stats.handshake_sketch
            assert sketch is not None  # (made with the first handshake)
            p50, p95, p99 = _quantiles(sketch.get_quantile_value)
            handshake = ServiceTime(
                mean=stats.handshake_total_s / stats.handshakes,
                min=stats.handshake_min_s,
                max=stats.handshake_max_s,
                p50=p50,
                p95=p95,
                p99=p99,
            )
        counts = stats.connection_counts()
        interval = rate_interval(
            stats.requests, counts[1] if counts else None, share, window.width_s
        )
        sums = stats.success_sums()
        ok = stats.statuses[1] + stats.statuses[2]
        final = stats.responses - stats.statuses[0]
        df = stats.success_df()
        success = success_interval(
            ok, final, sums[1:] if sums else None, sums[0] if sums else 0, share, df
        )
        services.append(
            ServiceWindow(
                service=service_name(key),
                requests=stats.requests,
                requests_per_s=stats.requests / window.width_s,
                responses=stats.responses,
                matched=stats.matched,
                status_classes=dict(zip(STATUS_CLASSES, stats.statuses)),
                success_rate=stats.success_rate(),
                service_time_s=timing,
                share=share,
                request_connections=counts[0] if counts else None,
                request_squares=counts[1] if counts else None,
                requests_per_s_ci95=interval,
                final_connections=sums[0] if sums else None,
                final_squares=sums[1] if sums else None,
                final_ok_products=sums[2] if sums else None,
                ok_squares=sums[3] if sums else None,
                final_df=df,
                success_rate_ci95=success,
                protocol=_wire_protocol(stats.protocol, service_name(key)),
                responses_without_status=stats.unread,
                connections_opened=stats.opened,
                handshakes=stats.handshakes,
                handshake_s=handshake,
            )
        )
    return AppSnapshot(
        analyser=analyser,
        window_start=datetime.fromtimestamp(window.start, timezone.utc),
        window_s=window.width_s,
        covered_s=covered_s,
        frames=frames,
        connections=connections,
        services=services,
        dropped=dropped,
        ignored=ignored,
        **(_losses(losses) if losses is not None else {}),
    )


def _known_protocol(name: str) -> TypeGuard[WireProtocol]:
    return name in WIRE_PROTOCOLS


def _wire_protocol(name: str | None, service: str) -> WireProtocol | None:
    """A window's protocol as the snapshot types it (the analyser names one of these)."""
    if name is None or _known_protocol(name):
        return name
    raise AppmonError(f"{service}: protocol {name!r} is none of {', '.join(WIRE_PROTOCOLS)}")


def _quantiles(quantile: Callable[[float], float | None]) -> tuple[float, float, float]:
    """``QUANTILES`` of a sketch that holds values (so each is known), none below 0."""
    p50, p95, p99 = (quantile(q) for q in QUANTILES)
    assert p50 is not None and p95 is not None and p99 is not None
    return max(0.0, p50), max(0.0, p95), max(0.0, p99)


def _losses(losses: WindowLosses) -> dict:
    return {
        "kernel_frames": losses.kernel_frames,
        "kernel_drops": losses.kernel_drops,
        "kernel_drop_share": losses.kernel_drop_share,
        "record_datagrams": losses.record_datagrams,
        "record_datagrams_lost": losses.record_datagrams_lost,
        "record_loss_share": losses.record_loss_share,
        "lower_bound": losses.lower_bound,
    }


def parse_snapshot(text: str | bytes, where: str = "snapshot") -> AppSnapshot:
    """A snapshot read back (JSON text), or one ``AppmonError`` naming field and value."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AppmonError(f"{where}: not JSON ({parse_refusal(exc)})") from None
    return validate(AppSnapshot, data, where=where, error=AppmonError)


def event_values(snap: AppSnapshot) -> dict[str, float]:
    """The values events watch, per service: load, success rate, mean and p95 service time."""
    values = {}
    for service in snap.services:
        values[f"{service.service}.requests_per_s"] = service.requests_per_s
        if service.success_rate is not None:
            values[f"{service.service}.success_rate"] = service.success_rate
        if service.service_time_s is not None:
            values[f"{service.service}.mean_s"] = service.service_time_s.mean
            values[f"{service.service}.p95_s"] = service.service_time_s.p95
    return values
