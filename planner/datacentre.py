"""The data-centre description: servers, their costs and capacities, and the traffic matrix.

Loaded from JSON or YAML (format in docs/formats.md) and validated strictly: unknown keys, wrong
types, non-finite or negative numbers, duplicate names and unknown servers each raise one
``PlannerError`` naming the field. Internally everything is numpy arrays indexed by server
position, and traffic is a sparse list of (source, destination, pps) entries, so a million
servers fit in memory and in the exact solver's time budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cosample.planner.errors import InfeasibleError, PlannerError

TOP_LEVEL_KEYS = {"name", "cost", "servers", "traffic_pps", "sflow"}
SERVER_KEYS = {"name", "capacity_pps", "alpha", "beta", "calibration", "tunnel_ip", "bridge",
               "vm_ports"}
COST_KEYS = {"alpha", "beta"}
SFLOW_KEYS = {"collector", "agent", "header_bytes", "polling_s"}


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

    # construction --------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, capacity_pps: Sequence[float], alpha: float | Sequence[float],
                    beta: float | Sequence[float], traffic_src: Sequence[int] = (),
                    traffic_dst: Sequence[int] = (), traffic_pps: Sequence[float] = (),
                    names: Sequence[str] | None = None, name: str = "datacentre") -> "DataCentre":
        """Validated data centre from arrays (for experiments, benchmarks and notebooks)."""
        capacity = np.asarray(capacity_pps, dtype=float)
        n = capacity.shape[0]
        names = tuple(names) if names is not None else tuple(f"s{i + 1}" for i in range(n))
        dc = cls(
            names=names, capacity_pps=capacity,
            alpha=np.broadcast_to(np.asarray(alpha, dtype=float), (n,)).copy(),
            beta=np.broadcast_to(np.asarray(beta, dtype=float), (n,)).copy(),
            traffic_src=np.asarray(traffic_src, dtype=np.int64),
            traffic_dst=np.asarray(traffic_dst, dtype=np.int64),
            traffic_pps=np.asarray(traffic_pps, dtype=float), name=name,
        )
        dc.validate()
        return dc

    @classmethod
    def from_matrix(cls, capacity_pps: Sequence[float], alpha: float | Sequence[float],
                    beta: float | Sequence[float], traffic: Any, **kwargs: Any) -> "DataCentre":
        """From a dense n x n traffic matrix ``traffic[src][dst]`` in pps."""
        matrix = np.asarray(traffic, dtype=float)
        src, dst = np.nonzero(matrix)
        return cls.from_arrays(capacity_pps, alpha, beta, src, dst, matrix[src, dst], **kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "DataCentre":
        """Read a JSON or YAML description; calibration files are resolved beside it."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise PlannerError(f"{path}: cannot read data-centre description: {exc.strerror}") from exc
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                document = yaml.safe_load(text)
            else:
                document = json.loads(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise PlannerError(f"{path}: not valid {path.suffix.lstrip('.').upper() or 'JSON'}: {exc}") from exc
        return cls.from_dict(document, base_dir=path.parent, source=str(path))

    @classmethod
    def from_dict(cls, document: Any, base_dir: str | Path = ".", source: str = "description") -> "DataCentre":
        """Validate a parsed description (see docs/formats.md) and build the arrays."""
        where = source
        doc = _mapping(document, where)
        _no_unknown_keys(doc, TOP_LEVEL_KEYS, where)
        cost = _mapping(_required(doc, "cost", where), f"{where}: cost")
        _no_unknown_keys(cost, COST_KEYS, f"{where}: cost")
        default_alpha = _positive(_required(cost, "alpha", f"{where}: cost"), f"{where}: cost.alpha")
        default_beta = _positive(_required(cost, "beta", f"{where}: cost"), f"{where}: cost.beta")

        servers = _required(doc, "servers", where)
        if not isinstance(servers, list) or not servers:
            raise PlannerError(f"{where}: servers: expected a non-empty list of servers")
        names, capacity, alpha, beta, extras = [], [], [], [], {}
        index: dict[str, int] = {}
        for position, server in enumerate(servers):
            at = f"{where}: servers[{position}]"
            server = _mapping(server, at)
            _no_unknown_keys(server, SERVER_KEYS, at)
            name = _required(server, "name", at)
            if not isinstance(name, str) or not name:
                raise PlannerError(f"{at}.name: expected a non-empty string, got {name!r}")
            if name in index:
                raise PlannerError(f"{at}.name: duplicate server name {name!r} "
                                   f"(also servers[{index[name]}])")
            index[name] = position
            at = f"{where}: server {name!r}"
            calibration = _calibration(server.get("calibration"), Path(base_dir), at)
            merged = {**calibration, **{k: server[k] for k in ("capacity_pps", "alpha", "beta") if k in server}}
            capacity.append(_non_negative(_required(merged, "capacity_pps", at), f"{at}: capacity_pps"))
            alpha.append(_positive(merged.get("alpha", default_alpha), f"{at}: alpha"))
            beta.append(_positive(merged.get("beta", default_beta), f"{at}: beta"))
            names.append(name)
            extra = {k: server[k] for k in ("tunnel_ip", "bridge", "vm_ports") if k in server}
            if extra:
                extras[name] = extra

        src, dst, pps = [], [], []
        traffic = _mapping(doc.get("traffic_pps", {}), f"{where}: traffic_pps")
        for source_name, row in traffic.items():
            at = f"{where}: traffic_pps.{source_name}"
            if source_name not in index:
                raise PlannerError(f"{at}: unknown server {source_name!r} (not in servers)")
            for dest_name, value in _mapping(row, at).items():
                if dest_name not in index:
                    raise PlannerError(f"{at}.{dest_name}: unknown server {dest_name!r} (not in servers)")
                volume = _non_negative(value, f"{at}.{dest_name}")
                if volume > 0:
                    src.append(index[source_name])
                    dst.append(index[dest_name])
                    pps.append(volume)

        sflow = dict(_mapping(doc.get("sflow", {}), f"{where}: sflow"))
        _no_unknown_keys(sflow, SFLOW_KEYS, f"{where}: sflow")
        name = doc.get("name", Path(source).stem if source != "description" else "datacentre")
        dc = cls(names=tuple(names), capacity_pps=np.array(capacity), alpha=np.array(alpha),
                 beta=np.array(beta), traffic_src=np.array(src, dtype=np.int64),
                 traffic_dst=np.array(dst, dtype=np.int64), traffic_pps=np.array(pps, dtype=float),
                 name=str(name), server_extras=extras, sflow=sflow)
        dc.validate()
        return dc

    # checks ------------------------------------------------------------------------------
    def validate(self) -> None:
        """Shape and value checks shared by every constructor."""
        n = len(self.names)
        if n == 0:
            raise PlannerError("data centre has no servers")
        if len(set(self.names)) != n:
            raise PlannerError("duplicate server names")
        for label, values, strictly in (("capacity_pps", self.capacity_pps, False),
                                        ("alpha", self.alpha, True), ("beta", self.beta, True)):
            if values.shape != (n,):
                raise PlannerError(f"{label}: expected {n} values, got shape {values.shape}")
            bad = ~np.isfinite(values) | ((values <= 0) if strictly else (values < 0))
            if bad.any():
                i = int(np.argmax(bad))
                need = "> 0" if strictly else ">= 0"
                raise PlannerError(f"server {self.names[i]!r}: {label} must be finite and {need}, "
                                   f"got {values[i]!r}")
        m = self.traffic_pps.shape[0]
        if self.traffic_src.shape != (m,) or self.traffic_dst.shape != (m,):
            raise PlannerError("traffic: source, destination and pps arrays differ in length")
        if m and (self.traffic_src.min() < 0 or self.traffic_src.max() >= n
                  or self.traffic_dst.min() < 0 or self.traffic_dst.max() >= n):
            raise PlannerError(f"traffic: a server index is outside 0..{n - 1}")
        bad = ~np.isfinite(self.traffic_pps) | (self.traffic_pps < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise PlannerError(f"traffic_pps.{self.names[self.traffic_src[i]]}."
                               f"{self.names[self.traffic_dst[i]]}: must be finite and >= 0, "
                               f"got {self.traffic_pps[i]!r}")

    def check_feasible(self) -> None:
        """Raise ``InfeasibleError`` listing every server whose forwarding alone exceeds capacity."""
        over = self.spare_pps < 0
        if over.any():
            raise InfeasibleError({self.names[i]: float(-self.spare_pps[i]) for i in np.flatnonzero(over)})

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
        received = np.bincount(self.traffic_dst[inbound], weights=self.traffic_pps[inbound],
                               minlength=self.size)
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


# parsing helpers --------------------------------------------------------------------------
def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlannerError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _required(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise PlannerError(f"{where}: missing required field {key!r}")
    return mapping[key]


def _no_unknown_keys(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise PlannerError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlannerError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise PlannerError(f"{where}: must be finite, got {value!r}")
    return float(value)


def _non_negative(value: Any, where: str) -> float:
    number = _number(value, where)
    if number < 0:
        raise PlannerError(f"{where}: must be >= 0, got {value!r}")
    return number


def _positive(value: Any, where: str) -> float:
    number = _number(value, where)
    if number <= 0:
        raise PlannerError(f"{where}: must be > 0, got {value!r}")
    return number


def _calibration(reference: Any, base_dir: Path, where: str) -> dict[str, Any]:
    """``alpha``, ``beta`` and ``capacity_pps`` from a calibration JSON (``cosample fit -o``)."""
    if reference is None:
        return {}
    if not isinstance(reference, str):
        raise PlannerError(f"{where}: calibration: expected a file name, got {reference!r}")
    from cosample.costmodel.coefficients import CalibrationFileError, read_coefficients

    try:
        return read_coefficients(base_dir / reference, required=())
    except CalibrationFileError as exc:
        raise PlannerError(f"{where}: calibration {exc}") from None
