"""The estimator's state, declared once for its three parts (annotations only: no behaviour).

``estimate.Estimator`` is the fast path for sFlow; ``combine.Estimates`` (the normal path) and
``ipfixingest.IpfixIngest`` (the fast path for IPFIX) are its halves, which work on the state
``Estimator.__init__`` sets (its comments say what each part is). The halves derive from
``EstimatorState`` so that the type checker knows that state where they use it.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from cosample.collector.attribution import Attribution
from cosample.collector.declared import Declared
from cosample.collector.exposure import Streams
from cosample.collector.guardstate import GuardBook
from cosample.collector.loss import LossTracker
from cosample.collector.ports import PortRates
from cosample.collector.unknown import UnknownAgents

#: A bucket: its number, (server, agent, kind, destination) -> the stream's sums, and agent ->
#: the samples received from it in the bucket.
Bucket = tuple[int, dict[tuple, list], dict[str, int]]


class EstimatorState:
    """What ``Estimator.__init__`` sets, and the methods each half calls on the other."""

    attribution: Attribution | None
    partial: bool
    window_s: float | None
    name: str
    dropped: Counter[str]
    ignored: Counter[str]
    datagrams: int
    samples: int
    rate_of: dict[str, int]
    bucket_s: float
    _buckets: deque[Bucket]
    loss: LossTracker
    _lost: dict[int, dict[str, float]]
    unknown: UnknownAgents
    discards: dict[str, dict[str, int]]
    ports: PortRates
    _last: dict[str, float]
    declared: Declared
    _first: float | None
    _now: float | None
    streams: Streams
    guards: GuardBook
    # methods of ``Estimator`` the halves call
    _tick: Callable[[float], None]
    _expire: Callable[[int], None]
    _running_q: Callable[[str], float]
