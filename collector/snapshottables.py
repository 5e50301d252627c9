"""The rows and tables of the collector snapshot (``snapshot.Snapshot``): one server's estimate
(``ServerEstimate``), every server's as columns (``ServerTable``), polled port rates
(``InterfaceTable``), the traffic matrix as entries (``TrafficTable``) and the hosts whose guard
backs off (``GuardEntry``); each number checked by pydantic in Rust, the rules across columns by
the snapshot.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, Field, PrivateAttr, model_validator

from cosample.collector.snapshotwire import traffic_columns
from cosample.validation import Strict, UtcTime

Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
ServerName = Annotated[str, Field(min_length=1)]


def _ordered(bounds: list[float]) -> list[float]:
    if bounds[0] > bounds[1]:
        raise ValueError("low bound above high bound")
    return bounds


Interval = Annotated[
    list[Annotated[float, Field(ge=0, allow_inf_nan=False)]],
    Field(min_length=2, max_length=2),
    AfterValidator(_ordered),
]


class PlanRef(Strict):
    """Which plan renormalised the estimates."""

    version: Count
    plan_id: Annotated[str, Field(min_length=1)]


class InterfaceRates(Strict):
    """Packet rates of one OVS port from sFlow generic interface counters (exact, not estimated)."""

    in_pps: Rate
    out_pps: Rate


class ServerEstimate(Strict):
    """One server's traffic as estimated from its own and its mirrored samples (one row of the
    snapshot's ``servers`` table: what the estimator builds and ``servers[name]`` gives back)."""

    packets_per_s: Rate
    packets_per_s_ci95: Interval
    bytes_per_s: Rate
    bytes_per_s_ci95: Interval
    samples: Count
    samples_per_s: Rate
    local_samples: Count
    mirrored_samples: Count
    coverage: Fraction
    last_sample: UtcTime | None = None
    interfaces: dict[str, InterfaceRates] | None = None
    #: Estimated variances of the two rates: what lets partial estimates of one server from
    #: several instances be added exactly (the estimator is a sum over samples).
    packets_per_s_variance: Rate | None = None
    bytes_per_s_variance: Rate | None = None

    @model_validator(mode="after")
    def _counts_add_up(self) -> "ServerEstimate":
        if self.local_samples + self.mirrored_samples != self.samples:
            raise ValueError(
                f"local_samples + mirrored_samples ({self.local_samples} + "
                f"{self.mirrored_samples}) != samples ({self.samples})"
            )
        return self


class ServerTable(Strict):
    """Every server's estimate as columns, row ``k`` being server ``name[k]`` (pydantic checks
    each number in Rust; the snapshot checks lengths and the rules across columns).

    Also a read-only mapping name -> ``ServerEstimate`` for code that wants one server."""

    name: list[ServerName]
    packets_per_s: list[Rate]
    packets_per_s_ci95_low: list[Rate]
    packets_per_s_ci95_high: list[Rate]
    bytes_per_s: list[Rate]
    bytes_per_s_ci95_low: list[Rate]
    bytes_per_s_ci95_high: list[Rate]
    samples: list[Count]
    samples_per_s: list[Rate]
    local_samples: list[Count]
    mirrored_samples: list[Count]
    coverage: list[Fraction]
    #: Seconds between the newest sample attributed to the server and the snapshot's ``time``.
    last_sample_age_s: list[Annotated[float, Field(allow_inf_nan=False)] | None]
    packets_per_s_variance: list[Rate] | None = None
    bytes_per_s_variance: list[Rate] | None = None
    _row_of: dict[str, int] | None = PrivateAttr(default=None)

    def column(self, key: str):
        """One column as a float numpy array (the controller's arithmetic; numpy is imported
        here, not with the module: ``collector replay`` never needs it)."""
        import numpy as np  # see above

        return np.asarray(getattr(self, key), dtype=float)

    def __len__(self) -> int:
        return len(self.name)

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping of servers
        return iter(self.name)

    def __contains__(self, name: object) -> bool:
        return name in self._rows()

    def keys(self) -> list[str]:
        return list(self.name)

    def __getitem__(self, name: str) -> ServerEstimate:
        return self.row(self._rows()[name])

    def items(self) -> Iterator[tuple[str, ServerEstimate]]:
        return ((name, self.row(k)) for k, name in enumerate(self.name))

    def values(self) -> Iterator[ServerEstimate]:
        return (self.row(k) for k in range(len(self.name)))

    def row(
        self,
        k: int,
        time: datetime | None = None,
        interfaces: dict[str, InterfaceRates] | None = None,
    ) -> ServerEstimate:
        age = self.last_sample_age_s[k]
        if age is not None and math.isnan(age):  # the binary form's "none" (``snapshotbin``)
            age = None
        variances = (self.packets_per_s_variance, self.bytes_per_s_variance)

        def number(column: Any) -> float:
            return float(column[k])

        return ServerEstimate.model_construct(
            packets_per_s=number(self.packets_per_s),
            packets_per_s_ci95=[
                number(self.packets_per_s_ci95_low),
                number(self.packets_per_s_ci95_high),
            ],
            bytes_per_s=number(self.bytes_per_s),
            bytes_per_s_ci95=[
                number(self.bytes_per_s_ci95_low),
                number(self.bytes_per_s_ci95_high),
            ],
            samples=int(self.samples[k]),
            samples_per_s=number(self.samples_per_s),
            local_samples=int(self.local_samples[k]),
            mirrored_samples=int(self.mirrored_samples[k]),
            coverage=number(self.coverage),
            last_sample=(time - timedelta(seconds=float(age)))
            if time is not None and age is not None
            else None,
            interfaces=interfaces,
            packets_per_s_variance=number(variances[0]) if variances[0] is not None else None,
            bytes_per_s_variance=number(variances[1]) if variances[1] is not None else None,
        )

    def __eq__(self, other: object) -> bool:  # the fields; not the name index cached below
        return isinstance(other, ServerTable) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    def _rows(self) -> dict[str, int]:
        if self._row_of is None:
            self._row_of = {name: k for k, name in enumerate(self.name)}
        return self._row_of


class InterfaceTable(Strict):
    """Polled port rates: row ``k`` is port ``port[k]`` of server row ``server[k]``."""

    server: list[Count]
    port: list[Annotated[str, Field(min_length=1)]]
    in_pps: list[Rate]
    out_pps: list[Rate]


class TrafficTable(Strict):
    """``V[src][dst]`` as entries: ``pps[k]`` from ``names[src[k]]`` to ``names[dst[k]]``."""

    names: list[ServerName]
    src: list[Count]
    dst: list[Count]
    pps: list[Rate]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """The planner's nested form ``{src: {dst: pps}}`` (small snapshots, tests, metrics)."""
        out: dict[str, dict[str, float]] = {}
        for i, k, v in zip(self.src, self.dst, self.pps):
            out.setdefault(self.names[i], {})[self.names[k]] = v
        return out

    @classmethod
    def from_dict(cls, matrix: Mapping[str, Mapping[str, float]]) -> "TrafficTable":
        return cls.model_validate(traffic_columns(matrix))


class GuardEntry(Strict):
    """A host whose guard runs it below its plan (``guardstate``): which rung of its ladder,
    the 1-in-N and mirror scale of that rung, since when, and the busy reading behind it."""

    rung: Annotated[int, Field(ge=1)]
    sflow_sampling: Annotated[int, Field(ge=1)] | None
    mirror_scale: Fraction
    since: UtcTime
    busy: Annotated[float, Field(ge=0, allow_inf_nan=False)]
