"""The guard's decisions (pure): when a host's forwarding is past the limit its plan gave it,
step down the ladder (``cosample.plan.guard``); when the overload has passed, step back up.

Once per tick the guard is given a ``Reading`` of the host's headroom (``agents.headroom``):
how busy its forwarding was since the last tick, as a share of what it can do, and packets the
datapath dropped meanwhile. ``step`` returns the next ``GuardState``:

- **down**: a reading above the limit, or with drops, steps down at once: one rung, and twice as
  many at each further tick still over (1, 2, 4, ...: relief within a few ticks however long the
  ladder), never past the floor (the last rung);
- **up**: only after ``up_after`` readings in a row below ``limit - band`` (hysteresis), one rung
  at a time, and only if the rung above is predicted to stay below ``limit - band/2``: the guard
  remembers, per rung boundary, how much busier the host was on the upper side when it last
  crossed it (``cost``), and adds that to the present reading. On a load that does not change,
  the rung it stepped down from was over the limit, so it never steps back: no oscillation.
  Once the load falls by more than that, it climbs back to the plan;
- in between (the band) it holds.

Nothing here is a new plan: ``rung`` indexes the ladder of the plan in force, 0 being the plan
itself; a new plan starts a fresh ``GuardState`` (the deviation ends).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class GuardPolicy:
    """How the guard steps. ``band``: the hysteresis below the limit; ``up_after``: readings in
    a row below ``limit - band`` before a step up (with 1-s ticks, seconds)."""

    band: float = 0.1
    up_after: int = 5


@dataclass(frozen=True)
class Reading:
    """The host's headroom over one tick: ``busy``, its forwarding's busy share (1: no time to
    spare), and ``drops``, packets its datapath dropped during the tick."""

    busy: float
    drops: int = 0


@dataclass(frozen=True)
class GuardState:
    """Where the guard stands on the ladder and what it learnt on the way."""

    rung: int = 0
    #: rungs the next step down takes (doubles per tick still over, back to 1 otherwise)
    stride: int = 1
    #: readings in a row below ``limit - band``
    calm: int = 0
    #: ``cost[r]``: how much busier the host was on rung ``r`` than on ``r + 1`` when the guard
    #: last crossed between them (a jump over several rungs books the whole difference on the
    #: boundary next to the rung it landed on, so predictions err on the side of staying down)
    cost: tuple[tuple[int, float], ...] = field(default=())
    #: the rung and reading before the last tick's step, to learn its cost (None: no step)
    crossed: tuple[int, float] | None = None

    def learnt(self, rung: int) -> float | None:
        return dict(self.cost).get(rung)


def step(
    state: GuardState, reading: Reading, last: int, limit: float, policy: GuardPolicy
) -> GuardState:
    """The state after ``reading``, on a ladder whose last rung (the floor) is ``last``."""
    state = _learn(state, reading)
    over = reading.busy > limit or reading.drops > 0
    if over:
        if state.rung >= last:
            return replace(state, calm=0, stride=1)
        rung = min(last, state.rung + state.stride)
        return replace(
            state, rung=rung, stride=state.stride * 2, calm=0, crossed=(state.rung, reading.busy)
        )
    low = limit - policy.band
    if reading.busy >= low:  # in the band: hold
        return replace(state, calm=0, stride=1)
    calm = state.calm + 1
    if state.rung == 0 or calm < policy.up_after:
        return replace(state, calm=calm, stride=1)
    predicted = reading.busy + (state.learnt(state.rung - 1) or 0.0)
    if predicted >= limit - policy.band / 2:  # the rung above was too busy under this load
        return replace(state, calm=calm, stride=1)
    return replace(state, rung=state.rung - 1, calm=0, stride=1, crossed=(state.rung, reading.busy))


def _learn(state: GuardState, reading: Reading) -> GuardState:
    """Book what the last tick's step changed: the busy share between its two rungs."""
    if state.crossed is None:
        return state
    before, busy = state.crossed
    if before == state.rung:
        return replace(state, crossed=None)
    lower = max(before, state.rung)  # the rung nearer the floor
    saved = busy - reading.busy if before < state.rung else reading.busy - busy
    costs = dict(state.cost)
    costs[lower - 1] = max(0.0, saved)
    return replace(state, cost=tuple(sorted(costs.items())), crossed=None)
