"""Samples lost between agent and collector, told apart from late, duplicate and reset (pure).

Every sFlow sampler numbers its flow samples consecutively; a gap in the numbers is samples
that were generated but never arrived. UDP also reorders, duplicates and corrupts, and agents
restart, so a gap is only a loss when it is plausible and nothing fills it later. The rule
(docs/collector.md, "Loss"), per sampler (agent, sub-agent, source index):

- **in order** (the next number, or a plausible jump ahead): a jump of ``g`` leaves a *hole* of
  ``g - 1`` numbers, booked as lost *over the time it covers* (from the arrival of the sampler's
  previous newest sample to now: ``book(agent, n, t0, t1)``), and remembered. A jump is
  believed only once the next number continues it (within a datagram, the run's next
  sample); until then its sample is counted but leaves no hole, so one corrupted number
  books nothing;
- **behind the newest** by less than ``REORDER_SAMPLES``: a number in a remembered hole is a late
  sample (counted, and its share of the hole un-booked); any other number there was already
  received: a ``duplicate`` (not counted) if its datagram's sequence number is not newer than
  the agent's newest (UDP duplicated the datagram), else the sampler started numbering again
  (implausible, below);
- **implausible** (ahead by more than the gap bound, or further behind than the reorder window):
  the sample is counted but moves nothing, and is put on probation (RFC 3550, A.1): only when
  the next sample continues it is the sampler *reset* (``resets``), its holes forgotten. One
  corrupted number therefore costs nothing, and an agent that restarted is followed after one
  sample. An agent whose datagram uptime goes back by more than ``RESTART_SLACK_MS``, or by a
  second with its datagram number more than a few behind, or not forward with its number more
  than ``RESTART_DATAGRAMS`` behind or numbering its first datagrams again (OVS restarts its agent
  on every change of the sFlow row and counts uptime in whole seconds), restarted: all its
  samplers start again (``restarts``).

The gap bound is ``max(GAP_FLOOR, GAP_FACTOR x r x (elapsed + 1 s))``, ``r`` the rate at which
the sampler generated numbers since it (re)started: an outage of any length is a plausible
gap, a number that jumps by millions in a second is not. The agent's ``drops`` counter (samples
it could not send) is booked the same way, with the same bound, once two samples in a row
carry its new value. State is a few numbers and at
most ``MAX_HOLES`` holes per sampler, at most ``MAX_SAMPLERS`` samplers per agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast, overload

WRAP, HALF = 1 << 32, 1 << 31
#: How far (in sample numbers) behind the newest a sample may arrive and still be told apart
#: as late or duplicate; UDP reorders within a few datagrams (an OVS datagram holds ~10 samples).
REORDER_SAMPLES = 4096
#: Holes remembered per sampler (the oldest is forgotten first: it stays booked as lost).
MAX_HOLES = 64
#: Smallest gap always plausible, and how many times the sampler's own rate a gap may exceed.
GAP_FLOOR = 1024
GAP_FACTOR = 4.0
#: An agent's uptime (ms) that goes back by more than this restarted (reordering is sub-second).
RESTART_SLACK_MS = 2000
#: OVS counts its sFlow agent's uptime in whole seconds and restarts the agent on every change
#: of its sFlow row (a guard's step, a new plan's 1-in-N): an agent restarted a second or two
#: after it started goes back by only a second. So a datagram whose uptime is at least this much
#: older than the newest *and* whose number is more than ``REORDER_DATAGRAMS`` behind it is a
#: restarted agent's too (a reordered datagram is a few numbers behind; one corrupted field
#: changes only one of the two).
RESTART_UPTIME_MS = 1000
REORDER_DATAGRAMS = 2
#: An agent restarted within the second it started shows no uptime going back at all; a
#: datagram more than this many numbers behind the newest, with an uptime no later, is a
#: restarted agent's (no reordering of one socket's datagrams goes that far), and so is one of
#: the first ``FIRST_DATAGRAMS`` an agent numbers more than ``REORDER_DATAGRAMS`` behind it
#: (the agent before it sent only a few datagrams: at a sparse rate, for less than a second).
RESTART_DATAGRAMS = 64
FIRST_DATAGRAMS = 4
#: Samplers kept per agent, and (agent, sub-agent) entries in all: a named agent that sends
#: random source ids or sub-agents (corrupt or hostile) replaces its oldest, never grows.
MAX_SAMPLERS = 4096
MAX_AGENTS = 65536
#: Samplers in one datagram whose runs are checked at once (more: sample by sample); the
#: compiled scan's MAX_RUNS (collector/_sflow.c).
MAX_RUNS = 16

Book = Callable[[str, float, float, float], None]


class Sampler:
    """What one sampler needs: newest number and its arrival, holes, probation, drops."""

    __slots__ = (
        "high",
        "high_t",
        "first",
        "first_t",
        "drops",
        "drops_t",
        "drops_seen",
        "drops_sure",
        "holes",
        "probation",
        "loose",
    )

    def __init__(self, sequence: int, drops: int, now: float) -> None:
        self.high = self.first = sequence
        self.high_t = self.first_t = self.drops_t = now
        self.drops = self.drops_seen = drops  # booked up to ``drops`` (at ``drops_t``)
        #: ``drops`` carried by two samples: the sampler's first value may be corrupt, and a
        #: counter wrapped from a corrupt baseline would book up to the whole gap bound
        self.drops_sure = False
        self.holes: list[list] = []  # [first missing, last missing, t0, t1]
        self.probation: int | None = None  # the number that would confirm an odd one
        self.loose: dict[int, None] = {}  # counted ahead of ``high``, not believed yet

    def bound(self, now: float) -> float:
        """The largest plausible jump ahead now (see the module's docstring)."""
        span = self.high_t - self.first_t
        rate = ((self.high - self.first) % WRAP) / span if span >= 1.0 else 0.0
        return max(GAP_FLOOR, GAP_FACTOR * rate * (now - self.high_t + 1.0))


class LossTracker:
    """Per-agent sequence state; ``book`` receives the lost samples (negative: found late)."""

    def __init__(self, book: Book) -> None:
        self.book = book
        self.resets = 0
        self.restarts = 0
        self.late = 0
        self.duplicates = 0
        #: (agent, sub-agent) -> [uptime, samplers, newest datagram number]
        self._agents: dict[tuple[str, int], list] = {}

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the state of agents ``keep`` rejects (a plan that no longer names them)."""
        for key in [key for key in self._agents if not keep(key[0])]:
            del self._agents[key]

    def __len__(self) -> int:
        return sum(len(entry[1]) for entry in self._agents.values())

    @overload
    def datagram(
        self,
        agent: str,
        sub_agent: int,
        number: int,
        uptime: int,
        flows: tuple,
        now: float,
        runs: tuple | None = None,
        data: bytes | None = None,
    ) -> tuple: ...
    @overload
    def datagram(
        self,
        agent: str,
        sub_agent: int,
        number: int,
        uptime: int,
        flows: tuple | int,
        now: float,
        runs: tuple | None = None,
        data: bytes | None = None,
    ) -> tuple | int: ...
    def datagram(
        self,
        agent: str,
        sub_agent: int,
        number: int,
        uptime: int,
        flows: tuple | int,
        now: float,
        runs: tuple | None = None,
        data: bytes | None = None,
    ) -> tuple | int:
        """The flows to count (duplicates removed); books what the numbers say was lost.

        ``flows`` are ``parse_compact`` tuples: (sequence, source index, rate, drops, ...);
        ``runs`` their ``sampler_runs`` when the decoder found them (the compiled scan does).
        ``flows`` may be only their number (the compiled scan's counted form, with ``runs``) and
        ``data`` the datagram: it is decoded for its flows when a sample must be looked at on its
        own (``flows`` returned unchanged means: all of them, as given).
        """
        key = (agent, sub_agent)
        entry = self._agents.get(key)
        repeated = False
        if entry is None:
            if len(self._agents) >= MAX_AGENTS:
                del self._agents[next(iter(self._agents))]
            entry = self._agents[key] = [uptime, {}, number]
        elif _restarted(entry[0], entry[2], uptime, number):
            self.restarts += 1
            entry[0], entry[1], entry[2] = uptime, {}, number
        else:
            if (uptime - entry[0]) % WRAP < HALF:
                entry[0] = uptime
            if (entry[2] - number) % WRAP < HALF:  # not newer than the newest: a repeat
                repeated = True
            else:
                entry[2] = number
        if not flows:
            return flows
        samplers = entry[1]
        if runs is None and isinstance(flows, tuple):  # a count comes with its runs
            runs = sampler_runs(flows)
        if runs is not None:
            if len(runs) == 1:  # the common case: one sampler continues, nothing lost
                source, head, tail, drops = runs[0]
                state = samplers.get(source)
                if (
                    state is not None
                    and (head - state.high) % WRAP == 1
                    and drops == state.drops
                    and not state.loose
                ):
                    state.high, state.high_t, state.probation = tail, now, None
                    state.drops_sure = True
                    return flows
            elif self._continued(samplers, runs, now):
                return flows
        if isinstance(flows, int):  # each sample on its own: decode them (a count comes with
            from cosample.collector.decode import parse_compact  # its datagram)

            every = parse_compact(cast(bytes, data))[4]
            kept = [flow for flow in every if self._sample(agent, samplers, flow, now, repeated)]
            return flows if len(kept) == len(every) else tuple(kept)
        kept = [flow for flow in flows if self._sample(agent, samplers, flow, now, repeated)]
        return flows if len(kept) == len(flows) else tuple(kept)

    @staticmethod
    def _continued(samplers: dict, runs: tuple, now: float) -> bool:
        """True (and the samplers moved on) when each sampler's run continues it, nothing lost
        (a switch interleaves its ports' samplers)."""
        states = []
        for source, head, tail, drops in runs:
            state = samplers.get(source)
            if (
                state is None
                or (head - state.high) % WRAP != 1
                or drops != state.drops
                or state.loose
            ):
                return False
            states.append((state, tail))
        for state, tail in states:
            state.high, state.high_t, state.probation = tail, now, None
            state.drops_sure = True
        return True

    def _sample(self, agent: str, samplers: dict, flow: tuple, now: float, repeated: bool) -> bool:
        """Account for one sample; False for a duplicate (not to be counted)."""
        sequence, source, drops = flow[0], flow[1], flow[3]
        state = samplers.get(source)
        if state is None:
            if len(samplers) >= MAX_SAMPLERS:
                del samplers[next(iter(samplers))]
            samplers[source] = Sampler(sequence, drops, now)
            return True
        loose = state.loose
        if sequence in loose:
            if repeated:
                self.duplicates += 1
                return False
            return True
        ahead = (sequence - state.high) % WRAP
        if 0 < ahead < HALF and ahead <= state.bound(now):
            if ahead > 1:
                if state.high == state.first:  # the sampler's first number was not to be trusted
                    samplers[source] = Sampler(sequence, drops, now)
                    return True
                if state.probation != sequence:  # a jump not yet continued: believe it later
                    self._loosen(state, sequence)
                    return True
                self._holes(agent, state, sequence, now)
            if drops != state.drops:
                self._drops(agent, state, drops, now)
            else:
                state.drops_sure = True
            state.high, state.high_t, state.probation = sequence, now, None
            while loose and (state.high + 1) % WRAP in loose:  # samples counted ahead of time
                state.high = (state.high + 1) % WRAP
                del loose[state.high]
            return True
        behind = (state.high - sequence) % WRAP
        if behind < REORDER_SAMPLES:
            if (
                0 < (state.first - sequence) % WRAP <= REORDER_SAMPLES
                and now - state.first_t <= RESTART_SLACK_MS / 1000
            ):
                self.late += 1  # sent before the sampler's first sample here: nothing to compare
                return True
            if self._late(agent, state, sequence):
                return True
            if repeated:
                self.duplicates += 1
                return False
        if state.probation == sequence:  # two in a row: the sampler really started again
            self.resets += 1
            samplers[source] = Sampler(sequence, drops, now)
        else:
            state.probation = (sequence + 1) % WRAP
        return True

    @staticmethod
    def _loosen(state: Sampler, sequence: int) -> None:
        """Count ``sequence`` ahead of ``high`` without believing it yet (one corrupted number
        must not leave a hole); the next sample that continues it makes the jump real."""
        state.probation = (sequence + 1) % WRAP
        state.loose[sequence] = None
        if len(state.loose) > MAX_HOLES:
            del state.loose[next(iter(state.loose))]

    def _holes(self, agent: str, state: Sampler, sequence: int, now: float) -> None:
        """Book the numbers between ``high`` and ``sequence`` that neither arrived nor are
        counted ahead of time (``loose``, which ``sequence - 1`` is) as holes."""
        high, loose = state.high, state.loose
        inside = sorted(
            (number - high) % WRAP
            for number in loose
            if 0 < (number - high) % WRAP < (sequence - high) % WRAP
        )
        start = 1
        for step in inside + [(sequence - high) % WRAP]:
            if step > start:
                self._hole(agent, state, (high + start) % WRAP, step - start, now)
            start = step + 1
        for step in inside:
            del loose[(high + step) % WRAP]

    def _drops(self, agent: str, state: Sampler, drops: int, now: float) -> None:
        """A new value of the agent's drop counter counts once two samples in a row carry it
        (one corrupted field books nothing); an implausible one only moves the baseline, and so
        does the first confirmed value after a baseline only one sample carried (the sampler's
        first: corrupt, it would book a wrap of up to the gap bound; real, the drops of its
        first interval are not booked, as its first number's hole is not)."""
        if drops == state.drops_seen:
            more = (drops - state.drops) % WRAP
            if state.drops_sure and more < HALF and more <= state.bound(now):
                self.book(agent, float(more), state.drops_t, now)
            state.drops, state.drops_t, state.drops_sure = drops, now, True
        state.drops_seen = drops

    def _hole(self, agent: str, state: Sampler, start: int, count: int, now: float) -> None:
        self.book(agent, float(count), state.high_t, now)
        holes = state.holes
        holes.append([start, (start + count - 1) % WRAP, state.high_t, now])
        newest = (start + count) % WRAP
        while holes and ((newest - holes[0][1]) % WRAP > REORDER_SAMPLES or len(holes) > MAX_HOLES):
            holes.pop(0)  # too old to be filled: stays booked as lost

    def _late(self, agent: str, state: Sampler, sequence: int) -> bool:
        for k, hole in enumerate(state.holes):
            start, end, t0, t1 = hole
            if (sequence - start) % WRAP <= (end - start) % WRAP:
                self.late += 1
                self.book(agent, -1.0, t0, t1)
                if sequence == start == end:
                    del state.holes[k]
                elif sequence == start:
                    hole[0] = (start + 1) % WRAP
                elif sequence == end:
                    hole[1] = (end - 1) % WRAP
                else:
                    state.holes.insert(k + 1, [(sequence + 1) % WRAP, end, t0, t1])
                    hole[1] = (sequence - 1) % WRAP
                return True
        return False


def _restarted(newest_uptime: int, newest_number: int, uptime: int, number: int) -> bool:
    """Whether a datagram with ``uptime`` and ``number`` comes from a restarted agent."""
    back = (newest_uptime - uptime) % WRAP
    if back >= HALF:
        return False
    behind = (newest_number - number) % WRAP
    if not 0 < behind < HALF:
        return back > RESTART_SLACK_MS
    return (
        back > RESTART_SLACK_MS
        or (back >= RESTART_UPTIME_MS and behind > REORDER_DATAGRAMS)
        or behind > RESTART_DATAGRAMS
        or (number <= FIRST_DATAGRAMS and behind > REORDER_DATAGRAMS)
    )


def sampler_runs(flows: tuple) -> tuple[tuple[int, int, int, int], ...] | None:
    """``((source index, first number, last number, drops of the last), ...)`` per sampler, in
    order of first appearance, when each sampler's samples in the datagram are consecutive
    numbers (at most ``MAX_RUNS`` samplers); else None. The compiled scan gives the same."""
    runs: dict[int, list] = {}
    for flow in flows:
        run = runs.get(flow[1])
        if run is None:
            if len(runs) == MAX_RUNS:
                return None
            runs[flow[1]] = [flow[0], flow[0], flow[3]]
        elif flow[0] == (run[1] + 1) % WRAP:
            run[1], run[2] = flow[0], flow[3]
        else:
            return None
    return tuple((source, head, tail, drops) for source, (head, tail, drops) in runs.items())
