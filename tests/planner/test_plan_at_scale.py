"""What ``cosample plan`` does differently for large fleets gives the same plan: the compact
file above ``INDENT_MAX_HOSTS`` parses to the indented one's document with the same ``plan_id``,
and the table of the busiest hosts, made without parsing the host table, is the same table."""

from __future__ import annotations

import io
import json

import numpy as np
import orjson
from rich.console import Console

from cosample.planner.datacentre import DataCentre
from cosample.planner.planbytes import (
    INDENT_MAX_HOSTS,
    HostTable,
    canonical_json,
    plan_id,
    write_plan,
)
from cosample.planner.planfile import build_plan
from cosample.planner.report import plan_table
from cosample.planner.solvers import solve


def fleet(n: int, seed: int = 3) -> DataCentre:
    """Random fleet; every fifth server a copy of the one before (equal capacity use: ties)."""
    rng = np.random.default_rng(seed)
    own = rng.lognormal(11, 1, n)
    own[4::5] = own[3::5][: len(own[4::5])]
    peer = (np.arange(n) + 1) % n
    capacity = own * rng.uniform(1.1, 5, n)
    capacity[4::5] = capacity[3::5][: len(capacity[4::5])]
    src = np.concatenate((np.arange(n), np.arange(n)))
    dst = np.concatenate((np.arange(n), peer))
    pps = np.concatenate((own, np.full(n, 10.0)))
    extras = {f"h{i:05d}": {"tunnel_ip": f"10.1.{i // 250}.{i % 250 + 1}"} for i in range(0, n, 2)}
    dc = DataCentre.from_arrays(
        capacity + 40, 1.54, 0.46, src, dst, pps, names=[f"h{i:05d}" for i in range(n)]
    )
    return DataCentre(**{**dc.__dict__, "server_extras": extras})


def test_compact_plan_is_the_same_document(tmp_path):
    dc = fleet(INDENT_MAX_HOSTS + 200)
    plan = build_plan(dc, solve(dc, "exact"), version=5, lazy_hosts=True)
    assert isinstance(plan["hosts"], HostTable)
    path = tmp_path / "plan.json"
    write_plan(plan, path)
    data = path.read_bytes()
    assert data.startswith(b'{"cost":') and b"\n" not in data[:-1] and data.endswith(b"}\n")
    document = orjson.loads(data)
    assert document == json.loads(canonical_json(plan))
    assert plan_id(document) == document["plan_id"] == plan["plan_id"]


def test_small_plan_stays_indented(tmp_path):
    dc = fleet(30)
    plan = build_plan(dc, solve(dc, "exact"), version=5, lazy_hosts=True)
    write_plan(plan, tmp_path / "plan.json")
    text = (tmp_path / "plan.json").read_text()
    assert text.startswith('{\n  "cost": ') and text == canonical_json(plan)


def render(plan) -> str:
    console = Console(file=io.StringIO(), width=220)
    console.print(plan_table(plan))
    return console.file.getvalue()


def test_busiest_hosts_table_without_parsing_the_table():
    for n in (40, 700):
        dc = fleet(n)
        plan = build_plan(dc, solve(dc, "exact"), version=5, lazy_hosts=True)
        shown = render(plan)
        assert plan["hosts"]._parsed is None  # nothing of the table was parsed
        parsed = {**plan, "hosts": plan["hosts"].parsed()}
        assert shown == render(parsed)
        assert ("busiest of" in shown) == (n > 60)
