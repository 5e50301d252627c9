"""What a plan lets a host's guard do between plans (``hosts.<h>.guard``), and the ladder it
steps along: the one definition agents (which rung to apply) and the collector (which sampling
rates and mirror shares a host may declare) share (docs/agents.md, "The guard").

A host's guard entry gives its *floor*, the least monitoring it must keep however loaded it is,
and its *limit*, the busy share of its forwarding above which it backs off:

- ``floor_sampling``: the sparsest sFlow 1-in-N it may go to (at least the plan's N: a floor
  below the plan, as a transition's first phase may leave, means no room);
- ``floor_mirror_share``: the share of each planned mirror rate it must keep (0, the default:
  it may shed its mirrors entirely; 1: it keeps them);
- ``limit``: in (0, 1], the busy share of its forwarding above which it backs off (default
  0.9: the planner's default margin kept free).

The ladder from the plan down to the floor sheds mirrors first (they cost the sender beta per
copy and only move monitoring elsewhere), each rung halving their rates, then samples more
sparsely, each rung doubling N up to the floor. Strict (unknown keys refused), as the appmon
entries are; a plan without ``guard`` gives its hosts no room (the ladder is the plan alone).
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from pydantic import Field

from cosample.plan.fieldtypes import MAX_SAMPLING
from cosample.validation import Strict

#: The busy share a host backs off above when its entry names none (the planner's default
#: margin, 0.1, kept free).
DEFAULT_LIMIT = 0.9
#: The mirror rungs above the floor share: each halves the rates of the one before.
MIRROR_SCALES = (1.0, 0.5, 0.25, 0.125)


class GuardSpec(Strict):
    """A host's room for local back-off (``hosts.<h>.guard``; a description's
    ``servers[].guard``, which the planner writes into the plan with every field)."""

    floor_sampling: Annotated[int, Field(ge=1, le=MAX_SAMPLING)]
    floor_mirror_share: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 0.0
    limit: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = DEFAULT_LIMIT


class Rung(NamedTuple):
    """One step of the ladder: the sFlow 1-in-N in force (None: no sFlow on this host) and the
    factor on every planned mirror rate."""

    sampling: int | None
    mirror_scale: float


def sampling_ladder(sampling: int | None, floor: int | None) -> tuple[int | None, ...]:
    """The 1-in-N a host may run: the plan's N, then doubling while below the floor, then the
    floor (``max(floor, N)``). No sFlow (None) stays None; no floor (None) is no room."""
    if sampling is None:
        return (None,)
    top = max(sampling, floor or sampling)
    out = [sampling]
    while out[-1] * 2 < top:
        out.append(out[-1] * 2)
    if out[-1] != top:
        out.append(top)
    return tuple(out)


def mirror_scales(floor_share: float | None) -> tuple[float, ...]:
    """The factors on the planned mirror rates a host may run, largest first, down to
    ``floor_share`` (None: no room, the plan's rates only)."""
    if floor_share is None or floor_share >= 1.0:
        return (1.0,)
    return tuple(s for s in MIRROR_SCALES if s > floor_share) + (floor_share,)


def ladder(sampling: int | None, mirrors: bool, guard: GuardSpec | None) -> tuple[Rung, ...]:
    """The rungs of a host with the plan's sFlow ``sampling``, some ``mirrors`` or none, and its
    ``guard`` entry: rung 0 is the plan, the last the floor; rungs that would change nothing on
    the host (mirror scales of a host without mirrors) are left out."""
    if guard is None:
        return (Rung(sampling, 1.0),)
    scales = mirror_scales(guard.floor_mirror_share) if mirrors else (1.0,)
    rungs = [Rung(sampling, scale) for scale in scales]
    last = scales[-1]
    rungs += [Rung(n, last) for n in sampling_ladder(sampling, guard.floor_sampling)[1:]]
    return tuple(rungs)


def declared_sampling(sampling: int | None, guard: GuardSpec | None) -> frozenset[int]:
    """Every sFlow 1-in-N a host may declare in its samples under this plan entry: the plan's
    and the rungs of its guard (what a collector checks a sample's rate against)."""
    return frozenset(
        n for n in sampling_ladder(sampling, guard.floor_sampling if guard else None) if n
    )
