"""From the analysers' snapshots to each service's request rate, renormalised by the running
plan's share (pure).

The services are indexed like the inventory's ``services``; the result is a ``Measurement``
whose "servers" are the services (own traffic = requests/s, on the diagonal), so the collector
path's plausibility checks (``plausibility.vet``: a service cannot carry more requests than its
server can forward packets for; jumps wait for a second window) and smoothing
(``smoothing.update``: EWMA, rises at once, steps, the hold) apply to it unchanged.

**Renormalisation happens here, once**: the analyser reports what it saw; a plan that monitors
a share ``s`` of a service's connections (``hosts.<h>.appmon[].share``, applied by the agents as
``selected_share(s)`` of 256 client-port residues) makes it see about ``s`` of the requests, so
the rate is ``requests_per_s / s_applied`` (``connshare.renormalise``'s load estimate), and its
95 % interval is connection-level (``appmon.rateinterval``: the requests of one connection come
and go together, so a Poisson interval on requests would be too narrow), from the sums of
squared per-connection request counts the snapshot carries; None when an analyser cannot tell
connections apart (compact records) and the share is below 1. The success rate is not
renormalised (a ratio), but its interval is connection-level too (``success_rates``,
``appmon.successinterval``), from the per-connection sums of final and successful responses. A live analyser's window counts
only the seconds it was capturing (``covered_s``): the first and last windows of an analyser
the agents start or stop on a move are partial; the rate is taken over what was covered. A service the
running plan does not list (no plan yet, or not monitored) is taken at share 1: an analyser that
reports it was set up to see all of it. Two analysers reporting the same service (a sniffer and
a mirror's analyser, during a move from one to the other) each see part of it: the higher rate
is taken, and the loop keeps such windows out of step detection and the hold (``quiet``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from cosample.appmon.rateinterval import rate_interval
from cosample.appmon.snapshot import AppSnapshot, ServiceWindow
from cosample.appmon.successinterval import success_interval
from cosample.appmon.windows import service_name as analyser_name
from cosample.controller.estimate import Measurement
from cosample.plan.appmon import SHARE_BITS, selected_share
from cosample.planner.appmon import MEASURED_PACKETS_PER_REQUEST

#: A window an analyser captured less than this share of (it started or stopped in it, as
#: the agents' supervisors do on a move) is left out; a larger part gives the rate over the
#: seconds it covered (``covered_s``), not over the window.
MIN_COVERED = 0.5


def service_name(address: Any, port: int) -> str:
    """The analyser's name of a service (``appmon.windows.service_name``: ``10.0.0.2:80``)."""
    return analyser_name((ipaddress.ip_address(str(address)).packed, int(port)))


def names(services: Sequence[Any]) -> tuple[str, ...]:
    return tuple(service_name(s.address, s.port) for s in services)


def request_capacity(
    services: Sequence[Any], index: Mapping[str, int], capacity_pps: np.ndarray
) -> np.ndarray:
    """The most requests/s each service's server can forward packets for (the plausibility
    bound): its capacity over the service's packets per request."""
    return np.array(
        [
            capacity_pps[index[s.server]] / (s.packets_per_request or MEASURED_PACKETS_PER_REQUEST)
            for s in services
        ],
        dtype=float,
    )


def plan_entries(
    plan: Mapping[str, Any] | None, services: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The running plan's application part per service: (listed, analysis host name or "" for
    the sniffer, applied share), from its hosts' ``appmon`` entries."""
    n = len(services)
    listed = np.zeros(n, dtype=bool)
    to = np.full(n, "", dtype=object)
    share = np.ones(n)
    if not plan:
        return listed, to, share
    position = {(service_name(s.address, s.port)): j for j, s in enumerate(services)}
    for host in plan.get("hosts", {}).values():
        for entry in host.get("appmon") or []:
            key = entry.get("service", {})
            j = position.get(service_name(key.get("address"), key.get("port")))
            if j is None:
                continue
            listed[j] = True
            to[j] = entry.get("to") or ""
            share[j] = selected_share(entry.get("share")) / (1 << SHARE_BITS)
    return listed, to, share


def _entries(snapshots: Sequence[tuple[str, AppSnapshot]]) -> Iterator[tuple[ServiceWindow, float]]:
    """Every service entry of the snapshots that covered enough of their window, with the
    seconds its rate is taken over."""
    for _, snap in snapshots:
        seconds = snap.window_s if snap.covered_s is None else snap.covered_s
        if seconds < snap.window_s * MIN_COVERED:
            continue  # an analyser that started (or stopped) early in its window: too little
        for entry in snap.services:
            yield entry, seconds


def success_rates(
    snapshots: Sequence[tuple[str, AppSnapshot]], service_names: tuple[str, ...], share: np.ndarray
) -> dict[str, tuple[float | None, list[float] | None]]:
    """Each measured service's success rate and its connection-level 95 % interval
    (``appmon.successinterval``: over all its connections; None: unknown), from the analyser
    whose rate ``measure`` takes (the highest)."""
    position = {name: j for j, name in enumerate(service_names)}
    best: dict[str, float] = {}
    rates: dict[str, tuple[float | None, list[float] | None]] = {}
    for entry, seconds in _entries(snapshots):
        j = position.get(entry.service)
        if j is None:
            continue
        value = entry.requests / seconds / share[j]
        if entry.service in best and value <= best[entry.service]:
            continue
        best[entry.service] = value
        final = entry.responses - entry.status_classes.get("1xx", 0)
        ok = entry.status_classes.get("2xx", 0) + entry.status_classes.get("3xx", 0)
        sums = (
            None
            if entry.final_squares is None
            or entry.final_ok_products is None
            or entry.ok_squares is None
            else (entry.final_squares, entry.final_ok_products, entry.ok_squares)
        )
        rates[entry.service] = (
            entry.success_rate,
            success_interval(
                ok, final, sums, entry.final_connections or 0, float(share[j]), entry.final_df
            ),
        )
    return rates


def measure(
    snapshots: Sequence[tuple[str, AppSnapshot]], service_names: tuple[str, ...], share: np.ndarray
) -> tuple[Measurement | None, tuple[str, ...], dict[str, list[float] | None]]:
    """The services' rates from fresh snapshots (None if none), the names reported that the
    inventory does not list (ignored: an analyser also sees other servers' traffic), and each
    measured service's 95 % interval (requests/s, renormalised; None: unknown)."""
    if not snapshots:
        return None, (), {}
    n = len(service_names)
    position = {name: j for j, name in enumerate(service_names)}
    rate = np.zeros(n)
    measured = np.zeros(n, dtype=bool)
    unknown: set[str] = set()
    intervals: dict[str, list[float] | None] = {}
    for entry, seconds in _entries(snapshots):
        j = position.get(entry.service)
        if j is None:
            unknown.add(entry.service)
            continue
        value = entry.requests / seconds / share[j]
        if not measured[j] or value > rate[j]:  # the analyser whose rate is taken
            intervals[entry.service] = rate_interval(
                entry.requests, entry.request_squares, float(share[j]), seconds
            )
        rate[j] = max(rate[j], value) if measured[j] else value
        measured[j] = True
    ends = [snap.window_start + timedelta(seconds=snap.window_s) for _, snap in snapshots]
    window = max(snap.window_s for _, snap in snapshots)
    diagonal = np.flatnonzero(measured).astype(np.int64)
    return (
        Measurement(
            max(ends),
            window,
            measured,
            np.where(measured, rate, 0.0),
            np.zeros(n, dtype=bool),
            diagonal,
            diagonal,
            rate[diagonal],
        ),
        tuple(sorted(unknown)),
        intervals,
    )
