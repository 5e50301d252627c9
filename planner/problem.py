"""What the solvers plan against: the description after headroom, uncertainty and topology.

A data-centre description says what servers can do by point estimates; a plan should keep
headroom (``margin``: plan to ``capacity x (1 - margin)``), may plan with the pessimistic end of
the calibration's 95 % intervals (``robust``), and must charge sampling for every packet the
sampled bridge really takes in: with tunnels on the sampled bridge that is the VMs' own traffic
plus the tenant traffic arriving from other servers. ``Problem`` holds those planning values as
arrays; every solver and the plan writer read it, so they agree on costs and capacities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError

#: Default headroom: plan to 90 % of each server's capacity (why: docs/planner.md, "Headroom").
DEFAULT_MARGIN = 0.1


@dataclass(frozen=True)
class Problem:
    """Planning view of a data centre: per-server arrays, positions as in ``dc.names``."""

    dc: DataCentre
    capacity_pps: np.ndarray  # capacity planned with (the interval's low end when robust)
    usable_pps: np.ndarray  # capacity x (1 - margin): what load may reach
    alpha: np.ndarray  # sampling cost planned with
    beta: np.ndarray  # mirroring cost planned with
    margin: np.ndarray
    weight: np.ndarray  # value of one collected packet of this server's own traffic
    mirror_cap_pps: (
        np.ndarray
    )  # most own traffic it may mirror (bytes cap / mean size), inf if none
    bridge_pps: np.ndarray  # packets entering the sampled bridge that sFlow draws from
    collector_cap_pps: float = np.inf  # fleet-wide cap on samples/s sent to the collector
    robust: bool = False
    notes: tuple[str, ...] = field(default=())
    #: the application part planned before the sFlow plan (``appmon_order: appmon_first``):
    #: ``(AppmonPlan, Services)``, its load already taken out of ``usable_pps``
    appmon: Any = None
    #: cost per sample of the ``sample`` local mechanism planned with (NaN: sFlow only; None:
    #: no server can use it), and each server's IPFIX observation domain (0: none)
    alpha_sample: np.ndarray | None = None
    observation_domain: np.ndarray | None = None

    @property
    def size(self) -> int:
        return self.dc.size

    @property
    def names(self) -> tuple[str, ...]:
        return self.dc.names

    @property
    def own_pps(self) -> np.ndarray:
        return self.dc.own_pps

    @property
    def forwarding_pps(self) -> np.ndarray:
        return self.dc.forwarding_pps

    @cached_property
    def spare_pps(self) -> np.ndarray:
        """Usable capacity left after forwarding, at least 0 (margin can eat all of it)."""
        return np.maximum(self.usable_pps - self.forwarding_pps, 0.0)

    @cached_property
    def sample_cost(self) -> np.ndarray:
        """Cost per own packet sampled locally: alpha x bridge input / own traffic (inf if none).

        The bridge's sFlow draws from everything entering it at one rate, so sampling a share r of
        the own traffic U also samples r of the inbound traffic the bridge takes in.
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.own_pps > 0, self.alpha * self.bridge_pps / self.own_pps, np.inf)

    @cached_property
    def receiver(self) -> np.ndarray:
        """P: servers that can sample everything entering their bridge 1-in-1."""
        return self.spare_pps >= self.alpha * self.bridge_pps

    @cached_property
    def room_pps(self) -> np.ndarray:
        """Mirrored pps each receiver can take and sample on top of its own (0 outside P)."""
        free = self.spare_pps - self.alpha * self.bridge_pps
        return np.where(self.receiver, np.maximum(free, 0.0) / (self.alpha + self.beta), 0.0)

    @cached_property
    def can_sample(self) -> np.ndarray | None:
        """Senders that may take their local share by the ``sample`` mechanism (a cost and an
        observation domain; receivers keep sFlow, which samples mirrored packets 1-in-1);
        None when none may, so such plans are made exactly as before the mechanism existed."""
        if self.alpha_sample is None or self.observation_domain is None:
            return None
        able = (
            np.isfinite(self.alpha_sample)
            & (self.observation_domain > 0)
            & ~self.receiver
            & (self.own_pps > 0)
        )
        return able if able.any() else None

    @cached_property
    def local_cost(self) -> np.ndarray:
        """Cost per own packet sampled locally by the cheaper mechanism a server may use
        (``sample_cost`` where sFlow is the only one): what the continuous optimum and the LP
        bound plan with, so they bound every plan of either mechanism."""
        if self.can_sample is None:
            return self.sample_cost
        with np.errstate(divide="ignore", invalid="ignore"):
            sample = np.where(
                self.own_pps > 0, self.alpha_sample * self.bridge_pps / self.own_pps, np.inf
            )
        return np.where(self.cheaper_sample, sample, self.sample_cost)

    @cached_property
    def cheaper_sample(self) -> np.ndarray:
        """Servers for which ``sample`` costs less per sample than sFlow (all False if none)."""
        if self.can_sample is None:
            return np.zeros(self.size, dtype=bool)
        return self.can_sample & (self.alpha_sample < self.alpha)

    @cached_property
    def uniform_margin(self) -> bool:
        return bool(np.all(self.margin == self.margin[0]))

    @cached_property
    def uniform_weight(self) -> bool:
        return bool(np.all(self.weight == self.weight[0]))


def build_problem(dc: DataCentre, margin: float | None = None, robust: bool = False) -> Problem:
    """The planning view of ``dc``; ``margin`` overrides every server's, ``robust`` uses intervals.

    Raises ``InfeasibleError`` when forwarding alone exceeds a server's described capacity; a
    server pushed over only by margin or by the interval's low end samples nothing (noted).
    """
    dc.check_feasible()
    n = dc.size
    notes: list[str] = []
    if margin is not None and not 0 <= margin < 1:
        raise PlannerError(f"--margin: expected a fraction in [0, 1), got {margin!r}")
    server_margin = _array(dc, "margin", np.nan)
    margins = np.where(np.isnan(server_margin), DEFAULT_MARGIN, server_margin)
    if margin is not None:
        margins = np.full(n, float(margin))
    capacity, alpha, beta = dc.capacity_pps.copy(), dc.alpha.copy(), dc.beta.copy()
    alpha_sample = None if dc.alpha_sample is None else dc.alpha_sample.copy()
    if robust:
        capacity, alpha, beta = _robust(dc, capacity, alpha, beta, notes)
        if alpha_sample is not None and dc.intervals is not None:  # its interval's upper end
            high = dc.intervals["alpha_sample"][:, 1]
            known = np.isfinite(high) & np.isfinite(alpha_sample)
            alpha_sample[known] = high[known]
    notes += _indistinct_costs(dc, alpha, beta, robust)
    usable = capacity * (1 - margins)
    squeezed = np.flatnonzero(dc.forwarding_pps > usable)
    if squeezed.size:
        listed = ", ".join(dc.names[i] for i in squeezed[:5])
        more = f" and {squeezed.size - 5} more" if squeezed.size > 5 else ""
        notes.append(
            f"{squeezed.size} server(s) forward more than their planned capacity "
            f"(margin{' and interval' if robust else ''}) and sample nothing: {listed}{more}"
        )
    inbound = dc.forwarding_pps - dc.own_pps
    sampled_inbound = _array(dc, "samples_inbound", False).astype(bool)
    bridge = dc.own_pps + np.where(sampled_inbound, inbound, 0.0)
    packet_bytes = _array(dc, "packet_bytes", np.nan)
    cap_bytes = _array(dc, "mirror_cap_bytes", np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        mirror_cap = np.where(np.isfinite(cap_bytes), cap_bytes / packet_bytes, np.inf)
    appmon = None
    if dc.services and dc.appmon_order == "appmon_first":
        # the application part solves with scipy's MILP (a second to import): only with services
        from cosample.planner.appmon_plan import plan_first

        appmon = plan_first(dc, usable, cap_bytes)
        usable = usable - appmon[0].load
        with np.errstate(divide="ignore", invalid="ignore"):
            mirror_cap = np.where(
                np.isfinite(cap_bytes),
                np.maximum(cap_bytes - appmon[0].mirror_bytes, 0) / packet_bytes,
                np.inf,
            )
    return Problem(
        dc=dc,
        capacity_pps=capacity,
        usable_pps=usable,
        alpha=alpha,
        beta=beta,
        margin=margins,
        weight=_array(dc, "weight", 1.0),
        mirror_cap_pps=mirror_cap,
        bridge_pps=bridge,
        collector_cap_pps=float(dc.collector_cap_pps),
        robust=robust,
        notes=tuple(notes),
        appmon=appmon,
        alpha_sample=alpha_sample,
        observation_domain=dc.observation_domain,
    )


def _array(dc: DataCentre, name: str, default) -> np.ndarray:
    """A per-server optional array of the description, or the default for every server."""
    value = getattr(dc, name)
    if value is None:
        return np.full(dc.size, default)
    return np.asarray(value)


def _robust(
    dc: DataCentre, capacity: np.ndarray, alpha: np.ndarray, beta: np.ndarray, notes: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upper ends of alpha's and beta's intervals, the low end of capacity's, where known."""
    intervals = dc.intervals
    known = np.zeros(dc.size, dtype=bool)
    if intervals is not None:
        for label, values, column in (
            ("alpha", alpha, 1),
            ("beta", beta, 1),
            ("capacity_pps", capacity, 0),
        ):
            ends = intervals[label][:, column]
            have = np.isfinite(ends)
            values[have] = ends[have]
            known |= have
    if not known.all():
        missing = [dc.names[i] for i in np.flatnonzero(~known)]
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        notes.append(
            f"robust: no calibration interval for {len(missing)} server(s), planned "
            f"with their point estimates: {shown}"
        )
    return capacity, alpha, beta


def _indistinct_costs(
    dc: DataCentre, alpha: np.ndarray, beta: np.ndarray, robust: bool
) -> list[str]:
    """Say so when a plan relies on beta < alpha that the calibration cannot establish."""
    intervals = dc.intervals
    if intervals is None:
        return []
    alpha_low, beta_high = intervals["alpha"][:, 0], intervals["beta"][:, 1]
    unsure = (
        np.isfinite(alpha_low) & np.isfinite(beta_high) & (beta_high >= alpha_low) & (beta < alpha)
    )
    if not unsure.any():
        return []
    names = [dc.names[i] for i in np.flatnonzero(unsure)]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return [
        f"{len(names)} server(s) planned with beta < alpha although their calibration's 95 % "
        f"intervals overlap (mirroring may cost as much as sampling): {shown}"
    ]


def distinct_pps(own: np.ndarray, local: np.ndarray, mirrored: np.ndarray) -> np.ndarray:
    """Per server, distinct packets when local sFlow and mirrors draw independently
    (``mirrored``: the copies sampled at the receivers)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap = np.where(own > 0, local * mirrored / own, 0.0)
    return np.minimum(local + mirrored - overlap, own)
