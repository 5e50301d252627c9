"""Where each monitored service is analysed, and what share of its connections (docs/planner.md,
"Application monitoring").

Per service the choice is the on-site sniffer (analysis on the server's own host: ``onsite`` CPU
per request there) or a selective mirror, truncated if the service says so, to an analysis host
(``mirror_sender`` per request on the server's host, ``analyser`` on the analysis host,
``mirror_bytes`` on the fabric). Costs are in units of forwarding one packet, the sFlow plan's
unit, so both draw on one capacity. The sFlow plan comes first (a lexicographic order: the
application part plans within what the applied sFlow plan leaves, ``residual``), and the
application part alone is solved here:

* ``solve_onsite``: no collaboration; per host a fractional knapsack with lower bounds (minimum
  shares first, then services by weight per unit of CPU), exact.
* ``solve_milp``: one mechanism and one analysis host per service (binaries), a share of its
  connections in [min_share, 1], host capacities, mirror byte caps and a budget of analysis
  hosts; HiGHS through scipy. Its LP relaxation (``relaxed=True``: a service's share may be
  split across hosts) is the bound the plan reports, with the gap.
* ``solve_greedy``: for fleets too large for the MILP: services by weight per packet, each to the
  option that monitors the largest share of it; bounded by the same LP, or by "everything
  monitored" where even the LP is too large.

Pure: arrays in, ``AppmonPlan`` out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cosample.planner.errors import ShareInfeasibleError, SolverError

#: The seeds' comparison (docs/results/appmon.md, docs/data/appmon/body4000, medians of 3 rounds, µs of
#: CPU per request): ovs-vswitchd forwarding unmonitored, forwarding with a selective mirror,
#: the analyser on-site, the analyser behind a selective mirror; and frames and bytes per request
#: reaching the analysis node (port mirror: every packet of the port; selective; truncated).
MEASURED_US = {
    "forwarding": 77.33,
    "forwarding_mirrored": 98.08,
    "onsite": 83.16,
    "analyser": 55.79,
}
MEASURED_PACKETS_PER_REQUEST = 4.88
MEASURED_BYTES = {"mirror_bytes": 1479.3, "truncated_bytes": 256.6}
_US_PER_PACKET = MEASURED_US["forwarding"] / MEASURED_PACKETS_PER_REQUEST
#: Default costs, per request in packets forwarded (CPU) and bytes (fabric).
DEFAULT_COSTS = {
    "onsite": MEASURED_US["onsite"] / _US_PER_PACKET,
    "mirror_sender": (MEASURED_US["forwarding_mirrored"] - MEASURED_US["forwarding"])
    / _US_PER_PACKET,
    "analyser": MEASURED_US["analyser"] / _US_PER_PACKET,
    **MEASURED_BYTES,
}
#: Above this many (service, option) pairs the MILP gives way to the greedy method, and above
#: ``LP_LIMIT`` the bound is "everything monitored".
MILP_LIMIT = 20_000
LP_LIMIT = 400_000
#: A mirrored request counts this much less than one analysed on its own host, so that of plans
#: monitoring the same requests the MILP picks the one without fabric traffic and analysis
#: hosts: a service goes back on-site when its host has room again (far above HiGHS's relative
#: gap of 1e-6, far below any gain the controller acts on).
ON_SITE_TIE = 1e-5
ONSITE = -1  # ``to`` of a service analysed on its own host
NONE = -2  # ``to`` of a service not monitored


@dataclass(frozen=True)
class Services:
    """The services as arrays (index j), with their per-request costs already scaled."""

    host: np.ndarray  # server index
    rate: np.ndarray  # requests/s
    packets: np.ndarray  # packets per request
    weight: np.ndarray
    min_share: np.ndarray
    onsite_ok: np.ndarray  # bool: the sniffer can listen (interface known)
    bytes_per_request: np.ndarray
    #: per service, the sender's CPU per mirrored request (its mirror mechanism's cost, e.g.
    #: ``kernel_mirror_sender``); None: ``costs["mirror_sender"]`` for every service
    sender_cost: np.ndarray | None = None
    #: per service, the on-site sniffer's and the analysis host's CPU per request (a protocol's
    #: ``PROTOCOL_FACTORS`` applied); None: ``costs["onsite"]``, ``costs["analyser"]`` for all
    onsite_cost: np.ndarray | None = None
    analyser_cost: np.ndarray | None = None

    def sender(self, costs: dict) -> np.ndarray:
        """The sender's CPU per mirrored request of each service."""
        if self.sender_cost is not None:
            return self.sender_cost
        return np.full(self.size, costs["mirror_sender"])

    def onsite(self, costs: dict) -> np.ndarray:
        """The on-site sniffer's CPU per request of each service."""
        if self.onsite_cost is not None:
            return self.onsite_cost
        return np.full(self.size, costs["onsite"])

    def analyser(self, costs: dict) -> np.ndarray:
        """The analysis host's CPU per mirrored request of each service."""
        if self.analyser_cost is not None:
            return self.analyser_cost
        return np.full(self.size, costs["analyser"])

    @property
    def size(self) -> int:
        return int(self.host.shape[0])


@dataclass(frozen=True)
class AppmonPlan:
    """``to[j]``: ONSITE, NONE or the analysis host; ``share[j]`` of the connections monitored."""

    to: np.ndarray
    share: np.ndarray
    load: np.ndarray  # per host, packets-forwarded units (application part only)
    mirror_bytes: np.ndarray  # per host, bytes/s sent
    objective: float  # weighted monitored requests/s
    bound: float
    method: str

    @property
    def gap(self) -> float:
        return 0.0 if self.bound <= 0 else max(0.0, 1.0 - self.objective / self.bound)


def _options(svc: Services, n: int, mirrors: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every (service, target) pair: target ONSITE or an analysis host other than its own."""
    js, ks = [np.flatnonzero(svc.onsite_ok)], [np.full(int(svc.onsite_ok.sum()), ONSITE)]
    if mirrors and n > 1:
        j = np.repeat(np.arange(svc.size), n)
        k = np.tile(np.arange(n), svc.size)
        keep = k != svc.host[j]
        js.append(j[keep])
        ks.append(k[keep])
    return np.concatenate(js).astype(np.int64), np.concatenate(ks).astype(np.int64)


def _load_rows(svc: Services, j: np.ndarray, k: np.ndarray, costs: dict, n: int):
    """Per option: (host, load per unit share) entries of the capacity rows, and bytes."""
    volume = svc.rate[j]  # the costs are per request
    onsite = k == ONSITE
    rows = [svc.host[j], np.where(onsite, 0, k)]
    values = [
        volume * np.where(onsite, svc.onsite(costs)[j], svc.sender(costs)[j]),
        np.where(onsite, 0.0, volume * svc.analyser(costs)[j]),
    ]
    sent = np.where(onsite, 0.0, svc.rate[j] * svc.bytes_per_request[j])
    return rows, values, sent


def _evaluate(svc: Services, to: np.ndarray, share: np.ndarray, costs: dict, n: int):
    load = np.zeros(n)
    sent = np.zeros(n)
    used = to != NONE
    j = np.flatnonzero(used)
    rows, values, bytes_ = _load_rows(svc, j, to[j], costs, n)
    for r, v in zip(rows, values):
        np.add.at(load, r, v * share[j])
    np.add.at(sent, svc.host[j], bytes_ * share[j])
    return load, sent, float(np.sum(svc.weight * svc.rate * share))


def loads(
    svc: Services, to: np.ndarray, share: np.ndarray, costs: dict, n: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """A plan's application part under ``svc``'s rates: per host load (packets-forwarded
    units) and mirror bytes/s sent, and the weighted monitored requests/s (the controller
    judges the running plan and the candidate with it)."""
    return _evaluate(svc, to, share, costs, n)


def solve_onsite(svc: Services, residual: np.ndarray, costs: dict) -> AppmonPlan:
    """No collaboration: each host analyses its own services, a fractional knapsack per host
    (exact: minimum shares first, then by weight per unit of CPU)."""
    n = residual.shape[0]
    share = np.zeros(svc.size)
    left = residual.astype(float).copy()
    unit = svc.rate * svc.onsite(costs)
    need = np.where(svc.onsite_ok, svc.min_share * unit, np.where(svc.min_share > 0, np.inf, 0))
    used = np.bincount(svc.host, weights=need, minlength=n)
    if np.any(used > left * (1 + 1e-12) + 1e-9):
        i = int(np.flatnonzero(used > left * (1 + 1e-12) + 1e-9)[0])
        raise ShareInfeasibleError(
            f"services on host {i}: the minimum shares need "
            f"{used[i]:,.0f} pps of CPU on-site, {left[i]:,.0f} left"
        )
    share[:] = np.where(svc.onsite_ok, svc.min_share, 0.0)
    left -= used
    density = np.where(unit > 0, svc.weight * svc.rate / np.where(unit > 0, unit, 1), np.inf)
    for j in np.lexsort((np.arange(svc.size), -density)).tolist():
        if not svc.onsite_ok[j]:
            continue
        h = svc.host[j]
        extra = 1.0 - share[j] if unit[j] == 0 else min(1.0 - share[j], max(left[h], 0) / unit[j])
        share[j] += extra
        left[h] -= extra * unit[j]
    to = np.where(share > 0, ONSITE, NONE)
    load, sent, value = _evaluate(svc, to, share, costs, n)
    return AppmonPlan(to, share, load, sent, value, value, "onsite-knapsack")


def solve_milp(
    svc: Services,
    residual: np.ndarray,
    byte_cap: np.ndarray,
    costs: dict,
    analysis_hosts: int | None = None,
    relaxed: bool = False,
    time_limit: float = 30.0,
) -> AppmonPlan:
    """The MILP (or, ``relaxed``, its LP relaxation, where a share may be split)."""
    # scipy.optimize takes a second to import: only where a MILP is made (every controller
    # process imports this module, through controller.appmeasure, and most make none)
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    n = residual.shape[0]
    j, k = _options(svc, n, mirrors=True)
    m = j.shape[0]
    budget = analysis_hosts is not None
    nz = 0 if relaxed else m
    ny = n if budget else 0
    nv = m + nz + ny
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lo: list[ArrayLike] = []  # each constraint row's bounds
    hi: list[ArrayLike] = []
    row = 0

    def add(r, c, v):
        rows.append(np.asarray(r, dtype=np.int64))
        cols.append(np.asarray(c, dtype=np.int64))
        vals.append(np.asarray(v, dtype=float))

    # min_share_j <= sum of its options' shares <= 1
    add(j, np.arange(m), np.ones(m))
    lo.append(svc.min_share)
    hi.append(np.ones(svc.size))
    row += svc.size
    # capacity per host
    load_rows, load_values, sent = _load_rows(svc, j, k, costs, n)
    for r, v in zip(load_rows, load_values):
        keep = v != 0
        add(row + r[keep], np.arange(m)[keep], v[keep])
    lo.append(np.full(n, -np.inf))
    hi.append(np.maximum(residual, 0.0))
    row += n
    # mirror bytes per sending host
    capped = np.isfinite(byte_cap)
    if capped.any():
        keep = (sent > 0) & capped[svc.host[j]]
        add(row + svc.host[j][keep], np.arange(m)[keep], sent[keep])
        lo.append(np.full(n, -np.inf))
        hi.append(np.where(capped, byte_cap, np.inf))
        row += n
    if not relaxed:  # x <= z, one option per service
        add(row + np.arange(m), np.arange(m), np.ones(m))
        add(row + np.arange(m), m + np.arange(m), -np.ones(m))
        lo.append(np.full(m, -np.inf))
        hi.append(np.zeros(m))
        row += m
        add(row + j, m + np.arange(m), np.ones(m))
        lo.append(np.zeros(svc.size))
        hi.append(np.ones(svc.size))
        row += svc.size
    if budget:  # a mirror to k needs y_k (x itself in the relaxation); sum y <= budget
        mirror = np.flatnonzero(k != ONSITE)
        add(row + np.arange(mirror.size), (m if not relaxed else 0) + mirror, np.ones(mirror.size))
        add(row + np.arange(mirror.size), m + nz + k[mirror], -np.ones(mirror.size))
        lo.append(np.full(mirror.size, -np.inf))
        hi.append(np.zeros(mirror.size))
        row += mirror.size
        add([row] * n, m + nz + np.arange(n), np.ones(n))
        assert analysis_hosts is not None  # (``budget``)
        lo.append([-np.inf])
        hi.append([float(analysis_hosts)])
        row += 1
    matrix = coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, nv)
    ).tocsr()
    objective = np.zeros(nv)
    objective[:m] = -(svc.weight * svc.rate)[j]
    if not relaxed:  # among plans monitoring as much, the one that mirrors least (``ON_SITE_TIE``)
        objective[:m] += ON_SITE_TIE * (svc.weight * svc.rate)[j] * (k != ONSITE)
    integrality = np.zeros(nv)
    if not relaxed:  # in the relaxation every variable is continuous
        integrality[m:] = 1
    result = milp(
        objective,
        constraints=LinearConstraint(matrix, np.concatenate(lo), np.concatenate(hi)),
        integrality=integrality,
        bounds=Bounds(0, 1),
        options={"time_limit": time_limit, "mip_rel_gap": 1e-6},
    )
    if result.x is None:
        if result.status == 2:
            raise ShareInfeasibleError(
                "services: the minimum shares cannot all be monitored "
                "within the hosts' capacities after the sFlow plan"
            )
        raise SolverError(f"appmon {'LP' if relaxed else 'MILP'}: {result.message}")
    x = np.clip(result.x[:m], 0.0, 1.0)
    if relaxed:
        value = float(-result.fun)
        return AppmonPlan(
            np.full(svc.size, NONE),
            np.bincount(j, x, svc.size),
            np.zeros(n),
            np.zeros(n),
            value,
            value,
            "lp",
        )
    chosen = result.x[m : m + nz] > 0.5
    to = np.full(svc.size, NONE)
    share = np.zeros(svc.size)
    to[j[chosen]] = k[chosen]
    share[j[chosen]] = x[chosen]
    unused = share <= 1e-12  # an option picked with nothing monitored is no option
    to[unused], share[unused] = NONE, 0.0
    load, sent_total, value = _evaluate(svc, to, share, costs, n)
    dual = getattr(result, "mip_dual_bound", None)
    bound = float(-dual) if dual is not None and np.isfinite(dual) else value
    return AppmonPlan(to, share, load, sent_total, value, max(bound, value), "milp")


def solve_greedy(
    svc: Services,
    residual: np.ndarray,
    byte_cap: np.ndarray,
    costs: dict,
    analysis_hosts: int | None = None,
) -> AppmonPlan:
    """Services by weight per packet, minimum shares first; each to the option monitoring the
    largest share (on-site on ties). Raises ``ShareInfeasibleError`` if a minimum share is missed."""
    n = residual.shape[0]
    left = np.maximum(residual, 0.0).astype(float)
    bytes_left = byte_cap.astype(float).copy()
    analysers: set[int] = set()
    to = np.full(svc.size, NONE)
    share = np.zeros(svc.size)
    sender, onsite, analyser = svc.sender(costs), svc.onsite(costs), svc.analyser(costs)
    order = np.lexsort((np.arange(svc.size), -svc.weight, -svc.min_share))
    for j in order.tolist():
        h = int(svc.host[j])
        volume = svc.rate[j]  # the costs are per request
        if volume == 0:
            to[j], share[j] = ONSITE if svc.onsite_ok[j] else NONE, float(svc.onsite_ok[j])
            continue
        best, best_share = NONE, 0.0
        if svc.onsite_ok[j]:
            best, best_share = ONSITE, min(1.0, left[h] / (volume * onsite[j]))
        allowed = np.ones(n, dtype=bool)
        allowed[h] = False
        if analysis_hosts is not None and len(analysers) >= analysis_hosts:
            allowed &= np.isin(np.arange(n), list(analysers))
        if allowed.any():
            k = int(np.argmax(np.where(allowed, left, -1.0)))
            cap = min(1.0, left[h] / (volume * sender[j]), left[k] / (volume * analyser[j]))
            sent = svc.rate[j] * svc.bytes_per_request[j]
            if sent > 0 and np.isfinite(bytes_left[h]):
                cap = min(cap, bytes_left[h] / sent)
            if cap > best_share + 1e-12:
                best, best_share = k, cap
        if best_share < svc.min_share[j] - 1e-12:
            raise ShareInfeasibleError(
                f"services[{j}]: the greedy method monitors a share "
                f"{best_share:.3g} below min_share {svc.min_share[j]:g}"
            )
        if best == NONE or best_share <= 0:
            continue
        to[j], share[j] = best, best_share
        if best == ONSITE:
            left[h] -= best_share * volume * onsite[j]
        else:
            left[h] -= best_share * volume * sender[j]
            left[best] -= best_share * volume * analyser[j]
            bytes_left[h] -= best_share * svc.rate[j] * svc.bytes_per_request[j]
            analysers.add(best)
    load, sent_total, value = _evaluate(svc, to, share, costs, n)
    return AppmonPlan(to, share, load, sent_total, value, value, "greedy")


def plan_continuous(
    svc: Services,
    residual: np.ndarray,
    byte_cap: np.ndarray,
    costs: dict,
    analysis_hosts: int | None = None,
) -> AppmonPlan:
    """The MILP for small fleets, else the greedy method; bound from the LP relaxation (or
    everything monitored above ``LP_LIMIT`` pairs) and reported through ``AppmonPlan.gap``;
    the shares continuous (``appmon_residues.plan_services`` makes them whole client-port
    residues, as the agents apply them)."""
    n = residual.shape[0]
    pairs = svc.size * n
    if pairs <= MILP_LIMIT:
        plan = solve_milp(svc, residual, byte_cap, costs, analysis_hosts)
    else:
        plan = solve_greedy(svc, residual, byte_cap, costs, analysis_hosts)
    if pairs <= LP_LIMIT:
        bound = solve_milp(svc, residual, byte_cap, costs, analysis_hosts, relaxed=True).objective
    else:
        bound = float(np.sum(svc.weight * svc.rate))
    bound = min(bound, plan.bound) if plan.method == "milp" else bound
    planned = AppmonPlan(
        plan.to,
        plan.share,
        plan.load,
        plan.mirror_bytes,
        plan.objective,
        max(bound, plan.objective) + 0.0,
        plan.method,
    )  # no -0.0
    return planned
