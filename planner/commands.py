"""Handlers behind ``cosample plan`` and ``cosample check``."""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import timedelta
from importlib import resources
from pathlib import Path

from cosample.durations import parse_duration
from cosample.files import is_stdout
from cosample.plan.document import VERSION_SKEW_S
from cosample.planner import bulk
from cosample.planner.choices import EXACT, NONCOLLAB
from cosample.planner.datacentre import DataCentre
from cosample.planner.description import Server
from cosample.planner.errors import PlannerError
from cosample.planner.planbytes import write_plan
from cosample.planner.planfile import build_plan
from cosample.planner.report import default_console, print_plan, summary_lines
from cosample.planner.solvers import solve
from cosample.validation import read_document


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
    to_stdout = bool(args.output) and is_stdout(args.output)
    if args.json and to_stdout:
        raise PlannerError("--json and -o -: both write standard output; give one")
    validity = valid_for(args.valid_for)
    _check_numbers(args)
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
    written = write_plan(plan, args.output) if args.output else None
    if args.json:
        print(json.dumps(plan_summary(plan, written), indent=2, sort_keys=True))
        return 0
    # the plan itself on standard output (-o -): the people's view goes to standard error
    console = default_console(stderr=to_stdout)
    if args.quiet:
        for line in summary_lines(plan):
            console.print(line, highlight=False)
    else:
        print_plan(plan, console)
    if written:
        console.print(f"plan written to {written}", highlight=False)
    return 0


def _check_numbers(args: argparse.Namespace) -> None:
    """The options the plan carries, within what every agent accepts of a plan."""
    if args.plan_version is not None:
        highest = int(time.time()) + VERSION_SKEW_S
        if not 0 <= args.plan_version <= highest:
            raise PlannerError(
                f"--plan-version: expected 0 to {highest} (now in Unix seconds, plus "
                f"{VERSION_SKEW_S} s: agents refuse a plan whose version is further ahead of "
                f"its creation time), got {args.plan_version}"
            )
    if args.time_limit is not None and not 0 < args.time_limit < math.inf:
        raise PlannerError(f"--time-limit: expected a number of seconds > 0, got {args.time_limit}")


def plan_summary(plan: dict, written: str | None) -> dict:
    """``plan --json``: what the summary lines say, as the plan file carries it."""
    return {
        "plan_id": plan["plan_id"],
        "version": plan["version"],
        "created": plan["created"],
        "expires": plan["expires"],
        "datacentre": plan["datacentre"],
        "solver": plan["solver"],
        "summary": plan["summary"],
        "written_to": written,
    }


def run_check(args: argparse.Namespace) -> int:
    """Validate a description as ``plan`` reads it, then print it normalised: every part
    inline (CSV files read), defaults and resolved addresses written out, calibration files
    by absolute path. The output is itself a description, and plans to the same ``plan_id``."""
    path = Path(args.file)
    document = read_document(path, "data-centre description", error=PlannerError)
    columns = bulk.read(document, str(path), path.parent)
    dc = DataCentre.from_columns(columns, path.parent, str(path))
    dc.check_feasible()
    normalised = described(columns, path.parent, dc.name)
    print(json.dumps(normalised, indent=2, sort_keys=True, default=_plain))
    return 0


def described(columns: bulk.Columns, base_dir: Path, name: str) -> dict:
    """A validated description's columns as a description document; ``name``: the data
    centre's, as planned (without one in the description, its file's)."""
    document = columns.header.model_dump(mode="json", exclude_none=True)
    document["name"] = name
    appmon_cost = document.get("appmon_cost", {})
    if "calibration" in appmon_cost:
        appmon_cost["calibration"] = str((base_dir / appmon_cost["calibration"]).resolve())
    fields = Server.model_fields
    servers = columns.servers
    document["servers"] = [
        {
            key: _server_value(key, servers[key][k], base_dir)
            for key in fields
            if servers[key][k] is not None and servers[key][k] != fields[key].default
        }
        for k in range(len(servers["name"]))
    ]
    traffic: dict[str, dict[str, float]] = {}
    start = 0
    for source, length in zip(columns.traffic_rows, columns.traffic_lengths):
        row = traffic.setdefault(source, {})
        for j in range(start, start + length):
            row[columns.traffic_dst[j]] = float(columns.traffic_pps[j])
        start += length
    document["traffic_pps"] = traffic
    return document


def _server_value(key: str, value, base_dir: Path):
    if key == "calibration":  # read beside the description: absolute, so it reads anywhere
        return str((base_dir / value).resolve())
    if key == "vm_ports":
        return list(value)
    return value


def _plain(value):
    """numpy's numbers (a CSV file's columns) as JSON numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
