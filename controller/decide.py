"""Whether the candidate plan is worth publishing (pure; property-tested against flapping).

Re-planning every cycle is cheap; publishing is not (every agent reconfigures OVS, and a role
change needs a two-phase transition). The candidate is published when

1. **overload**: a server is predicted above ``capacity x (1 - margin)`` under the current plan
   and the candidate brings it lower by at least 1 % of its capacity (a server that forwarding
   alone overloads, or nearly, is reported, but
   does not cause a publication every cycle: no plan can help it);
2. **gain**: the candidate collects more than ``min_gain`` (relative) more distinct packets than
   the current plan, under the same measured traffic, for ``confirm_cycles`` cycles in a row;
3. **expiry**: the current plan expires within ``expiry_cycles`` cycles;

or, when there is no current plan, as soon as the traffic estimate is warm (``warm``: it has
averaged ``tau`` seconds of snapshots; the agents stay in their safe state meanwhile). Overload
and expiry act at once; only the gain waits for confirmation and a warm estimate, because only
the gain can be an artefact of noise. The gain also waits while some server's traffic is
``settling`` (it moved by a step less than one collector window ago, so the window still mixes
before and after): the streak keeps counting, and the gain is published on the first settled
cycle, on an estimate that no longer moves, instead of once mid-ramp and again at its end. The
same holds after the controller's own publication until the agents run it (``quiet``,
``quiet_s``; a window more without the collector's lead, or after sparse samples).

The loop's other rules live here too, pure, so that ``loop.Controller`` only does the effects
around them (read, estimate, plan, publish, report): whether a snapshot knows any server
(``knows_servers``), when the measurement plan is due (``measurement_due``), when the estimate
is warm (``is_warm``) and whether the hold remembers a window (``full_window``, ``remembers``),
whether a publication needs the agents' two phases (``two_phases``) and how long the quiet
after it lasts (``quiet_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from cosample.controller.evaluate import Evaluation, PlanShares, needs_two_phases
from cosample.controller.hostnames import HostNames

#: A candidate "brings a server lower" when it removes at least this share of its capacity (a
#: candidate that only nudges a server from 95.2 % to 94.9 % is churn, not relief).
RELIEF = 0.01
#: A snapshot whose window is shorter than this share of the longest seen, or than the one
#: before it (still growing), is a start-up window (the collector has run for less than its
#: window): noisy, so the hold does not remember it. Nor what the measurement plan's sparse
#: 1-in-N sampling shows: the hold is for the traffic's peaks, not for sampling error.
FULL_WINDOW = 0.9


@dataclass(frozen=True)
class Policy:
    margin: float = 0.05
    min_gain: float = 0.10
    confirm_cycles: int = 3
    expiry_cycles: float = 2.0


@dataclass(frozen=True)
class Situation:
    """What the decision looks at; every value already computed."""

    now: datetime
    interval_s: float
    names: tuple[str, ...]
    capacity_pps: np.ndarray
    candidate: Evaluation
    current: Evaluation | None = None
    current_expires: datetime | None = None
    same_content: bool = False
    gain_streak: int = 0
    warm: bool = True
    settling: Sequence[str] = ()  # servers whose traffic moved by a step within one window
    quiet: bool = False  # after our own publication, until the agents run it (``loop.quiet_s``)
    #: (current, candidate) distinct packets the gain compares, when judged under other traffic
    #: than the overload (the held peaks: a trough of noise is no gain); None: the evaluations'
    gain_basis: tuple[float, float] | None = None
    #: snapshots the estimate has averaged, and the seconds of them the first plan waits for
    #: (what the warm-up's reason says)
    averaged: int = 0
    warm_s: float = 0.0


@dataclass(frozen=True)
class Decision:
    publish: bool
    reasons: tuple[str, ...]
    gain: float
    gain_streak: int
    overloaded: Sequence[str] = ()
    unrelievable: Sequence[str] = ()


def decide(situation: Situation, policy: Policy) -> Decision:
    """Publish or not, and why (every reason that holds, most urgent first)."""
    current, candidate = situation.current, situation.candidate
    if current is None or situation.current_expires is None:
        if not situation.warm:
            return Decision(
                False,
                (
                    f"warming up: {situation.averaged} snapshot(s) averaged, publishing after "
                    f"{situation.warm_s:g} s of them",
                ),
                0.0,
                0,
            )
        return Decision(True, ("no current plan",), 0.0, 0)
    limit = 1.0 - policy.margin
    over = current.use > limit
    relieved = over & (candidate.load_pps < current.load_pps - RELIEF * situation.capacity_pps)
    if situation.same_content:
        relieved[:] = False
    reasons = []
    if relieved.any():
        worst = int(np.argmax(np.where(relieved, current.use, -np.inf)))
        reasons.append(
            f"overload: {int(relieved.sum())} server(s) predicted above "
            f"{limit:.0%} of capacity, worst {situation.names[worst]} at "
            f"{current.use[worst]:.1%} (candidate {candidate.use[worst]:.1%})"
        )
    gain = _gain(*(situation.gain_basis or (current.distinct_pps, candidate.distinct_pps)))
    streak = (
        situation.gain_streak + 1
        if (gain > policy.min_gain and situation.warm and not situation.same_content)
        else 0
    )
    if streak >= policy.confirm_cycles and not situation.settling and not situation.quiet:
        reasons.append(
            f"gain: the candidate collects {gain:+.1%} distinct packets "
            f"(threshold {policy.min_gain:.0%}, {streak} cycles in a row)"
        )
    left = (situation.current_expires - situation.now).total_seconds()
    if left < policy.expiry_cycles * situation.interval_s:
        reasons.append(
            f"expiry: the current plan expires in {max(left, 0.0):.0f} s "
            f"(< {policy.expiry_cycles:g} cycles)"
        )
    names = situation.names
    return Decision(
        bool(reasons),
        tuple(reasons),
        gain,
        0 if reasons else streak,
        HostNames.where(names, over),
        HostNames.where(names, over & ~relieved),
    )


def _gain(current_pps: float, candidate_pps: float) -> float:
    if current_pps > 0:
        return candidate_pps / current_pps - 1.0
    return float("inf") if candidate_pps > 0 else 0.0


def knows_servers(snapshot: Any) -> bool:
    """Whether a snapshot sees any server: one sampled at some rate (coverage > 0: a plan-less
    collector lists servers whose agents it has not heard yet with coverage 0) or polled."""
    table = snapshot.servers
    return len(table.name) > 0 and (
        bool(np.any(table.column("coverage") > 0))
        or (snapshot.interfaces is not None and len(snapshot.interfaces.server) > 0)
    )


def measurement_due(waited_s: float, bound_s: float, sampling: int | None) -> bool:
    """Publish the measurement plan: no plan in force, none of the snapshots of the last
    ``bound_s`` seconds knew a server, and the measurement plan is on."""
    return bool(sampling) and waited_s >= bound_s


def is_warm(averaged: int, interval_s: float, warm_s: float) -> bool:
    """The estimate has averaged ``warm_s`` seconds of snapshots (one per ``interval_s``)."""
    return averaged * interval_s >= warm_s


def full_window(window_s: float, before_s: float, longest_s: float) -> bool:
    """Whether a snapshot's window is the collector's full one: as long as the longest seen
    (``longest_s``, this one included) and no longer growing (the one before, ``before_s``)."""
    return window_s >= FULL_WINDOW * longest_s and before_s >= FULL_WINDOW * window_s


def remembers(quiet: bool, full: bool, sparse: bool) -> bool:
    """Whether the hold remembers this window's peaks: not while our own publication settles,
    not a start-up window, not sparse samples (plan-less or the measurement plan)."""
    return not quiet and full and not sparse


def two_phases(
    current_shares: PlanShares | None,
    current_expires: datetime | None,
    measuring: bool,
    new_shares: PlanShares,
    now: datetime,
) -> bool:
    """Publish the agents' two-phase plan set from the plan in force: it still runs (not
    expired, not the measurement plan, which has no mirrors) and applying the new plan host
    by host could overload a server on the way (``evaluate.needs_two_phases``)."""
    return (
        current_expires is not None
        and current_expires > now
        and current_shares is not None
        and not measuring
        and needs_two_phases(current_shares, new_shares)
    )


def quiet_s(settings: Any, two_phase: bool, window_s: float, after_sparse: bool) -> float:
    """How long after a publication gains wait and the hold remembers nothing (``settings``:
    ``lead_s``, ``settle_s``, ``interval_s``): until the agents run the plan (its lead, then
    ``settle`` bounds their fetch and apply time, once per phase); then also until the
    collector's window holds only the new plan's samples when

    - there is no lead: the collector may learn the plan after the agents and misjudge a
      dropped stream for up to a window (docs/collector.md, "Plan changes");
    - the plan replaced sparse sampling (plan-less, measurement plan): the window still holds
      the sparse samples, whose error the hold must not take for the traffic's peaks."""
    agents = settings.lead_s + settings.settle_s * (2 if two_phase else 1)
    if settings.lead_s > 0 and not after_sparse:
        return agents
    return agents + settings.interval_s + window_s
