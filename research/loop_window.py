"""The controller's loop seen through a collector's sliding window: publications per run.

``python -m research.loop_window [--seeds 30]`` runs the real controller (real
planner, real snapshot model, no OVS) every 5 s on the testbed's traffic (2400, 1200 and 600 pps
offered, 3000 pps servers) as a collector with a 15-s window reports it, with 3 % sampling noise
per snapshot, and counts the publications after the first plan. The start is plan-less, as on
the testbed: until the first plan the snapshots rest on the agents' safe-state samples (local
1-in-128, their sampling error added) and the hold does not remember them.

- ``shift``: the busiest and the quietest server swap their traffic at 100 s;
- ``steady``: every flow redrawn within +/-10 % every 15 s;

for the default rules and with each one off (no steps, no hold), and without the collector's
lead (``lead_s`` 0: plans apply at once, the quiet after a publication also waits out the
collector's window, as before the lead). Plans carry the testbed collector's lead
(``closedloop.LEAD_S``: it polls the plan every second, reads bounded by 1 s); the simulated
collector follows the first plan from its ``not_before``. For the shift it also prints when the
fleet may run the final plan: seconds from the shift to the last publication's ``not_before``
(its phase 2 for a two-phase change), or to the publication itself without a lead; agents apply
it at their next poll after that. The windowed source and the scenarios are also what
``tests/controller/test_transitions.py`` checks.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from cosample.controller.inventory import FORMAT as INVENTORY_FORMAT
from cosample.experiments.testbed.closedloop import LEAD_S

Matrix = dict[str, dict[str, float]]
#: The testbed's default traffic (``testbed up``): the busiest server forwards 85 % of 3000 pps.
TESTBED: Matrix = {
    "s1": {"s1": 1800.0, "s2": 600.0},
    "s2": {"s2": 900.0, "s3": 300.0},
    "s3": {"s3": 450.0, "s1": 150.0},
}


def windowed(traffic: Callable[[float], Matrix], t: float, window: float) -> Matrix:
    """Mean of ``traffic`` over the last ``window`` seconds before ``t`` (1-s steps)."""
    seconds = [t - k - 0.5 for k in range(int(window))]
    out: Matrix = {}
    for s in seconds:
        for src, row in traffic(s).items():
            for dst, pps in row.items():
                out.setdefault(src, {})
                out[src][dst] = out[src].get(dst, 0.0) + pps / len(seconds)
    return out


#: The plan a simulated collector follows when the caller does not say which.
SIMULATED_PLAN = {"version": 1, "plan_id": "simulated"}


def snapshot_document(
    time: datetime,
    traffic: Matrix,
    names: list[str],
    window: float,
    plan: dict | None = SIMULATED_PLAN,
) -> dict:
    """A ``cosample.snapshot`` whose per-server totals are the matrix's rows (written by the
    collector's own model); ``plan`` None: a plan-less snapshot (no plan in force yet)."""
    from cosample.collector.snapshot import Snapshot
    from cosample.collector.snapshottables import ServerEstimate

    servers = {}
    for name in names:
        pps = float(sum(traffic.get(name, {}).values()))
        servers[name] = ServerEstimate(
            packets_per_s=pps,
            packets_per_s_ci95=[pps * 0.95, pps * 1.05],
            bytes_per_s=pps * 1000,
            bytes_per_s_ci95=[pps * 900, pps * 1100],
            samples=100,
            samples_per_s=100 / window,
            local_samples=100,
            mirrored_samples=0,
            coverage=0.5,
        )
    snapshot = Snapshot.from_servers(
        servers,
        collector="c1",
        time=time.astimezone(timezone.utc).replace(microsecond=0),
        window_s=window,
        plan=plan,
        traffic_pps={src: dict(row) for src, row in traffic.items() if src in names},
    )
    return json.loads(snapshot.to_json())


def reader_for(
    traffic: Callable[[float], Matrix],
    start: datetime,
    window: float,
    names: list[str],
    rng: np.random.Generator | None = None,
    sampling_noise: float = 0.0,
    plan_of: Callable[[datetime], dict | None] | None = None,
    safe_sampling: int | None = None,
):
    """A controller ``reader`` serving windowed snapshots of ``traffic``; ``plan_of(now)`` gives
    the plan the collector follows (default: always ``SIMULATED_PLAN``). A plan-less snapshot
    rests on the agents' safe-state samples (local 1-in-``safe_sampling``): each entry of
    ``v`` pps then also carries the sampling error of ``v * window / safe_sampling`` samples
    (relative standard deviation ``sqrt(safe_sampling / (v * window))``)."""
    from cosample.collector.snapshot import parse_snapshot
    from cosample.controller.source import Reading

    def reader(collectors, now, max_age_s, timeout_s):
        matrix = windowed(traffic, (now - start).total_seconds(), window)
        if rng is not None and sampling_noise:
            matrix = {
                src: {
                    dst: v * max(0.0, 1 + rng.normal(0, sampling_noise)) for dst, v in row.items()
                }
                for src, row in matrix.items()
            }
        plan = plan_of(now) if plan_of is not None else SIMULATED_PLAN
        if plan is None and safe_sampling and rng is not None:
            matrix = {
                src: {
                    dst: v
                    * max(0.0, 1 + rng.normal(0, math.sqrt(safe_sampling / max(v * window, 1.0))))
                    for dst, v in row.items()
                }
                for src, row in matrix.items()
            }
        document = snapshot_document(now, matrix, names, window, plan)
        return Reading(parse_snapshot(json.dumps(document)), (), 1, 1)

    return reader


def chunked_noise(
    base: Matrix, rng: np.random.Generator, noise: float, chunk: float, horizon: float
) -> Callable[[float], Matrix]:
    """``base`` with every entry redrawn within +/- ``noise`` every ``chunk`` seconds."""
    draws = [
        {
            src: {dst: v * (1 + rng.uniform(-noise, noise)) for dst, v in row.items()}
            for src, row in base.items()
        }
        for _ in range(int(horizon // chunk) + 2)
    ]
    return lambda t: draws[max(0, int(t // chunk))]


def swapped(base: Matrix, a: str, b: str) -> Matrix:
    """``base`` with servers ``a`` and ``b`` exchanging their traffic (rows and columns)."""
    swap = {a: b, b: a}
    return {
        swap.get(src, src): {swap.get(dst, dst): v for dst, v in row.items()}
        for src, row in base.items()
    }


class _Sink:
    def __init__(self) -> None:
        self.published: list = []

    def publish(self, rendered) -> None:
        self.published.append(rendered.versions)


@dataclass
class Run:
    """One run: (time, first reason) of every publication, and when the fleet may run the
    plan in force at the end (its ``not_before``, or its publication without a lead)."""

    published: list[tuple[float, str]]
    final_from: float | None


def run(
    traffic: Callable[[float], Matrix],
    seed: int,
    state_dir: Path,
    seconds: float = 160.0,
    planless_start: bool = True,
    **overrides,
) -> Run:
    """The controller every 5 s for ``seconds``.

    ``planless_start``: until the first plan the snapshots are plan-less (sparse safe-state
    samples); False: dense snapshots from the start (a collector already following a plan)."""
    from cosample.controller.inventory import inventory_from_dict
    from cosample.controller.loop import Controller
    from cosample.controller.settings import Settings
    from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA

    inventory = inventory_from_dict(
        {
            "format": INVENTORY_FORMAT,
            "format_version": 1,
            "name": "loop-window",
            "cost": {"alpha": PAPER_ALPHA, "beta": PAPER_BETA},
            "servers": [
                {
                    "name": f"s{k}",
                    "capacity_pps": 3000.0,
                    "bridge": f"br{k}",
                    "tunnel_ip": f"192.0.2.{k}",
                    "vm_ports": [f"vm{k}a"],
                }
                for k in (1, 2, 3)
            ],
            "sflow": {"collector": "192.0.2.100:6343"},
        }
    )
    start = datetime.now(timezone.utc).replace(microsecond=0)
    clock = [start]
    options = dict(
        interval_s=5.0,
        tau_s=15.0,
        hold_s=60.0,
        settle_s=6.0,
        valid_for_s=600.0,
        measure_sampling=128,
        lead_s=LEAD_S,
    )
    options.update(overrides)
    rng = np.random.default_rng(seed)
    fresh = Path(tempfile.mkdtemp(prefix=f"seed{seed}-", dir=state_dir))  # no plan in force
    holder: list = []  # the collector follows the controller's plans: plan-less before the first
    controller = Controller(
        inventory,
        Settings(("c1",), **options),
        _Sink(),
        fresh,
        clock=lambda: clock[0],
        reader=reader_for(
            traffic,
            start,
            15.0,
            list(inventory.names),
            rng,
            0.03,
            plan_of=_following(holder) if planless_start else None,
            safe_sampling=options["measure_sampling"],
        ),
    )
    holder.append(controller)
    out, last = [], None
    for k in range(1, int(seconds // 5) + 1):
        clock[0] = start + timedelta(seconds=5 * k)
        status = controller.cycle()
        if status.result == "published":
            out.append((5.0 * k, status.reasons[0].split(":")[0]))
            last = 5.0 * k
    release = _not_before(controller.current)
    final = (
        None if last is None else (release - start).total_seconds() if release is not None else last
    )
    return Run(out, final)


def _following(holder: list) -> Callable[[datetime], dict | None]:
    """The plan the simulated collector follows: none until the first plan's ``not_before``
    (it switches then, not when it reads it), the controller's latest after that."""
    seen = []

    def plan_of(now: datetime) -> dict | None:
        plan = holder[0].current
        if plan is None:
            return None
        if not seen:
            release = _not_before(plan)  # a first plan is never a two-phase set
            if release is not None and now < release:
                return None
            seen.append(True)
        return _ref(plan)

    return plan_of


def _not_before(plan: dict | None) -> datetime | None:
    if not plan or not plan.get("not_before"):
        return None
    return datetime.fromisoformat(plan["not_before"].replace("Z", "+00:00"))


def _ref(plan: dict | None) -> dict | None:
    return None if plan is None else {"version": plan["version"], "plan_id": plan["plan_id"]}


VARIANTS = {
    "default (hold 60 s, steps)": {},
    "hold 30 s": {"hold_s": 30.0},
    "no hold": {"hold_s": 0.0},
    "no steps": {"change": None},
    "no lead (quiet waits the window)": {"lead_s": 0.0},
}
SHIFT_S = 100.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args(argv)
    shifted = swapped(TESTBED, "s1", "s3")
    with tempfile.TemporaryDirectory() as folder:
        for label, overrides in VARIANTS.items():
            for scenario in ("steady", "shift"):
                counts: Counter[int] = Counter()
                finals = []
                for seed in range(args.seeds):
                    traffic = (
                        chunked_noise(
                            TESTBED, np.random.default_rng(1000 + seed), 0.10, 15.0, 200.0
                        )
                        if scenario == "steady"
                        else (lambda t: TESTBED if t < SHIFT_S else shifted)
                    )
                    result = run(traffic, seed, Path(folder), **overrides)
                    counts[len(result.published) - 1] += 1
                    if result.final_from is not None:
                        finals.append(result.final_from - SHIFT_S)
                spread = ", ".join(f"{n} more: {c}" for n, c in sorted(counts.items()))
                timing = (
                    f"; final plan may run {np.mean(finals):.1f} s after the shift "
                    f"(range {min(finals):g}-{max(finals):g})"
                    if scenario == "shift" and finals
                    else ""
                )
                print(
                    f"{label:34s} {scenario:7s} publications after the first plan "
                    f"({args.seeds} seeds): {spread}{timing}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
