"""The plan-less start: the first publication is the real plan when the collector knows the
servers without a plan; the measurement plan only after ``measure_after_s`` without any
snapshot knowing a server; never once a plan is in force."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from controller_helpers import inventory_doc, snapshot_doc
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from cosample.collector.snapshot import parse_snapshot
from cosample.controller.decide import knows_servers, measurement_due
from cosample.controller.estimate import measure
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.settings import Settings
from cosample.controller.source import Reading

NOW = datetime.now(timezone.utc).replace(microsecond=0)
TRAFFIC = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}
INTERVAL_S, BOUND_S = 10.0, 30.0
#: What a collector may say in one cycle: nothing (down), servers it has not heard (coverage
#: 0), or plan-less estimates of every server.
KINDS = ("down", "unheard", "planless")


def snapshot(kind: str, when: datetime):
    if kind == "down":
        return None
    rows = (
        {
            n: {
                "coverage": 0.0,
                "packets_per_s": 0.0,
                "packets_per_s_ci95": [0.0, 0.0],
                "samples": 0,
                "local_samples": 0,
                "samples_per_s": 0.0,
            }
            for n in ("s1", "s2", "s3")
        }
        if kind == "unheard"
        else None
    )
    traffic = {} if kind == "unheard" else TRAFFIC
    return parse_snapshot(
        json.dumps(snapshot_doc(when, traffic, servers=["s1", "s2", "s3"], rows=rows, plan=None))
    )


class Fleet:
    def __init__(self, folder: Path, kinds: list[str]) -> None:
        self.kinds, self.clock, self.published = list(kinds), NOW, []
        self.controller = Controller(
            inventory_from_dict(inventory_doc([3000, 3000, 3000])),
            Settings(
                ("c1",),
                interval_s=INTERVAL_S,
                tau_s=INTERVAL_S,
                measure_sampling=128,
                measure_after_s=BOUND_S,
            ),
            self,
            folder,
            clock=lambda: self.clock,
            reader=self.read,
        )

    def publish(self, rendered) -> None:
        self.published.append(rendered.final)

    def read(self, collectors, now, max_age_s, timeout_s) -> Reading:
        found = snapshot(self.kinds[self.k], now)
        return Reading(found, () if found else ("collector down",), int(bool(found)), 1)

    def run(self) -> list[tuple[int, str]]:
        out = []
        for self.k in range(len(self.kinds)):
            status = self.controller.cycle()
            if status.result == "published":
                out.append((self.k, status.reasons[0]))
            self.clock += timedelta(seconds=INTERVAL_S)
        return out


def expected_first(kinds: list[str]) -> tuple[int, str] | None:
    """The reference: the first planless cycle publishes the real plan (warm after one
    snapshot here); a run of cycles knowing no server publishes the measurement plan once it
    has lasted ``BOUND_S``."""
    since = None
    for k, kind in enumerate(kinds):
        if kind == "planless":
            return k, "no current plan"
        since = k if since is None else since
        if (k - since) * INTERVAL_S >= BOUND_S:
            return k, "bootstrap"
    return None


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=10))
def test_the_measurement_plan_only_after_the_bound_without_a_known_server(kinds):
    with tempfile.TemporaryDirectory() as folder:
        published = Fleet(Path(folder), kinds).run()
    first = expected_first(kinds)
    if first is None:
        assert published == []
        return
    k, reason = published[0]
    assert (k, reason.split(":")[0]) == first, (kinds, published)
    later = [r for _, r in published[1:]]
    assert not any(r.startswith("bootstrap") for r in later)  # never once a plan is in force
    if reason == "no current plan":  # plan-less start: one publication under steady load
        assert later == []


def test_planless_data_is_not_held_and_unheard_servers_are_unmeasured(tmp_path):
    fleet = Fleet(tmp_path, ["unheard", "planless"])
    assert fleet.run() == [(1, "no current plan")]
    assert fleet.controller.smoothed.history == ()  # sparse samples: not in the hold
    assert not knows_servers(snapshot("unheard", NOW))
    unheard = measure(snapshot("unheard", NOW), fleet.controller.inventory)
    assert not unheard.measured.any()  # coverage 0: nobody samples them, 0 pps says nothing
    assert measure(snapshot("planless", NOW), fleet.controller.inventory).measured.all()


def test_a_plan_in_force_is_kept_when_the_collector_goes_down(tmp_path):
    published = Fleet(tmp_path, ["planless"] + ["down"] * 8).run()
    assert published == [(0, "no current plan")]  # stale: no measurement plan over it


@given(
    waited=st.floats(0, 1e4),
    bound=st.floats(0, 1e4),
    sampling=st.sampled_from([None, 0, 1, 128, 4096]),
)
def test_measurement_due(waited, bound, sampling):
    assert measurement_due(waited, bound, sampling) == (bool(sampling) and waited >= bound)


def test_counters_alone_know_a_server():
    document = snapshot_doc(
        NOW, {}, servers=["s1"], counters={"s1": 400.0}, plan=None, rows={"s1": {"coverage": 0.0}}
    )
    assert knows_servers(parse_snapshot(json.dumps(document)))
    assert np.isclose(
        measure(
            parse_snapshot(json.dumps(document)), inventory_from_dict(inventory_doc([3000] * 3))
        ).own_pps[0],
        400.0,
    )
