"""The plan's bytes do not change when the writer is made faster.

A random data centre of a few thousand hosts (seeded), planned by the exact solver, written as
the controller publishes it (agent fields only, a sampling floor, complete inventory extras) and
as ``cosample plan`` writes it (with the per-host report, some hosts with extras of their own):
the SHA-256 of each document's compact bytes (the solve time set to 0), of the per-host report
and of the report's busiest hosts were recorded with the writer at 7c5572d (before the mirror
lists were laid out as byte arrays), so any change to a byte of the canonical output fails
here, on both of ``hostlists.grouped``'s paths (fixed width, and piece by piece). The per-host
reference writer in test_planfile_columns.py checks the same tables field by field. Issue 44
changed the summary's ``bound_applied`` and ``gap`` (a bound over every applied plan, not only
those with receivers at 1-in-1), hence the documents' digests and the report's (which names
the plan_id); the host tables' bytes stayed the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime, timedelta, timezone

import numpy as np
import orjson
import pytest

from cosample.experiments.bench_planner import random_datacentre
from cosample.planner import hostlists, jsonpieces
from cosample.planner.extras import ExtraColumns
from cosample.planner.planbytes import compact_json
from cosample.planner.planfile import build_plan, host_report
from cosample.planner.solvers import solve

CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
SERVERS = 3000


def _datacentre(partial: bool):
    """Shuffled names (not in numeric order, some non-ASCII or needing escapes) and extras."""
    rng = np.random.default_rng(25)
    dc = random_datacentre(SERVERS, seed=11)
    spellings = ["h{}", "hôte-{}", 'rack"{}', "x{}\\y", "✓{}"]
    names = tuple(
        spellings[int(rng.integers(len(spellings)))].format(k) for k in rng.permutation(SERVERS)
    )
    extras = {
        name: {"bridge": "br-int", "tunnel_ip": f"10.{i >> 8 & 255}.{i & 255}.1"}
        for i, name in enumerate(names)
    }
    if partial:
        for i in rng.choice(SERVERS, size=SERVERS // 7, replace=False).tolist():
            extras[names[i]] = {**extras[names[i]], "rack": int(i % 13), "labels": ["a", i]}
        for i in rng.choice(SERVERS, size=SERVERS // 11, replace=False).tolist():
            extras[names[i]] = {"tunnel_ip": f"192.0.2.{i % 250}", "role_hint": None}
    else:
        extras = ExtraColumns.of(names, extras)
    return dataclasses.replace(dc, names=names, server_extras=extras)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _document(plan) -> bytes:
    """The plan's compact bytes, its solve time (which varies from run to run) set to 0."""
    return compact_json({**plan, "solver": {**plan["solver"], "seconds": 0}})


@pytest.fixture(params=["fixed width", "pieces"])
def controller_plan(request, monkeypatch):
    if request.param == "pieces":  # every name too wide to lay out at once: the other path
        monkeypatch.setattr(jsonpieces, "WIDE", 0)
    dc = _datacentre(partial=False)
    solution = solve(dc, "exact")
    plan = build_plan(
        dc,
        solution,
        created=CREATED,
        valid_for=timedelta(hours=1),
        version=0,
        floor=64,
        lazy_hosts=True,
        report=False,
    )
    return solution, plan


def test_the_controllers_plan_has_the_same_bytes(controller_plan):
    solution, plan = controller_plan
    assert len(plan["hosts"]) == SERVERS
    assert _digest(_document(plan)) == CONTROLLER_PLAN
    assert _digest(host_report(solution, plan)) == CONTROLLER_REPORT


@pytest.mark.parametrize("wide", [jsonpieces.WIDE, 0])
def test_the_reported_plan_has_the_same_bytes(wide, monkeypatch):
    monkeypatch.setattr(jsonpieces, "WIDE", wide)
    dc = _datacentre(partial=True)
    solution = solve(dc, "exact")
    plan = build_plan(dc, solution, created=CREATED, version=7, lazy_hosts=True)
    assert _digest(_document(plan)) == REPORTED_PLAN
    assert _digest(orjson.dumps(plan["hosts"].busiest)) == REPORTED_BUSIEST
    eager = build_plan(dc, solution, created=CREATED, version=7)  # parsed hosts, same bytes
    assert _digest(_document(eager)) == REPORTED_PLAN


# Recorded with the writer at 7c5572d (see the module's docstring).
CONTROLLER_PLAN = "c32844cbf03402a3c75b0951d7ae2dc8828639798c3d3df3d866b98dee98ea55"
CONTROLLER_REPORT = "cbe1701db3ae4c171d9a64e7af11cf3298796e492be35fc7176fbba9a6a2ae2b"
REPORTED_PLAN = "e7fc6c6e50415d2aab670ac1b46598c7d0016881453b9337de0be9935c278a07"
REPORTED_BUSIEST = "ad389660de6888059ab38f84999d313066d2495035fc4b27a6899e21c21acdb7"


@pytest.mark.parametrize("n", [50, 2**31])
def test_pairs_are_ordered_as_lexsort_orders_them(n):
    rng = np.random.default_rng(3)
    owner = rng.integers(0, min(n, 40), size=500)
    peer = rng.integers(0, min(n, 40), size=500)  # repeated pairs too: the order is stable
    assert np.array_equal(hostlists._pair_order(owner, peer, n), np.lexsort((peer, owner)))
