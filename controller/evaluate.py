"""What a plan does under a given traffic matrix: each server's load and the distinct packets.

The controller judges the running plan and the candidate by the same function, under the same
(smoothed, measured) traffic. A plan's *applied* shares are what the data plane does
(docs/formats.md): ``local_rate`` (``1/sflow_sampling``) and ``mirrors[].rate``, fractions of
the sender's own traffic ``U``. Load, in forwarding-packet units as the planner counts it:
``F + alpha * l * U + beta * m * U + (alpha + beta) * received``; distinct packets collected per
sender: ``U * (l + m - l * m)``, because sFlow and the mirror chain draw independently. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosample.controller.pairkeys import matched
from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE


@dataclass(frozen=True)
class PlanShares:
    """A plan's applied shares as arrays in inventory order."""

    version: int
    plan_id: str
    local_rate: np.ndarray
    mirror_src: np.ndarray
    mirror_dst: np.ndarray
    mirror_rate: np.ndarray

    def same_as(self, other: "PlanShares", tolerance: float = 1e-9) -> bool:
        """The same shares (a plan file rounds rates to 12 significant digits)."""
        if self.mirror_src.size != other.mirror_src.size or not np.allclose(
            self.local_rate, other.local_rate, rtol=tolerance, atol=0
        ):
            return False
        if np.array_equal(self.mirror_src, other.mirror_src) and np.array_equal(
            self.mirror_dst, other.mirror_dst
        ):  # in the same order: as sorted
            return bool(np.allclose(self.mirror_rate, other.mirror_rate, rtol=tolerance, atol=0))
        mine = np.lexsort((self.mirror_dst, self.mirror_src))
        theirs = np.lexsort((other.mirror_dst, other.mirror_src))
        return (
            np.array_equal(self.mirror_src[mine], other.mirror_src[theirs])
            and np.array_equal(self.mirror_dst[mine], other.mirror_dst[theirs])
            and np.allclose(
                self.mirror_rate[mine], other.mirror_rate[theirs], rtol=tolerance, atol=0
            )
        )


@dataclass(frozen=True)
class Evaluation:
    """A plan under a traffic matrix."""

    load_pps: np.ndarray
    use: np.ndarray  # load / capacity (inf where capacity is 0 and load > 0)
    distinct_pps: float

    def worst(self, names: tuple[str, ...]) -> tuple[str, float]:
        i = int(np.argmax(self.use))
        return names[i], float(self.use[i])


def shares(plan: Mapping[str, Any], index: Mapping[str, int]) -> PlanShares:
    """The applied shares of a plan document; hosts outside ``index`` are ignored."""
    n = len(index)
    local = np.zeros(n)
    src: list[int] = []
    dst: list[int] = []
    rate: list[float] = []
    for name, host in plan["hosts"].items():
        i = index.get(name)
        if i is None:
            continue
        sampling = host.get("sflow_sampling")
        if host.get("local_mechanism") == "sample":  # OVS's sample action: k/65535, no sFlow
            local[i] = host["sample_probability"] / SAMPLE_PROBABILITY_SCALE
        else:
            local[i] = 1.0 / sampling if sampling else 0.0
        for mirror in host.get("mirrors", ()):
            k = index.get(mirror["to"])
            if k is not None:
                src.append(i)
                dst.append(k)
                rate.append(float(mirror["rate"]))
    return PlanShares(
        int(plan["version"]),
        str(plan["plan_id"]),
        local,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(rate, dtype=float),
    )


def _pair_rates(plan: PlanShares, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Each mirror pair once, as the key ``src * span + dst`` (sorted) and its rate; a pair
    listed twice keeps its last rate (as a dict of the pairs would)."""
    keys = plan.mirror_src.astype(np.int64) * span + plan.mirror_dst
    if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):  # as plans list them: no sort
        return keys, plan.mirror_rate
    order = np.argsort(keys, kind="stable")
    keys, rates = keys[order], plan.mirror_rate[order]
    last = np.append(keys[1:] != keys[:-1], True) if keys.size else np.zeros(0, dtype=bool)
    return keys[last], rates[last]


def evaluate(
    plan: PlanShares,
    own_pps: np.ndarray,
    forwarding_pps: np.ndarray,
    capacity_pps: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
) -> Evaluation:
    """Loads and distinct packets of ``plan`` when servers send ``own_pps``."""
    n = own_pps.size
    mirrored = plan.mirror_rate * own_pps[plan.mirror_src]
    out = np.bincount(plan.mirror_src, weights=mirrored, minlength=n)
    received = np.bincount(plan.mirror_dst, weights=mirrored, minlength=n)
    sampled = plan.local_rate * own_pps
    load = forwarding_pps + alpha * sampled + beta * out + (alpha + beta) * received
    with np.errstate(divide="ignore", invalid="ignore"):
        use = np.where(capacity_pps > 0, load / capacity_pps, np.where(load > 0, np.inf, 0.0))
        share = np.where(own_pps > 0, out / own_pps, 0.0)
    distinct = own_pps * (plan.local_rate + share - plan.local_rate * share)
    return Evaluation(load, use, float(distinct.sum()))


def needs_two_phases(old: PlanShares, new: PlanShares) -> bool:
    """Whether applying ``new`` over ``old`` host by host, in any order, can overload a server.

    A server's load is increasing in its own local rate, its own mirror shares and the shares
    mirrored to it. Hosts apply their part at different moments, so any mixture of old and new
    components occurs on the way; a mixture exceeds both the old and the new load only if some
    component affecting that server rises while another falls (e.g. it receives more before it
    has dropped its own sampling). Then the agents' two-phase transition (decreases first) is
    needed; otherwise one phase is safe.
    """
    n = old.local_rate.size
    rises = new.local_rate > old.local_rate
    falls = new.local_rate < old.local_rate
    span = max(
        n,
        1,
        *(
            int(a.max()) + 1
            for a in (old.mirror_src, old.mirror_dst, new.mirror_src, new.mirror_dst)
            if a.size
        ),
    )
    before_keys, before = _pair_rates(old, span)
    after_keys, after = _pair_rates(new, span)
    keys, was, now = matched(before_keys, before, after_keys, after)
    for marks, moved in ((rises, now > was), (falls, now < was)):
        marks[keys[moved] // span] = True  # the sender
        marks[keys[moved] % span] = True  # and the receiver
    return bool(np.any(rises & falls))
