"""From measured traffic to plan files: the data-centre description and both plans.

The description is what an operator would feed the planner: each server's emulated capacity,
the cost coefficients (given, or from a ``cosample fit`` calibration file), the traffic matrix
*as measured* in the testbed's baseline run, and where the agents find the bridge, VM ports,
tunnel IP and collector. The collaborative plan comes from the planner's exact solver (or an LP
by name), the non-collaborative one from the planner's baseline (each server samples within its
own capacity, no mirrors); both go through the planner's own plan-file writer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosample.experiments.testbed.errors import TestbedError
from cosample.experiments.testbed.topology import Topology
from cosample.planner.choices import DEFAULT_SOLVER, NONCOLLAB


@dataclass(frozen=True)
class Coefficients:
    """Cost coefficients and an optional capacity override for every server."""

    alpha: float
    beta: float
    capacity_pps: float | None = None
    source: str = "given"

    @classmethod
    def from_calibration(cls, path: str | Path) -> "Coefficients":
        """``alpha``, ``beta`` and ``capacity_pps`` from a ``cosample fit`` JSON file."""
        from cosample.costmodel.coefficients import CalibrationFileError, read_coefficients

        try:
            values = read_coefficients(path)
        except CalibrationFileError as exc:
            raise TestbedError(f"--calibration {exc}") from None
        return cls(values["alpha"], values["beta"], values.get("capacity_pps"), source=str(path))


def description(
    topology: Topology,
    traffic_pps: Mapping[str, Mapping[str, float]],
    coefficients: Coefficients,
    collector: str,
) -> dict[str, Any]:
    """The planner's data-centre description of the testbed."""
    servers = []
    for server in topology.servers:
        capacity = coefficients.capacity_pps or server.capacity_pps
        servers.append(
            {
                "name": server.name,
                "capacity_pps": capacity,
                "tunnel_ip": server.tunnel_ip,
                "bridge": server.bridge,
                "vm_ports": [vm.port for vm in server.vms],
            }
        )
    traffic = {
        src: {dst: round(float(pps), 3) for dst, pps in row.items() if pps > 0}
        for src, row in traffic_pps.items()
    }
    return {
        "name": f"testbed-{topology.prefix}",
        "cost": {"alpha": coefficients.alpha, "beta": coefficients.beta},
        "servers": servers,
        "traffic_pps": {k: v for k, v in traffic.items() if v},
        "sflow": {"collector": collector, "header_bytes": 128, "polling_s": 0},
    }


def make_plans(
    document: Mapping[str, Any], out_dir: Path, version: int, solver: str = DEFAULT_SOLVER
) -> dict[str, Path]:
    """Write ``plan-noncollab.json`` (version) and ``plan-collab.json`` (version + 1)."""
    from cosample.planner.datacentre import DataCentre
    from cosample.planner.planbytes import write_plan
    from cosample.planner.planfile import build_plan
    from cosample.planner.solvers import solve

    dc = DataCentre.from_dict(document, source="testbed description")
    paths = {}
    for offset, (phase, name) in enumerate((("noncollab", NONCOLLAB), ("collab", solver))):
        plan = build_plan(dc, solve(dc, name), version=version + offset)
        paths[phase] = out_dir / f"plan-{phase}.json"
        write_plan(plan, paths[phase])
    return paths


def load_plan(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def applied_rate(host: Mapping[str, Any]) -> tuple[float, float]:
    """(local sFlow rate after 1-in-N rounding, total mirrored share) of a plan's host entry."""
    sampling = host.get("sflow_sampling")
    local = 1.0 / sampling if sampling else 0.0
    return local, sum(float(m["rate"]) for m in host.get("mirrors", []))


def copies_sampled(host: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]]) -> float:
    """The share of a host's packets sampled as copies: each mirror's share at the rate its
    receiver's sFlow samples (a receiver may sample 1-in-N, N > 1, and may also send: a plan
    over every applied plan), none where the receiver has no sFlow."""
    return sum(
        float(mirror["rate"]) * applied_rate(hosts.get(mirror["to"]) or {})[0]
        for mirror in host.get("mirrors", [])
    )
