"""The collector's estimate through a plan change under steady traffic: old and new estimator.

``python -m research.collector_planchange --baseline-tree DIR [--seeds 20] [--lag 2]``
feeds synthetic sFlow datagrams (``cosample.lab.sflowstream``: OVS's sampling, mirroring and
datagram packing, drawn from the plans) through the real ``Estimator`` with the testbed's 15-s
window and takes a snapshot every second. Three servers send 2400, 1200 and 600 pps throughout.
The collector sees the new plan at 40 s; the agents apply it ``--lag`` seconds later (mirrored
copies of a dropped pair arriving in between are ``stale_mirror``). Two changes:

- ``up``: every server 1-in-128 (the measurement plan) -> s1 1-in-8 mirroring 50 % to s3, s2
  1-in-16, s3 (the receiver) 1-in-1;
- ``down``: the reverse.

For each second from 10 s before the change to 25 s after it, the mean over seeds of
estimate/truth - 1 per server, for the estimator of another revision (``--baseline-tree DIR``, laid
out from a clone by ``python -m research.revision 88e1128 DIR``: 88e1128 is the last revision
before exposures) and for the working tree's, side by side in one run;
then the largest mean error in the transition and, per server, the share of snapshots in the
window after the change whose 95 % interval covers the nominal rate (an exact 1-in-1 stream's
interval covers the packets actually sent, which differ from the nominal rate by their own
Poisson noise). ``--lag`` may be negative: agents that apply the plan before the collector sees it.

The two sides also follow their plan-change protocol. *Old*: the collector switches when it reads
the plan (at 0 s) and the agents apply it ``--lag`` s later, before it when negative (a collector
whose poll came after the agents'). *New* (``--ahead``, the default, this tree's protocol): the
plan carries ``not_before`` (0 s), this tree's ``PlanWatcher`` reads it from a file ``--lead`` s
earlier (polling every second) and switches at ``not_before``; agents never apply a plan before
its ``not_before``, so they apply at ``max(lag, 0)``: a negative lag becomes the worst case of
agents that poll exactly at ``not_before``. ``--no-ahead``: the new side switches when it reads
the plan as the old one does (the estimators alone compared).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from cosample.experiments.errors import ExperimentError
from cosample.experiments.othertree import checked, load_package
from cosample.lab.plans import plan_document
from cosample.plan.document import parse_plan

RATES = {"s1": 2400.0, "s2": 1200.0, "s3": 600.0}
MEASURE = {"s1": (128, {}), "s2": (128, {}), "s3": (128, {})}
MIRROR = {"s1": (8, {"s3": 0.5}), "s2": (16, {}), "s3": (1, {})}
SEEN_S, WINDOW_S = 40.0, 15.0
#: Around the real time (plans are valid around it: the watcher reads them), with the collector's
#: 1.5-s buckets in the same phase as ever (START mod 1.5 = 1: results are reproducible).
START = 3.0 * (int(time.time()) // 3) - 119.0
SECONDS = range(-10, 26)


def plan(hosts: dict, version: int):
    """A plan of ``hosts`` (name -> (1-in-N, {receiver: share})), valid around now."""
    return parse_plan(json.dumps(plan_document(hosts, version=version)).encode())


def load_estimator(tree: str | Path | None):
    """``Estimator`` of the working tree (None) or of ``tree`` (its whole package loaded under
    another name, so the old estimator runs with its own decoder; it is handed this tree's
    attribution tables)."""
    if tree is None:
        from cosample.collector.estimate import Estimator

        return Estimator
    package = load_package(tree, Path(tempfile.mkdtemp(prefix="cosample-planchange-")))
    return importlib.import_module(f"{package}.collector.estimate").Estimator


def trace(
    estimator_class,
    before,
    after,
    seed: int,
    lag_s: float,
    ahead: tuple[Path, dict, dict, float] | None = None,
) -> dict[int, dict]:
    """Per second after the change: {server: (estimate pps, low, high)}.

    ``ahead``: (plan file, hosts before, hosts after, lead): the collector follows the plans
    with ``PlanWatcher`` (the new plan published ``lead`` s before its ``not_before`` at the
    change), and the agents apply it at ``max(lag, 0)``."""
    from cosample.collector.attribution import build
    from cosample.lab.sflowstream import plan_change

    agents_s = max(lag_s, 0.0) if ahead else lag_s
    stream = plan_change(
        before,
        after,
        RATES,
        change_s=SEEN_S + agents_s,
        duration_s=SEEN_S + 30,
        start=START,
        seed=seed,
    )
    follow = _follower(*ahead) if ahead else None
    estimator = estimator_class(build(before), window_s=WINDOW_S)
    new = build(after)
    out, k, datagrams = {}, 0, stream.datagrams
    seen = False
    for second in range(int(SEEN_S) + SECONDS.start, int(SEEN_S) + SECONDS.stop):
        now = START + second
        while k < len(datagrams) and datagrams[k][0] <= now:
            if follow is not None:
                follow(estimator, datagrams[k][0])
            elif not seen and datagrams[k][0] >= START + SEEN_S:
                _switch(estimator, new, START + SEEN_S)
                seen = True
            estimator.ingest(datagrams[k][1], datagrams[k][0])
            k += 1
        if follow is not None:
            follow(estimator, now)
        elif not seen and now >= START + SEEN_S:
            _switch(estimator, new, START + SEEN_S)
            seen = True
        snapshot = estimator.snapshot(now)
        out[second - int(SEEN_S)] = {
            name: (e.packets_per_s, *e.packets_per_s_ci95) for name, e in snapshot.servers.items()
        }
    return out


def _follower(path: Path, before: dict, after: dict, lead_s: float):
    """``follow(estimator, now)``: the collector's plan handling up to ``now`` (the service's
    order: ``due`` before every datagram, a poll every second)."""
    from cosample.collector.planwatch import PlanWatcher

    def utc(unix: float) -> datetime:
        return datetime.fromtimestamp(unix, timezone.utc)

    not_before = START + SEEN_S
    path.write_text(json.dumps(plan_document(before, version=1)))
    watcher = PlanWatcher(str(path), insecure_unsigned=True)  # its own unsigned files
    watcher.poll(utc(START))
    state = {"published": False, "poll": START + 0.5}

    def apply(estimator, update, now: float) -> None:
        if update is not None:
            _switch(estimator, update.attribution, update.at.timestamp() if update.at else now)

    def follow(estimator, now: float) -> None:
        if not state["published"] and now >= not_before - lead_s:
            path.write_text(json.dumps(plan_document(after, version=2, not_before=utc(not_before))))
            state["published"] = True
        while state["poll"] <= now:
            apply(estimator, watcher.poll(utc(state["poll"])), state["poll"])
            state["poll"] += 1.0
        apply(estimator, watcher.due(utc(now)), now)

    return follow


def _switch(estimator, attribution, at: float) -> None:
    try:
        estimator.set_attribution(attribution, at)
    except TypeError:  # the baseline takes no time
        estimator.set_attribution(attribution)


def run(
    seeds: int, lag_s: float, baseline: str | Path, ahead: bool = True, lead_s: float = 3.0
) -> dict:
    estimators = {"old": load_estimator(baseline), "new": load_estimator(None)}
    hosts = {"up": (MEASURE, MIRROR), "down": (MIRROR, MEASURE)}
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for change, (first, second) in hosts.items():
            before, after = plan(first, 1), plan(second, 2)
            for label, estimator_class in estimators.items():
                errors = {t: {s: 0.0 for s in RATES} for t in SECONDS}
                covered = {s: 0 for s in RATES}
                follow = (
                    (Path(folder) / "plan.json", first, second, lead_s)
                    if ahead and label == "new"
                    else None
                )
                for seed in range(seeds):
                    for t, row in trace(
                        estimator_class, before, after, seed, lag_s, follow
                    ).items():
                        for server, (pps, low, high) in row.items():
                            truth = RATES[server]
                            errors[t][server] += (pps / truth - 1) / seeds
                            if 0 <= t <= WINDOW_S:
                                covered[server] += low <= truth <= high
                total = seeds * sum(1 for t in SECONDS if 0 <= t <= WINDOW_S)
                results[(change, label)] = (errors, {s: n / total for s, n in covered.items()})
    return results


def report(
    results: dict,
    seeds: int,
    lag_s: float,
    baseline: str | Path,
    ahead: bool = True,
    lead_s: float = 3.0,
) -> str:
    new = (
        f"new = working tree, plan read {lead_s:g} s ahead, switched at its not_before (0 s), "
        f"agents at {max(lag_s, 0.0):g} s"
        if ahead
        else f"new = working tree, switched when read (0 s), agents at {lag_s:g} s"
    )
    lines = [
        f"mean estimate/truth - 1 over {seeds} seeds; window {WINDOW_S:g} s; "
        f"old = {Path(baseline).name}, "
        f"switched when read (0 s), agents at {lag_s:g} s; {new}"
    ]
    for change in ("up", "down"):
        lines.append(
            f"\n{change}: "
            + (
                "1-in-128 everywhere -> s1 1-in-8 + 50 % mirror to s3 (1-in-1)"
                if change == "up"
                else "the reverse"
            )
        )
        lines.append(
            f"{'t (s)':>6} "
            + " ".join(f"{label + ' ' + s:>9}" for label in ("old", "new") for s in RATES)
        )
        old, new = results[(change, "old")][0], results[(change, "new")][0]
        for t in SECONDS:
            lines.append(
                f"{t:>6} "
                + " ".join(f"{errors[t][s]:>+9.1%}" for errors in (old, new) for s in RATES)
            )
        for label in ("old", "new"):
            errors, coverage = results[(change, label)]
            worst = max((abs(errors[t][s]), t, s) for t in SECONDS if t >= 0 for s in RATES)
            lines.append(
                f"{label}: largest |mean error| after the change {worst[0]:.1%} "
                f"({worst[2]} at {worst[1]} s); 95 % intervals cover the nominal rate "
                f"in the window after the change: "
                + ", ".join(f"{s} {share:.0%}" for s, share in coverage.items())
            )
    return "\n".join(lines)


def ingest_cost(baseline: str | Path, rounds: int = 5) -> str:
    """CPU seconds per million samples of ``ingest``, old and new alternating on one stream."""
    import time

    from cosample.collector.attribution import build
    from cosample.lab.sflowstream import plan_change

    before, after = plan(MEASURE, 1), plan(MIRROR, 2)
    stream = plan_change(
        after,
        after,
        {s: r * 10 for s, r in RATES.items()},
        change_s=0.0,
        duration_s=30.0,
        start=START,
        seed=0,
    )
    samples = stream.samples
    cost = {"old": [], "new": []}
    classes = {"old": load_estimator(baseline), "new": load_estimator(None)}
    for _ in range(rounds):
        for label, estimator_class in classes.items():
            estimator = estimator_class(build(before), window_s=WINDOW_S)
            _switch(estimator, build(after), START)
            began = time.process_time()
            for when, data in stream.datagrams:
                estimator.ingest(data, when)
            cost[label].append((time.process_time() - began) / samples * 1e6)
    old, new = (sorted(cost[label])[rounds // 2] for label in ("old", "new"))
    return (
        f"ingest, {samples} samples, median of {rounds} alternating rounds: old {old:.2f} s, "
        f"new {new:.2f} s CPU per million samples (new/old {new / old:.3f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--lag",
        type=float,
        default=2.0,
        help="agents' lag after the collector saw the plan, s (default 2)",
    )
    parser.add_argument(
        "--baseline-tree",
        metavar="DIR",
        required=True,
        help="the old revision, laid out by `python -m research.revision REV DIR`",
    )
    parser.add_argument(
        "--ahead",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="new side: plans ahead of time (not_before, the watcher); "
        "--no-ahead: switched when read, like the old side",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=3.0,
        help="new side: the plan is published this long before its not_before "
        "(default 3, the testbed's)",
    )
    parser.add_argument(
        "--ingest-cost", action="store_true", help="also time ingest, old and new side by side"
    )
    args = parser.parse_args(argv)
    try:
        checked(args.baseline_tree)
    except ExperimentError as exc:
        parser.error(str(exc))
    if args.ingest_cost:
        print(ingest_cost(args.baseline_tree))
    print(
        report(
            run(args.seeds, args.lag, args.baseline_tree, args.ahead, args.lead),
            args.seeds,
            args.lag,
            args.baseline_tree,
            args.ahead,
            args.lead,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
