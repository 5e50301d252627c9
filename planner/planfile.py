"""The plan file's content: a solution as the document agents apply (format in
docs/formats.md), its summary, host table and per-host report; its bytes are ``planbytes``'s."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import orjson

from cosample.plan.formats import FORMAT_VERSION, PLAN_FORMAT, REPORT_FORMAT
from cosample.plan.hostfields import AGENT_FIELDS as AGENT_FIELDS
from cosample.plan.hostfields import SAMPLE_FIELDS as SAMPLE_FIELDS
from cosample.planner import hostjson, hostlists, jsonpieces, stated
from cosample.planner.applied import Realised
from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import PlannerError
from cosample.planner.extras import ExtraColumns
from cosample.planner.planbytes import HostTable, plan_id
from cosample.planner.report import MAX_ROWS
from cosample.planner.rounding import rounding_summary
from cosample.planner.solution import Solution
from cosample.times import format_time

# AGENT_FIELDS: the host fields agents and collectors read (beside the description's extras),
# the fields build_plan writes below; the others are the per-host report: the inputs as planned,
# the predicted cost and the continuous optimum. SAMPLE_FIELDS: the ``sample`` local mechanism's
# (written only when some server may use it). Both declared in cosample.plan.hostfields and
# re-exported here under the planner's name (tests hold build_plan to them).
DEFAULT_VALIDITY = timedelta(hours=6)


def build_plan(
    dc: DataCentre,
    solution: Solution,
    *,
    created: datetime | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
    version: int | None = None,
    point_estimate: Solution | None = None,
    floor: int | None = None,
    lazy_hosts: bool = False,
    report: bool = True,
) -> dict[str, Any]:
    """The plan document for ``solution`` (rates rounded for sFlow, loads predicted).

    ``point_estimate``: for a robust plan, the same plan made with the point estimates, whose
    collected volume the summary states beside the robust one. ``floor``: every host that would
    sample nothing samples 1-in-``floor`` instead (the controller's sampling floor: traffic that
    starts anywhere is seen); predicted loads and the summary are the plan's without it.
    With services in the description, each host also gets its ``appmon`` entries and the
    summary an ``appmon`` part (``planner.appmon_plan``: planned after the applied sFlow plan).
    ``lazy_hosts``: ``plan["hosts"]`` is a ``HostTable`` (the serialised table, parsed on first
    lookup) instead of a dict: the controller publishes the bytes and rarely reads an entry.
    ``report=False``: the hosts carry only ``AGENT_FIELDS`` (and the description's extras), what
    agents and collectors read; the rest of each entry is ``host_report``'s, in columns.
    """
    created = (
        (created or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    )
    problem = solution.problem
    if problem.dc is not dc and problem.dc.names != dc.names:
        raise PlannerError("build_plan: the solution was planned for another data centre")
    applied = solution.applied  # the solution's own: computed once, never here
    appmon = None
    if dc.services:  # the application part, after the applied sFlow plan (planner.appmon_plan)
        # it solves with scipy's MILP (a second to import): only with services
        from cosample.planner import appmon_plan

        appmon_solution, services = appmon_plan.plan_appmon(problem, applied)
        appmon = [
            orjson.dumps(host, option=orjson.OPT_SORT_KEYS)
            for host in appmon_plan.host_entries(dc, appmon_solution, services)
        ]
    roles = _roles(problem, applied)
    hosts = _host_table(problem, applied, floor, report, appmon, roles)  # plan_id hashes it
    plan: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "format_version": FORMAT_VERSION,
        "datacentre": dc.name,
        "sflow": dict(dc.sflow),
        "cost": _cost(problem),
        "solver": {
            "name": solution.solver,
            "lp_backend": solution.lp_backend,
            "variables": solution.variables,
            "seconds": round(solution.seconds, 6),
        },
        "summary": _summary(solution, point_estimate, roles),
        "hosts": hosts if lazy_hosts else hosts.parsed(),
    }
    if dc.ipfix is not None or applied.sample_probability is not None:
        plan["ipfix"] = dict(dc.ipfix or {})  # only then: plans without it stay byte-identical
    if appmon is not None:
        plan["summary"]["appmon"] = appmon_plan.summary(
            problem, applied, appmon_solution, services, _num
        )
    plan["plan_id"] = plan_id({**plan, "hosts": hosts})
    plan["version"] = int(created.timestamp()) if version is None else int(version)
    plan["created"] = format_time(created)
    plan["expires"] = format_time(created + valid_for)
    return plan


def _summary(
    solution: Solution, point_estimate: Solution | None, roles: np.ndarray
) -> dict[str, Any]:
    """What the solution carries (its applied plan, baseline and continuous optimum), stated
    (``roles``: each host's, ``_roles``)."""
    problem = solution.problem
    applied, baseline = solution.applied, stated.baseline_pps(solution)
    total = float(problem.own_pps.sum())
    collected = applied.collected_pps
    gain = collected / baseline - 1 if baseline > 0 else 0.0
    bounds = solution.bounds
    summary: dict[str, Any] = {
        "servers": problem.size,
        "own_pps_total": _num(total),
        "collected_pps": _num(collected),
        "collected_planned_pps": _num(solution.collected_pps),
        "collected_inbound_pps": _num(applied.inbound_distinct_pps),
        "samples_pps": _num(applied.samples_pps),
        "overlap_pps": _num(applied.samples_pps - collected),
        "noncollab_pps": _num(baseline),
        "gain": _num(gain),
        "coverage": _num(collected / total if total > 0 else 1.0),
        "receivers": int(np.count_nonzero(roles == "receiver")),
        "senders": int(np.count_nonzero(roles == "sender")),
        "mirror_pairs": int(np.count_nonzero(applied.mirror_pps > 0)),
        "max_capacity_use": _num(_max_use(problem, applied.load_pps)),
        "objective": {
            "weighted": not problem.uniform_weight or float(problem.weight[0]) != 1.0,
            "planned": _num(solution.objective),
            "bound_lp": _num(bounds.lp),
            "bound_distinct": _num(bounds.envelope),
            "bound_applied": None if bounds.applied is None else _num(bounds.applied),
            "gap": _num(solution.gap),
            "optimal": bool(solution.optimal),
            "method": bounds.method,
        },
        "assumptions": {
            "margin": _num(float(problem.margin.max())) if problem.uniform_margin else "per server",
            "robust": problem.robust,
            "collector_cap_pps": (
                _num(problem.collector_cap_pps) if np.isfinite(problem.collector_cap_pps) else None
            ),
        },
        "rounding": rounding_summary(solution, _num),
        "notes": list(problem.notes),
    }
    if applied.sample_probability is not None:  # some server may use the sample action
        can_sample = problem.can_sample
        assert can_sample is not None  # (the sample action is planned only where it may run)
        sampled = int(np.count_nonzero(applied.sample_probability > 0))
        summary["local_mechanisms"] = {
            "sample": sampled,
            "sflow": int(np.count_nonzero(applied.sflow_sampling > 0)),
            "off": problem.size - sampled - int(np.count_nonzero(applied.sflow_sampling > 0)),
            "may_sample": int(np.count_nonzero(can_sample)),
        }
    guard = _guard_summary(problem.dc, applied)
    if guard is not None:  # only when the description gives floors: other plans byte-identical
        summary["guard"] = guard
    if point_estimate is not None:
        summary["assumptions"]["point_estimate_collected_pps"] = _num(
            point_estimate.applied.collected_pps
        )
    return summary


def _guard_summary(dc: DataCentre, applied: Realised) -> dict[str, Any] | None:
    """The floors the description set (``servers[].guard``, handed to the hosts' entries):
    how many servers have one, the range of each field, and how many of them have no room
    (their floor is no sparser than their plan's 1-in-N and they mirror nothing)."""
    extras = dc.server_extras
    if isinstance(extras, ExtraColumns):
        column = extras.columns.get("guard") or [None] * len(dc.names)
    else:
        column = [(extras.get(name) or {}).get("guard") for name in dc.names]
    given = [k for k, entry in enumerate(column) if entry is not None]
    if not given:
        return None
    sampling = applied.sflow_sampling
    mirroring = np.bincount(applied.mirror_src[applied.mirror_pps > 0], minlength=len(dc.names))
    no_room = sum(
        1 for k in given if column[k]["floor_sampling"] <= int(sampling[k]) and not mirroring[k]
    )

    def span(key: str) -> list[float]:
        values = [column[k][key] for k in given]
        return [_num(min(values)), _num(max(values))]

    return {
        "servers": len(given),
        "floor_sampling": [int(v) for v in span("floor_sampling")],
        "floor_mirror_share": span("floor_mirror_share"),
        "limit": span("limit"),
        "no_room": no_room,
    }


def _roles(problem, applied: Realised) -> np.ndarray:
    """sender (mirrors a share of its own traffic; it may also take copies), receiver (takes
    copies and mirrors nothing, or samples its bridge 1-in-1 and could take them), or idle
    (samples, mirrors and takes nothing)."""
    received = np.bincount(applied.mirror_dst, weights=applied.mirror_pps, minlength=problem.size)
    sent = np.bincount(applied.mirror_src, weights=applied.mirror_pps, minlength=problem.size)
    full = applied.local_rate >= 1.0
    receiving = (received > 0) | problem.receiver & full
    roles = np.where(receiving & (sent <= 0), "receiver", "sender")
    nothing = (applied.sflow_sampling == 0) & (received <= 0) & (sent <= 0)
    return np.where(nothing & ((problem.own_pps == 0) | problem.receiver), "idle", roles)


def _host_table(
    problem,
    applied: Realised,
    floor: int | None,
    report: bool,
    appmon: list[bytes] | None,
    roles: np.ndarray,
) -> HostTable:
    """Every host's entry as compact sorted JSON, built from whole columns (``hostjson``: no
    per-host dicts): the numbers rounded at once (``significant``), each column serialised
    once, mirror and receive lists grouped by one sort. ``report``: with the report's fields;
    ``roles``: each host's (``_roles``, computed once for the table and the summary)."""
    dc = problem.dc
    names = dc.names
    own = problem.own_pps
    interval = applied.sflow_sampling.astype(np.int64)
    local = applied.local_rate
    probability = applied.sample_probability
    if floor:  # hosts that would sample nothing sample 1-in-floor (their loads stay as planned)
        off = (interval == 0) if probability is None else (interval == 0) & (probability == 0)
        interval = np.where(off, floor, interval)
        local = np.where(off, 1.0 / floor, local)
    quoted = np.array([jsonpieces.value(role) for role in ("receiver", "sender", "idle")])
    fields: dict[str, Any] = {
        "local_rate": significant(local, names, "local_rate"),
        "sflow_sampling": hostjson.Nullable(interval, interval > 0),
        "role": quoted[(roles == "sender") + 2 * (roles == "idle")],
    }  # each row's JSON
    if probability is not None:  # only when a server may use it: other plans byte-identical
        sample = probability > 0
        fields["local_mechanism"] = np.where(
            sample, jsonpieces.value("sample"), jsonpieces.value("sflow")
        )
        fields["sample_probability"] = hostjson.Nullable(probability, sample)
        fields["observation_domain"] = hostjson.Nullable(problem.observation_domain, sample)
    known = hostjson.named(names)  # sorted and quoted once (kept for the next plan)
    rank = known.rank
    n = len(names)
    quoted_names = known.quoted if known.narrow is None else known.narrow
    src, dst, pps = applied.mirror_src, applied.mirror_dst, applied.mirror_pps
    sent = pps > 0
    src, dst, pps = src[sent], dst[sent], pps[sent]
    rate = significant(pps / own[src], None, "mirrors.rate")
    if jsonpieces.compiled is None:  # written once for both lists (never None: a number is short)
        written = jsonpieces.fixed(jsonpieces.numbers(rate.tolist()))
        rate = rate if written is None else written
    fields["mirrors"] = hostlists.grouped(
        src, rank[dst], {"to": hostlists.Lookup(quoted_names, dst), "rate": rate}, n, rank=rank
    )
    fields["receives"] = hostlists.grouped(
        dst,
        rank[src],
        {
            "from": hostlists.Lookup(quoted_names, src),
            "rate": rate,
            "pps": significant(pps, None, "receives.pps"),
        },
        n,
        rank=rank,
    )
    if appmon is not None:  # only with services: plans without them stay byte-identical
        fields["appmon"] = appmon
    if report:
        fields.update(_report_columns(problem, applied))
        src, dst, rate = _planned_mirrors(problem, applied)
        fields["planned"] = {
            "local_rate": significant(applied.planned_rate, names, "planned_rate"),
            "mirrors": hostlists.grouped(
                src,
                rank[dst],
                {"to": hostlists.Lookup(quoted_names, dst), "rate": rate},
                n,
                rank=rank,
            ),
        }
    extras = dc.server_extras
    if isinstance(extras, ExtraColumns):  # a field every server gives is one more column
        complete = extras.complete()
        fields.update((key, hostjson.values(column)) for key, column in complete.items())
        extras = extras.without(complete) if len(complete) < len(extras.columns) else {}
    chunks = hostjson.table(names, fields, extras)
    busiest = None
    if report:  # highest capacity use first, name order among equals (a stable sort)
        order = np.lexsort((rank, -fields["capacity_use"]))[:MAX_ROWS].tolist()
        shown = hostjson.table([names[i] for i in order], hostjson.subset(fields, order), extras)
        entries = orjson.loads(b"".join(shown))
        busiest = {names[i]: entries[names[i]] for i in order}
    return HostTable(chunks, busiest)


def host_report(solution: Solution, plan: Mapping[str, Any]) -> bytes:
    """The per-host fields a plan built with ``build_plan(report=False)`` leaves out, as
    columns (compact JSON, sorted keys; docs/formats.md, "Plan report"): the same rounded
    numbers its entries would carry, each field one list in the order of ``names``, and the
    continuous optimum's mirrors as three lists of pairs. ``plan`` (its ``plan_id`` and
    ``version``) is the plan the report belongs to."""
    problem = solution.problem
    applied = solution.applied
    names = problem.dc.names
    src, dst, rate = _planned_mirrors(problem, applied)
    known = hostjson.named(names)  # as the plan's table quoted them
    document = {
        "format": REPORT_FORMAT,
        "format_version": FORMAT_VERSION,
        "plan_id": plan["plan_id"],
        "version": plan["version"],
        "names": orjson.Fragment(b"[" + b",".join(known.quoted) + b"]"),  # quoted once
        **_report_columns(problem, applied),
        "planned": {
            "local_rate": significant(applied.planned_rate, names, "planned_rate"),
            "mirrors": {
                "from": hostjson.peers(known, src),
                "to": hostjson.peers(known, dst),
                "rate": rate,
            },
        },
    }
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def _report_columns(problem, applied: Realised) -> dict[str, np.ndarray]:
    """The report's per-host numbers, rounded (``significant``)."""
    dc = problem.dc
    capacity, load = problem.capacity_pps, applied.load_pps
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(capacity > 0, load / capacity, 0.0)
    return {
        key: significant(values, dc.names, key)
        for key, values in (
            ("capacity_pps", capacity),
            ("margin", problem.margin),
            ("forwarding_pps", dc.forwarding_pps),
            ("own_pps", problem.own_pps),
            ("sampled_pps", problem.bridge_pps),
            ("distinct_pps", applied.distinct_pps),
            ("load_pps", load),
            ("capacity_use", use),
            ("headroom_pps", capacity - load),
            ("alpha", problem.alpha),
            ("beta", problem.beta),
            ("weight", problem.weight),
        )
    }


def _planned_mirrors(problem, applied: Realised) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The continuous optimum's mirror pairs: sender, receiver and rounded rate."""
    src, dst, pps = applied.mirror_src, applied.mirror_dst, applied.planned_mirror_pps
    planned = pps > 0
    src, dst, pps = src[planned], dst[planned], pps[planned]
    return src, dst, significant(pps / problem.own_pps[src], None, "planned.mirrors.rate")


def significant(
    values: np.ndarray, names: tuple[str, ...] | None, field: str, digits: int = 12
) -> np.ndarray:
    """``float(f"{v:.12g}")`` for a whole array, bit for bit (property-tested against it): the
    plan's numbers, stable across platforms and exact enough. A non-finite value is a
    ``PlannerError`` naming the host (``names``) and the field.

    Scaling by a power of ten (exact in a double up to 10**22, taken from a table) and rounding
    once gives the correctly rounded decimal except when the scaled value lies within 1e-3 of a
    half (its own rounding error is below 1.3e-4) or the decade was misjudged; those few take the
    string path. Zeros (either sign) are kept as they are.
    """
    x = np.ascontiguousarray(values, dtype=float)
    if not np.isfinite(x).all():
        k = int(np.flatnonzero(~np.isfinite(x))[0])
        where = f"hosts.{names[k]}.{field}" if names is not None else field
        raise PlannerError(f"{where}: not a finite number ({float(x[k])!r})")
    bits = x.view(np.int64)
    if x.size > 1 and bool((bits == bits[0]).all()):  # one value throughout (alpha, margin..)
        return np.full_like(x, significant(x[:1], None, field, digits)[0])
    a = np.abs(x)
    zeros = np.flatnonzero(a == 0)
    a[zeros] = 1.0  # any nonzero: put back below
    shift = (digits - 1) - np.floor(np.log10(a)).astype(np.int64)
    magnitude = np.abs(shift)
    power = _POWERS_OF_TEN.take(np.minimum(magnitude, _EXACT_POWERS))
    up = shift >= 0
    scaled = np.where(up, a * power, a / power)
    whole = np.rint(scaled)
    result = np.where(up, whole / power, whole * power)
    doubtful = (
        (magnitude > _EXACT_POWERS)
        | (np.abs(scaled - whole) > 0.5 - 1e-3)
        | (whole < 10.0 ** (digits - 1))
        | (whole >= 10.0**digits)
    )
    for k in np.flatnonzero(doubtful).tolist():
        result[k] = float(f"{a[k]:.{digits}g}")
    out = np.copysign(result, x, out=result)
    out[zeros] = x[zeros]
    return out


#: 10**k for k up to 22, each exact in a double (``significant``: a look-up, not ``np.power``).
_EXACT_POWERS = 22
_POWERS_OF_TEN = np.array([10.0**k for k in range(_EXACT_POWERS + 1)])


def _cost(problem) -> dict[str, Any]:
    """The coefficients planned with (the intervals' upper ends when robust)."""
    alpha, beta = problem.alpha, problem.beta
    if np.all(alpha == alpha[0]) and np.all(beta == beta[0]):
        return {"alpha": _num(alpha[0]), "beta": _num(beta[0])}
    return {"per_server": True}


def _max_use(problem, load: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(problem.capacity_pps > 0, load / problem.capacity_pps, 0.0)
    return float(use.max()) if use.size else 0.0


def _num(value: float) -> float:
    """A JSON number rounded to 12 significant digits: stable across platforms, exact enough."""
    value = float(value)
    if not math.isfinite(value):
        raise PlannerError(f"summary: not a finite number ({value!r})")
    return float(f"{value:.12g}")
