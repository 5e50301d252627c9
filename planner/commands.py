"""Handlers behind ``cosample plan`` and ``cosample check``."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from importlib import resources

from cosample.durations import parse_duration
from cosample.planner.choices import EXACT, NONCOLLAB
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import write_plan
from cosample.planner.planfile import build_plan
from cosample.planner.report import default_console, print_plan, summary_lines
from cosample.planner.solvers import solve


def valid_for(text: str) -> timedelta:
    """``--valid-for``: how long agents may apply the plan (``90s``, ``30m``, ``6h``, ``2d``)."""
    try:
        return timedelta(seconds=parse_duration(text, positive=True))
    except ValueError as exc:
        raise PlannerError(f"--valid-for: {exc}") from None


def example_datacentre() -> DataCentre:
    """The embedded example: 12 servers of 1 Mpps, skewed load, alpha 1.54, beta 0.46."""
    text = resources.files("cosample.planner").joinpath("data/example.json").read_text()
    return DataCentre.from_dict(json.loads(text), source="example")


def load_datacentre(path: str | None) -> DataCentre:
    return example_datacentre() if path is None else DataCentre.load(path)


def run_plan(args: argparse.Namespace) -> int:
    validity = valid_for(args.valid_for)
    dc = load_datacentre(args.file)
    solver = NONCOLLAB if args.noncollab else args.solver
    solution = solve(
        dc,
        solver,
        lp_backend=args.lp_backend,
        time_limit=args.time_limit,
        margin=args.margin,
        robust=args.robust,
    )
    point = (
        solve(dc, EXACT if solver != NONCOLLAB else solver, margin=args.margin)
        if args.robust
        else None
    )
    plan = build_plan(
        dc,
        solution,
        valid_for=validity,
        version=args.plan_version,
        point_estimate=point,
        lazy_hosts=True,
    )  # written and shown unparsed
    if args.output:
        write_plan(plan, args.output)
    console = default_console()
    if args.quiet:
        for line in summary_lines(plan):
            console.print(line, highlight=False)
    else:
        print_plan(plan, console)
    if args.output:
        console.print(f"plan written to {args.output}", highlight=False)
    return 0


def run_check(args: argparse.Namespace) -> int:
    dc = DataCentre.load(args.file)
    dc.check_feasible()
    normalised = {
        "name": dc.name,
        "servers": [
            {
                "name": name,
                "capacity_pps": float(dc.capacity_pps[i]),
                "alpha": float(dc.alpha[i]),
                "beta": float(dc.beta[i]),
                **dict(dc.server_extras.get(name, {})),
            }
            for i, name in enumerate(dc.names)
        ],
        "traffic_pps": _traffic_dict(dc),
        "sflow": dict(dc.sflow),
    }
    print(json.dumps(normalised, indent=2, sort_keys=True))
    return 0


def _traffic_dict(dc: DataCentre) -> dict:
    traffic: dict = {}
    for s, d, v in zip(dc.traffic_src.tolist(), dc.traffic_dst.tolist(), dc.traffic_pps.tolist()):
        row = traffic.setdefault(dc.names[s], {})
        row[dc.names[d]] = row.get(dc.names[d], 0.0) + v
    return traffic
