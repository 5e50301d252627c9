"""The application mechanisms' costs from measured phases: pure arithmetic, no effects.

A phase is one load period with one mechanism at one share ``s`` of the service's connections
(``experiments/appmon_costs.py`` measures them; one row each). Every estimate is made per round
(a round runs every arm once, interleaved, so a round's phases share the machine's state) and the
rounds' estimates are then averaged with a Student t interval over rounds: rounds are the
independent units, phases within a round are not.

- On the monitored host (``sniffer_onsite``; the sender's switch for ``selective_mirror`` and
  ``truncated_mirror``) the paper's law applies, in CPU per request: the host spends
  ``c(s) = c0 (1 + a s)`` per request served, so it serves at most ``T(s) = T0 / (1 + a s)``.
  ``c0`` is the host's CPU per request with no monitoring (nginx, its backend and ovs-vswitchd
  in the round's share-0 phases); the mechanism's extra CPU per request at ``s = 1`` is the slope,
  over ``s``, of the CPU of the part it runs in (the sniffer's own, or ovs-vswitchd's): the rest
  of the host is untouched by it and only adds noise. ``a = slope / c0`` per round.
- On the analysis host the law does not apply: that host does not serve the requests, so there
  is no ``T0`` to divide; its cost is linear in what it receives, CPU per mirrored request (and
  per received packet), a ratio of sums per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from cosample.costmodel.errors import CostModelError


class AppmonFitError(CostModelError):
    """Phases that cannot give an estimate (too few rounds, one share only, no requests)."""


@dataclass(frozen=True)
class Estimate:
    """A mean over rounds with its Student t interval (``None`` ends with one round)."""

    value: float
    low: float | None
    high: float | None
    n_rounds: int

    def to_dict(self, name: str) -> dict:
        ends = [None if end is None else float(end) for end in (self.low, self.high)]
        return {name: float(self.value), f"{name}_ci": ends}


def over_rounds(values, confidence: float = 0.95) -> Estimate:
    """Mean of per-round values, Student t interval on ``n - 1`` degrees of freedom."""
    values = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(values) == 0:
        raise AppmonFitError("no round gave a finite value")
    mean = float(values.mean())
    if len(values) < 2:
        return Estimate(mean, None, None, 1)
    half = (
        stats.t.ppf(0.5 + confidence / 2, len(values) - 1)
        * values.std(ddof=1)
        / math.sqrt(len(values))
    )
    return Estimate(mean, mean - half, mean + half, len(values))


def realised_share(
    frame: pd.DataFrame,
    copies_column: str = "analysis_inner_packets",
    nominal_column: str = "share_nominal",
) -> pd.Series:
    """Each phase's share of the connections mirrored: its copies per request over those of the
    round's phase at nominal share 1 (which mirrors every connection); 0 at nominal 0."""
    per_request = frame[copies_column] / frame["requests"].where(frame["requests"] > 0)
    full = per_request[frame[nominal_column] == 1].groupby(frame["round"]).mean()
    share = per_request / frame["round"].map(full)
    if share[frame[nominal_column] > 0].isna().any():
        raise AppmonFitError(
            "a round without a share-1 phase (or with no copies in it): "
            "cannot tell the shares realised"
        )
    return share.where(frame[nominal_column] > 0, 0.0)


def slope(share, values) -> float:
    """Least-squares slope of ``values`` over ``share`` (with an intercept)."""
    share, values = np.asarray(share, dtype=float), np.asarray(values, dtype=float)
    if np.ptp(share) <= 0:
        raise AppmonFitError(f"slope over one share only ({share[0]:g}): need two or more")
    return float(np.polyfit(share, values, 1)[0])


def _per_request(frame: pd.DataFrame, column: str) -> pd.Series:
    if (frame["requests"] <= 0).any():
        raise AppmonFitError(f"a phase with no requests (round {frame['round'].iloc[0]})")
    return frame[column] / frame["requests"]


def base_cost(frame: pd.DataFrame) -> float:
    """The host's CPU per request with no monitoring: share-0 phases' server + switch CPU."""
    base = frame[frame["share"] == 0]
    if base.empty:
        raise AppmonFitError("a round has no phase without monitoring")
    return float(((base["server_cpu_s"] + base["vswitchd_cpu_s"]) / base["requests"]).mean())


def forwarding(base: pd.DataFrame, confidence: float = 0.95) -> dict:
    """ovs-vswitchd's CPU per packet of the server's port with no monitoring, and packets per
    request: the planner's unit (forwarding one packet) in CPU seconds, so that the mechanisms'
    CPU per request converts to it (``planner.appmon_costs``), measured on the same rig."""
    per_packet, packets = [], []
    for _, rows in _rounds(base):
        if rows["server_port_packets"].sum() <= 0:
            raise AppmonFitError(
                f"round {rows['round'].iloc[0]}: no packets on the server's "
                "port in the phases without monitoring"
            )
        per_packet.append(rows["vswitchd_cpu_s"].sum() / rows["server_port_packets"].sum())
        packets.append(rows["server_port_packets"].sum() / rows["requests"].sum())
    return {
        **over_rounds(per_packet, confidence).to_dict("forwarding_cpu_s_per_packet"),
        **over_rounds(packets, confidence).to_dict("packets_per_request"),
    }


def host_law(
    base: pd.DataFrame,
    phases: pd.DataFrame,
    cost_column: str,
    packets_column: str | None = None,
    confidence: float = 0.95,
) -> dict:
    """The law's coefficient for a mechanism on the monitored host.

    ``base``: the rounds' no-monitoring phases (``requests``, ``server_cpu_s``,
    ``vswitchd_cpu_s``), giving ``c0``; ``phases``: the phases the slope over ``share`` is taken
    on, of ``cost_column`` (the CPU the mechanism runs in) per request and, for the cost per
    packet, of ``packets_column`` (what it handles) per request. For a mirror these are its own
    phases only (shares 1/4 to 1, all with the analysis host busy), so that starting the
    analyser on the same cores is not mistaken for the mirror's cost."""
    coefficient, per_request, per_packet, base_costs = [], [], [], []
    for number, rows in _rounds(phases):
        extra = slope(rows["share"], _per_request(rows, cost_column))
        c0 = base_cost(base[base["round"] == number].assign(share=0.0))
        coefficient.append(extra / c0)
        per_request.append(extra)
        base_costs.append(c0)
        if packets_column:
            packets = slope(rows["share"], _per_request(rows, packets_column))
            per_packet.append(extra / packets if packets > 0 else None)
    out = {
        "law": "share",
        **over_rounds(coefficient, confidence).to_dict("coefficient"),
        **over_rounds(per_request, confidence).to_dict("cpu_s_per_request"),
        **over_rounds(base_costs, confidence).to_dict("base_cpu_s_per_request"),
        "n_rounds": len(coefficient),
    }
    if packets_column:
        out |= over_rounds(per_packet, confidence).to_dict("cpu_s_per_packet")
    return out


def linear_cost(
    frame: pd.DataFrame,
    cost_column: str,
    units_column: str,
    packets_column: str | None = None,
    confidence: float = 0.95,
) -> dict:
    """CPU per unit received (``units_column``: the mirrored requests the analyser counted),
    and per packet: ratios of sums per round, for a host that does not serve the requests."""
    per_unit, per_packet = [], []
    for number, rows in _rounds(frame):
        rows = rows[rows["share"] > 0]
        if rows[units_column].sum() <= 0:
            raise AppmonFitError(f"round {number}: no {units_column} in the mirrored phases")
        per_unit.append(rows[cost_column].sum() / rows[units_column].sum())
        if packets_column:
            per_packet.append(
                rows[cost_column].sum() / rows[packets_column].sum()
                if rows[packets_column].sum() > 0
                else None
            )
    out = {
        "law": "linear",
        **over_rounds(per_unit, confidence).to_dict("cpu_s_per_request"),
        "n_rounds": len(per_unit),
    }
    if packets_column:
        out |= over_rounds(per_packet, confidence).to_dict("cpu_s_per_packet")
    return out


def fabric_bytes(
    frame: pd.DataFrame, column: str = "analysis_bytes", confidence: float = 0.95
) -> dict:
    """Bytes on the fabric per request at ``s = 1``: the slope of bytes per request over s."""
    values = [slope(rows["share"], _per_request(rows, column)) for _, rows in _rounds(frame)]
    return over_rounds(values, confidence).to_dict("fabric_bytes_per_request")


def _rounds(frame: pd.DataFrame):
    if frame.empty:
        raise AppmonFitError("no phases")
    yield from frame.groupby("round", sort=True)
