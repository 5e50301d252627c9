"""The data centre the planner works on: servers, their costs and capacities, and the traffic.

A description file (JSON or YAML, its servers and traffic possibly CSV files; format in
docs/formats.md, declared in ``planner.description``) is validated column by column
(``planner.bulk``), the pydantic models deciding every entry not plainly valid, so errors are
the models' own; the cross-field rules (unique names,
traffic naming known servers, capacities from calibration files) follow here in the same
one-line form ``file: field.path: what (got value)``, raised as ``PlannerError``. Internally
everything is numpy arrays indexed by server position, and traffic is a sparse list of
(source, destination, pps) entries, so a million servers fit in memory and in the exact
solver's time budget.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cosample.costmodel.calibration_file import read_calibration_file
from cosample.costmodel.coefficients import CalibrationFileError, coefficients
from cosample.costmodel.coefficients import intervals as calibration_intervals
from cosample.plan.fieldtypes import MAX_OBSERVATION_DOMAIN
from cosample.planner import bulk, fleetcsv
from cosample.planner.appmon_costs import resolve as appmon_costs
from cosample.planner.description import Description
from cosample.planner.errors import InfeasibleError, PlannerError
from cosample.planner.extras import ExtraColumns, any_given
from cosample.validation import problem, read_document

#: Optional per-server planning inputs and their array types (``from_arrays`` keywords).
PLANNING_ARRAYS = {
    "margin": float,
    "weight": float,
    "packet_bytes": float,
    "mirror_cap_bytes": float,
    "samples_inbound": bool,
    "alpha_sample": float,
    "observation_domain": np.int64,
}
#: The coefficients a calibration file may give a server, and the intervals the planner keeps.
CALIBRATED = ("capacity_pps", "alpha", "beta", "alpha_sample")


@dataclass(frozen=True)
class DataCentre:
    """Servers and traffic as arrays. Build with ``from_arrays`` or ``load``/``from_dict``."""

    names: tuple[str, ...]
    capacity_pps: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    traffic_src: np.ndarray
    traffic_dst: np.ndarray
    traffic_pps: np.ndarray
    name: str = "datacentre"
    server_extras: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sflow: Mapping[str, Any] = field(default_factory=dict)
    # optional planning inputs (None: the default for every server; see planner.problem)
    margin: np.ndarray | None = None  # per server, NaN = the plan's default
    weight: np.ndarray | None = None
    packet_bytes: np.ndarray | None = None
    mirror_cap_bytes: np.ndarray | None = None  # inf = no cap
    samples_inbound: np.ndarray | None = None  # bool: tunnels on the sampled bridge
    # the ``sample`` local mechanism: cost per sample (NaN: sFlow only) and the IPFIX
    # Observation Domain ID its records carry (0: none, so sFlow only)
    alpha_sample: np.ndarray | None = None
    observation_domain: np.ndarray | None = None
    #: the description's ``ipfix`` section (None: not given)
    ipfix: Mapping[str, Any] | None = None
    intervals: Mapping[str, np.ndarray] | None = None  # CALIBRATED -> (n, 2), NaN unknown
    collector_cap_pps: float = math.inf
    # application monitoring (planner.appmon_plan): the description's services, cost overrides
    # and analysis-host budget
    services: tuple[Any, ...] = ()
    appmon_cost: Mapping[str, float] = field(default_factory=dict)
    analysis_hosts: int | None = None
    appmon_order: str = "appmon_first"

    # construction --------------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        capacity_pps: ArrayLike,
        alpha: ArrayLike,
        beta: ArrayLike,
        traffic_src: ArrayLike = (),
        traffic_dst: ArrayLike = (),
        traffic_pps: ArrayLike = (),
        names: Sequence[str] | None = None,
        name: str = "datacentre",
        **planning: Any,
    ) -> "DataCentre":
        """Validated data centre from arrays (for experiments, benchmarks and notebooks).

        ``planning``: optional ``margin``, ``weight``, ``packet_bytes``, ``mirror_cap_bytes``,
        ``samples_inbound``, ``alpha_sample`` (NaN: sFlow only), ``observation_domain`` (0:
        none) (scalars or per-server arrays), ``collector_cap_pps`` and ``intervals``
        (``{"alpha"|"beta"|"capacity_pps"|"alpha_sample": (n, 2) low/high, NaN unknown}``).
        """
        capacity = np.asarray(capacity_pps, dtype=float)
        n = capacity.shape[0]
        names = tuple(names) if names is not None else tuple(f"s{i + 1}" for i in range(n))
        unknown = set(planning) - {*PLANNING_ARRAYS, "collector_cap_pps", "intervals"}
        if unknown:
            raise PlannerError(f"unknown planning input(s): {', '.join(sorted(unknown))}")
        arrays: dict[str, Any] = {  # (DataCentre's keywords: per-server arrays)
            key: np.broadcast_to(np.asarray(planning[key], dtype=kind), (n,)).copy()
            for key, kind in PLANNING_ARRAYS.items()
            if planning.get(key) is not None
        }
        dc = cls(
            names=names,
            capacity_pps=capacity,
            alpha=np.broadcast_to(np.asarray(alpha, dtype=float), (n,)).copy(),
            beta=np.broadcast_to(np.asarray(beta, dtype=float), (n,)).copy(),
            traffic_src=np.asarray(traffic_src, dtype=np.int64),
            traffic_dst=np.asarray(traffic_dst, dtype=np.int64),
            traffic_pps=np.asarray(traffic_pps, dtype=float),
            name=name,
            collector_cap_pps=float(planning.get("collector_cap_pps", math.inf)),
            intervals=_intervals(planning.get("intervals"), n),
            **arrays,
        )
        dc.check_arrays()
        return dc

    @classmethod
    def from_matrix(
        cls,
        capacity_pps: Sequence[float],
        alpha: float | Sequence[float],
        beta: float | Sequence[float],
        traffic: Any,
        **kwargs: Any,
    ) -> "DataCentre":
        """From a dense n x n traffic matrix ``traffic[src][dst]`` in pps."""
        matrix = np.asarray(traffic, dtype=float)
        src, dst = np.nonzero(matrix)
        return cls.from_arrays(capacity_pps, alpha, beta, src, dst, matrix[src, dst], **kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "DataCentre":
        """Read a JSON or YAML description (its large parts possibly CSV files); calibration files are resolved beside it."""
        path = Path(path)
        # the parsed document is only bulk.read's: freed once its columns are taken
        return cls.from_columns(
            bulk.read(
                read_document(path, "data-centre description", error=PlannerError),
                str(path),
                path.parent,
            ),
            path.parent,
            str(path),
        )

    @classmethod
    def from_dict(
        cls, document: Any, base_dir: str | Path = ".", source: str = "description"
    ) -> "DataCentre":
        """Validate a parsed description (see docs/formats.md) and build the arrays."""
        return cls.from_columns(bulk.read(document, source, Path(base_dir)), Path(base_dir), source)

    @classmethod
    def from_description(
        cls, description: Description, base_dir: Path = Path("."), source: str = "description"
    ) -> "DataCentre":
        """Apply the cross-field rules to a validated description and build the arrays."""
        return cls.from_columns(bulk.from_model(description), base_dir, source)

    @classmethod
    def from_columns(
        cls, columns: bulk.Columns, base_dir: Path = Path("."), source: str = "description"
    ) -> "DataCentre":
        """Apply the cross-field rules to a validated description's columns; build the arrays."""

        def fail(
            location: Sequence[int | str], what: str, value: Any = None, entry: int | None = None
        ) -> PlannerError:
            name = names[int(location[1])] if location[0] == "servers" else None
            where = source
            part = "servers" if location[0] == "servers" else "traffic"
            field = (
                location[2]
                if part == "servers"
                else ("source" if len(location) == 2 else "destination")
            )
            at = None
            if columns.locate is not None:
                position = location[1] if part == "servers" else entry
                assert isinstance(position, int) and isinstance(field, str)  # (see the calls)
                at = columns.locate(part, position, field)
            if at is not None:  # an entry of a CSV file: its file, row and column
                where, location = at
            return problem(location, what, value, where=where, name=name, error=PlannerError)

        servers = columns.servers
        names = tuple(servers["name"])
        n = len(names)
        index = dict(zip(names, range(n)))
        if len(index) != n:
            first: dict[str, int] = {}
            for position, name in enumerate(names):
                if name in first:
                    also = f"servers[{first[name]}]"
                    if columns.locate and columns.locate("servers", 0, "name"):
                        also = f"row {fleetcsv.row(first[name])}"
                    raise fail(
                        ("servers", position, "name"), f"duplicate server name, also {also}", name
                    )
                first[name] = position
        cost = columns.header.cost
        capacity = _column(servers["capacity_pps"], math.nan)
        alpha = _column(servers["alpha"], cost.alpha)
        beta = _column(servers["beta"], cost.beta)
        alpha_sample = _column(servers["alpha_sample"], math.nan)
        intervals = {key: np.full((n, 2), math.nan) for key in CALIBRATED}
        calibrations: dict[Path, tuple[dict, dict]] = {}  # servers may share a file: read it once
        appmon_sections: dict[Path, Any] = {}  # their ``appmon`` sections (planner.appmon_costs)
        for position, calibration in enumerate(servers["calibration"]):
            if calibration is None:
                continue
            path = base_dir / calibration
            try:
                if path not in calibrations:
                    document = read_calibration_file(path)
                    calibrations[path] = (
                        coefficients(document, path, required=()),
                        calibration_intervals(document),
                    )
                    if document.appmon is not None:
                        appmon_sections[path] = document.appmon
            except CalibrationFileError as exc:
                raise fail(("servers", position, "calibration"), str(exc)) from None
            calibrated, measured = calibrations[path]
            for key, column in zip(CALIBRATED, (capacity, alpha, beta, alpha_sample)):
                if servers[key][position] is None and calibrated.get(key) is not None:
                    column[position] = calibrated[key]
                    if key in measured:  # an explicit value has no interval: it is what it is
                        intervals[key][position] = measured[key]
        missing = np.flatnonzero(np.isnan(capacity))
        if missing.size:
            raise fail(
                ("servers", int(missing[0]), "capacity_pps"),
                "field required (neither the server nor its calibration file gives it)",
            )
        extras = ExtraColumns.given(names, servers)
        domains = observation_domains(servers, alpha_sample, fail)

        origins = np.fromiter(
            map(index.get, columns.traffic_rows, repeat(-1)),
            dtype=np.int64,
            count=len(columns.traffic_rows),
        )
        if (origins < 0).any():
            at = int(np.argmax(origins < 0))
            source_name = columns.traffic_rows[at]
            raise fail(
                ("traffic_pps", source_name),
                "unknown server, not in servers",
                source_name,
                entry=at,
            )
        targets = np.fromiter(
            map(index.get, columns.traffic_dst, repeat(-1)),
            dtype=np.int64,
            count=len(columns.traffic_dst),
        )
        if (targets < 0).any():
            at = int(np.argmax(targets < 0))
            row = int(np.searchsorted(np.cumsum(columns.traffic_lengths), at, side="right"))
            raise fail(
                ("traffic_pps", columns.traffic_rows[row], columns.traffic_dst[at]),
                "unknown server, not in servers",
                columns.traffic_dst[at],
                entry=at,
            )
        src = np.repeat(origins, columns.traffic_lengths)
        dst = targets
        if not columns.pairs_unique and len(dst):  # a CSV file can give a pair twice
            pair = src * n + dst
            order = np.argsort(pair, kind="stable")
            again = np.flatnonzero(pair[order][1:] == pair[order][:-1])
            if again.size:
                later = order[again + 1]
                at = int(later.min())
                first_at = int(order[again[np.argmin(later)]])
                raise fail(
                    ("traffic_pps", columns.traffic_rows[at], columns.traffic_dst[at]),
                    f"the pair {names[src[at]]!r} -> {names[dst[at]]!r} again, also "
                    f"row {fleetcsv.row(first_at)}",
                    entry=at,
                )
        volume = columns.traffic_pps
        carried = volume > 0
        header = columns.header

        seen: dict[tuple[str, int], int] = {}
        for position, service in enumerate(header.services):
            if service.server not in index:
                raise problem(
                    ("services", position, "server"),
                    "unknown server, not in servers",
                    service.server,
                    where=source,
                    error=PlannerError,
                )
            endpoint = (service.address, service.port)
            if endpoint in seen:
                raise problem(
                    ("services", position, "port"),
                    f"the same address and port as services[{seen[endpoint]}]",
                    service.port,
                    where=source,
                    error=PlannerError,
                )
            seen[endpoint] = position
        appmon_cost = appmon_costs(header.appmon_cost, appmon_sections, base_dir, source)
        name = header.name or (Path(source).stem if source != "description" else "datacentre")
        collector_cap = header.budgets.collector_samples_pps
        return cls(
            names=names,
            capacity_pps=capacity,
            alpha=alpha,
            beta=beta,
            traffic_src=src[carried],
            traffic_dst=dst[carried],
            traffic_pps=volume[carried],
            name=name,
            server_extras=extras,
            sflow=header.sflow.model_dump(exclude_none=True),
            collector_cap_pps=math.inf if collector_cap is None else collector_cap,
            services=tuple(header.services),
            appmon_cost=appmon_cost,
            analysis_hosts=header.budgets.analysis_hosts,
            appmon_order=header.appmon_order,
            intervals=intervals if any(np.isfinite(v).any() for v in intervals.values()) else None,
            ipfix=None if header.ipfix is None else header.ipfix.model_dump(exclude_none=True),
            **_planning_arrays(servers),
            **(
                {}
                if domains is None
                else {"alpha_sample": alpha_sample, "observation_domain": domains}
            ),
        )

    # checks ------------------------------------------------------------------------------
    def check_arrays(self) -> None:
        """Invariants of arrays handed to ``from_arrays`` by code (files go through the models)."""
        n = len(self.names)
        if n == 0:
            raise PlannerError("data centre has no servers")
        if len(set(self.names)) != n:
            raise PlannerError("duplicate server names")
        for label, values, strictly in (
            ("capacity_pps", self.capacity_pps, False),
            ("alpha", self.alpha, True),
            ("beta", self.beta, True),
        ):
            if values.shape != (n,):
                raise PlannerError(f"{label}: expected {n} values, got shape {values.shape}")
            bad = ~np.isfinite(values) | ((values <= 0) if strictly else (values < 0))
            if bad.any():
                i = int(np.argmax(bad))
                need = "> 0" if strictly else ">= 0"
                raise PlannerError(
                    f"server {self.names[i]!r}: {label} must be finite and {need}, "
                    f"got {values[i]!r}"
                )
        m = self.traffic_pps.shape[0]
        if self.traffic_src.shape != (m,) or self.traffic_dst.shape != (m,):
            raise PlannerError("traffic: source, destination and pps arrays differ in length")
        if m and (
            self.traffic_src.min() < 0
            or self.traffic_src.max() >= n
            or self.traffic_dst.min() < 0
            or self.traffic_dst.max() >= n
        ):
            raise PlannerError(f"traffic: a server index is outside 0..{n - 1}")
        bad = ~np.isfinite(self.traffic_pps) | (self.traffic_pps < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise PlannerError(
                f"traffic_pps.{self.names[self.traffic_src[i]]}."
                f"{self.names[self.traffic_dst[i]]}: must be finite and >= 0, "
                f"got {self.traffic_pps[i]!r}"
            )
        for label, lowest, highest in (
            ("margin", 0.0, 1.0),
            ("weight", 0.0, math.inf),
            ("packet_bytes", 0.0, math.inf),
            ("mirror_cap_bytes", 0.0, math.inf),
        ):
            values = getattr(self, label)
            if values is None:
                continue
            bad = (values < lowest) | (values > highest) | np.isnan(values) & (label != "margin")
            if label == "margin":
                bad |= values >= 1
            elif label in ("weight", "packet_bytes"):
                bad |= values <= 0
            if bad.any():
                i = int(np.argmax(bad))
                raise PlannerError(
                    f"server {self.names[i]!r}: {label} out of range, got {values[i]!r}"
                )
        if self.alpha_sample is not None:
            bad = ~np.isnan(self.alpha_sample) & ~(
                np.isfinite(self.alpha_sample) & (self.alpha_sample > 0)
            )
            if self.alpha_sample.shape != (n,) or bad.any():
                i = int(np.argmax(bad)) if self.alpha_sample.shape == (n,) else 0
                raise PlannerError(
                    f"server {self.names[i]!r}: alpha_sample must be finite and "
                    f"> 0 (NaN: sFlow only), got {self.alpha_sample[i]!r}"
                )
        if self.observation_domain is not None:
            domains = self.observation_domain
            bad = (domains < 0) | (domains > MAX_OBSERVATION_DOMAIN)
            if bad.any():
                i = int(np.argmax(bad))
                raise PlannerError(
                    f"server {self.names[i]!r}: observation_domain out of range "
                    f"0..{MAX_OBSERVATION_DOMAIN} (0: none), got {domains[i]!r}"
                )
            used = domains[domains > 0]
            if np.unique(used).size != used.size:
                raise PlannerError("observation_domain: two servers have the same one")
        if self.collector_cap_pps < 0 or math.isnan(self.collector_cap_pps):
            raise PlannerError(f"collector_cap_pps must be >= 0, got {self.collector_cap_pps!r}")

    def check_feasible(self) -> None:
        """Raise ``InfeasibleError`` listing every server whose forwarding alone exceeds capacity."""
        over = self.spare_pps < 0
        if over.any():
            raise InfeasibleError(
                {self.names[i]: float(-self.spare_pps[i]) for i in np.flatnonzero(over)}
            )

    # derived quantities ----------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.names)

    @cached_property
    def own_pps(self) -> np.ndarray:
        """U_i: traffic sent by VMs on server i, which i must sample (A7: the source samples)."""
        return np.bincount(self.traffic_src, weights=self.traffic_pps, minlength=self.size)

    @cached_property
    def forwarding_pps(self) -> np.ndarray:
        """F_i: what i forwards, its own traffic plus what other servers send to its VMs."""
        inbound = self.traffic_src != self.traffic_dst
        received = np.bincount(
            self.traffic_dst[inbound], weights=self.traffic_pps[inbound], minlength=self.size
        )
        return self.own_pps + received

    @cached_property
    def spare_pps(self) -> np.ndarray:
        """C_i - F_i: capacity left for sampling and mirroring (negative means overloaded)."""
        return self.capacity_pps - self.forwarding_pps

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise PlannerError(f"unknown server {name!r}") from None


def _column(values: list[Any], default: float) -> np.ndarray:
    """A number column, ``default`` where absent (None)."""
    if None not in values:
        return np.array(values, dtype=float)
    return np.array([default if value is None else value for value in values], dtype=float)


def _planning_arrays(servers: Mapping[str, list[Any]]) -> dict[str, np.ndarray]:
    """The per-server planning fields a description gives, as arrays (absent: left out)."""
    arrays: dict[str, np.ndarray] = {}
    given = {
        "margin": ("margin", math.nan),
        "weight": ("weight", 1.0),
        "packet_bytes": ("packet_bytes", math.nan),
        "mirror_cap_bytes": ("mirror_cap_bytes_per_s", math.inf),
    }
    for key, (field_name, default) in given.items():
        values = servers[field_name]
        if any_given(values):
            arrays[key] = _column(values, default)
    layout = servers["bridge_layout"]
    if "single" in layout:
        arrays["samples_inbound"] = np.array([value == "single" for value in layout])
    return arrays


def _intervals(given: Mapping[str, Any] | None, n: int) -> dict[str, np.ndarray] | None:
    """Interval arrays (n, 2) for alpha, beta and capacity_pps; absent ones unknown (NaN)."""
    if given is None:
        return None
    unknown = set(given) - set(CALIBRATED)
    if unknown:
        raise PlannerError(f"intervals: unknown key(s) {', '.join(sorted(unknown))}")
    return {
        key: (
            np.broadcast_to(np.asarray(given[key], dtype=float), (n, 2)).copy()
            if key in given
            else np.full((n, 2), math.nan)
        )
        for key in CALIBRATED
    }


def observation_domains(
    servers: Mapping[str, list[Any]], alpha_sample: np.ndarray, fail
) -> np.ndarray | None:
    """Each server's IPFIX Observation Domain ID for the ``sample`` mechanism (a description's,
    and the controller's inventory's: ``servers`` are columns by field name, ``fail(location,
    what, value)`` makes the caller's error): its explicit
    ``observation_domain``, else its IPv4 ``tunnel_ip`` as a 32-bit integer (stable and unique
    as addresses are), 0 where neither or where it cannot use ``sample``; None when no server
    can. Two servers that could use ``sample`` with one domain are refused (the collector
    attributes records by it)."""
    able = np.isfinite(alpha_sample)
    if not able.any():
        return None
    domains = np.zeros(alpha_sample.size, dtype=np.int64)
    explicit, tunnels = servers["observation_domain"], servers["tunnel_ip"]
    for k in np.flatnonzero(able).tolist():
        if explicit[k] is not None:
            domains[k] = explicit[k]
        elif tunnels[k] is not None and ":" not in tunnels[k]:
            domains[k] = int.from_bytes(socket.inet_aton(tunnels[k]), "big")
    used = np.flatnonzero(domains > 0)
    order = used[np.argsort(domains[used], kind="stable")]
    again = np.flatnonzero(domains[order][1:] == domains[order][:-1])
    if again.size:
        first, k = int(order[again[0]]), int(order[again[0] + 1])
        how = "observation_domain" if explicit[k] is not None else "tunnel_ip"
        raise fail(
            ("servers", k, how),
            f"its observation domain {int(domains[k])} is also "
            f"{servers['name'][first]!r}'s; give each server using sample its own",
            explicit[k] if explicit[k] is not None else tunnels[k],
        )
    return domains
