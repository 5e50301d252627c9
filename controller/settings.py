"""What tunes the controller's loop: its command-line options, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass

from cosample.collector.polling import plan_lead_s
from cosample.controller import decide as decisions
from cosample.controller.plausibility import JUMP_FACTOR, JUMP_OF_CAPACITY, SLACK


@dataclass(frozen=True)
class Settings:
    """Everything that tunes the loop (command-line options)."""

    collectors: tuple[str, ...]
    interval_s: float = 30.0
    tau_s: float = 90.0
    rise_tau_s: float | None = 0.0  # rises followed at once; None: as tau_s
    hold_s: float | None = None  # falls smaller than a step count after this; None: tau_s
    change: float | None = 0.25  # a server's total moving this much per cycle is a step
    max_age_s: float | None = None  # default: 3 intervals
    valid_for_s: float = 3600.0
    plan_margin: float = 0.15
    settle_s: float = 120.0
    #: Every plan's ``not_before`` is this long after its publication: the collector
    #: (``collector.polling``) knows a plan before any agent may apply it. 0: at once, the
    #: collector may learn it after the agents (the quiet then also waits out its window).
    lead_s: float = plan_lead_s()
    policy: decisions.Policy = decisions.Policy()
    key: str | None = None
    timeout_s: float = 10.0
    solver: str = "exact"
    measure_sampling: int | None = 4096  # sampling floor and measurement plan; None: off
    #: With no plan in force, the measurement plan is published only if no snapshot has known
    #: a server for this long (two of the collector's default 30-s windows): agents without a
    #: plan already sample in their safe state, and a collector that knows their addresses
    #: estimates from that (plan-less snapshots).
    measure_after_s: float = 60.0
    #: An estimate above capacity x (1 + slack) is refused (``plausibility``).
    implausible_slack: float = SLACK
    #: A rise to more than this many times the last accepted estimate (and by more than
    #: ``jump_of_capacity`` of the capacity) waits for a second, disjoint window; None: off.
    jump_factor: float | None = JUMP_FACTOR
    jump_of_capacity: float = JUMP_OF_CAPACITY
    #: The collectors' public keys: a snapshot counts only if one verifies its signature
    #: (``source.SnapshotReader``); empty: snapshots are not authenticated.
    collector_keys: tuple[str, ...] = ()
    #: the analysers' snapshots (``appmon run``) and their public keys (``apploop``)
    analysers: tuple[str, ...] = ()
    analyser_keys: tuple[str, ...] = ()
    #: a host seen backing off (its guard, the snapshot's ``guard``) is planned with the
    #: capacity its load on the guard's rung shows, until this long after it was last seen
    guard_hold_s: float = 600.0

    @property
    def hold_seconds(self) -> float:
        return self.hold_s if self.hold_s is not None else self.tau_s

    @property
    def warm_s(self) -> float:
        """Seconds of snapshots before the first plan: the time constant and the hold, so the
        first plan is made for the top of the noise seen, not for one trough of it."""
        return max(self.tau_s, self.hold_seconds)

    @property
    def snapshot_max_age_s(self) -> float:
        return self.max_age_s if self.max_age_s is not None else 3 * self.interval_s
