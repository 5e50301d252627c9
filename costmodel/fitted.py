"""What a fit of the cost law learned: one ``MechanismFit`` per mechanism, gathered in an
immutable ``Calibration`` with its text report and the calibration JSON (``to_dict``: the
top-level ``alpha`` (sflow), ``beta`` (mirror) and ``capacity_pps`` the planner reads).
``fit.CostModelFit`` makes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from cosample.costmodel.calibration_file import ROLE_OF_MECHANISM
from cosample.costmodel.data import finite_or_none
from cosample.costmodel.model import PAPER_COEFFICIENTS, throughput

MODEL = "T(s) = T0 / (1 + a*s)"


@dataclass(frozen=True)
class MechanismFit:
    """The law fitted to one mechanism's measurements."""

    mechanism: str
    coefficient: float
    coefficient_se: float
    coefficient_ci: tuple[float, float]
    capacity_pps: float
    capacity_se: float
    capacity_ci: tuple[float, float]
    r_squared: float
    residual_sd: float
    n_points: int
    rates: tuple[float, ...]
    n_blocks: int = 1
    warnings: tuple[str, ...] = ()
    ci_method: str = "residual bootstrap"
    covariate: Mapping[str, Any] | None = None  # ``ancova.CovariateCheck.to_dict()``

    def predict(self, rate: np.ndarray | float) -> np.ndarray:
        return throughput(rate, self.capacity_pps, self.coefficient)

    def to_dict(self) -> dict[str, Any]:
        return {
            "coefficient": finite_or_none(self.coefficient),
            "coefficient_se": finite_or_none(self.coefficient_se),
            "coefficient_ci": [finite_or_none(x) for x in self.coefficient_ci],
            "capacity_pps": finite_or_none(self.capacity_pps),
            "capacity_se": finite_or_none(self.capacity_se),
            "capacity_ci": [finite_or_none(x) for x in self.capacity_ci],
            "r_squared": finite_or_none(self.r_squared),
            "residual_sd_pps": finite_or_none(self.residual_sd),
            "n_points": self.n_points,
            "n_blocks": self.n_blocks,
            "rates": list(self.rates),
            "warnings": list(self.warnings),
            "ci_method": self.ci_method,
            "covariate": dict(self.covariate) if self.covariate else None,
        }


@dataclass(frozen=True)
class Calibration:
    """Fitted coefficients of one server; ``to_dict`` is the calibration JSON."""

    fits: Mapping[str, MechanismFit]
    confidence: float
    n_bootstrap: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, str] = field(default_factory=lambda: dict(ROLE_OF_MECHANISM))

    def __post_init__(self) -> None:
        object.__setattr__(self, "fits", MappingProxyType(dict(self.fits)))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        object.__setattr__(self, "roles", MappingProxyType(dict(self.roles)))

    def _role(self, role: str) -> float | None:
        for mechanism, name in self.roles.items():
            if name == role and mechanism in self.fits:
                return self.fits[mechanism].coefficient
        return None

    @property
    def alpha(self) -> float | None:
        return self._role("alpha")

    @property
    def beta(self) -> float | None:
        return self._role("beta")

    @property
    def capacity_pps(self) -> float:
        """Inverse-variance weighted mean of the mechanisms' T0 (plain mean without SEs)."""
        values = np.array([f.capacity_pps for f in self.fits.values()])
        se = np.array([f.capacity_se for f in self.fits.values()])
        if np.all(np.isfinite(se) & (se > 0)):
            weights = 1.0 / se**2
            return float(np.sum(weights * values) / np.sum(weights))
        return float(np.mean(values))

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(f"{name}: {w}" for name, fit in self.fits.items() for w in fit.warnings)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for mechanism, role in self.roles.items():
            if mechanism in self.fits:
                document[role] = finite_or_none(self.fits[mechanism].coefficient)
        document["capacity_pps"] = finite_or_none(self.capacity_pps)
        document.update(
            {
                "model": MODEL,
                "confidence": self.confidence,
                "ci_method": "; ".join(
                    dict.fromkeys(
                        f"residual bootstrap, {self.n_bootstrap} resamples, percentile"
                        if f.ci_method == "residual bootstrap"
                        else f.ci_method
                        for f in self.fits.values()
                    )
                ),
                "mechanisms": {name: fit.to_dict() for name, fit in self.fits.items()},
                "roles": {role: mechanism for mechanism, role in self.roles.items()},
                "warnings": list(self.warnings),
                "paper": dict(PAPER_COEFFICIENTS),
            }
        )
        if self.metadata:
            document["metadata"] = dict(self.metadata)
        return document

    def report(self) -> str:
        level = f"{self.confidence:.0%}"
        lines = [
            f"cost model {MODEL}, {level} CI: {self.to_dict()['ci_method']}",
            f"{'mechanism':<12} {'a':>8} {'SE':>7} {level + ' CI':>19} {'paper':>6} "
            f"{'T0 (pps)':>11} {'R^2':>6} {'n':>4}",
        ]
        for name, fit in self.fits.items():
            low, high = fit.coefficient_ci
            paper = PAPER_COEFFICIENTS.get(name)
            lines.append(
                f"{name:<12} {fit.coefficient:>8.3f} {fit.coefficient_se:>7.3f} "
                f"[{low:>7.3f}, {high:>7.3f}] {paper if paper is not None else '-':>6} "
                f"{fit.capacity_pps:>11,.0f} {fit.r_squared:>6.3f} {fit.n_points:>4}"
            )
        roles = ", ".join(
            f"{role} = {self.fits[m].coefficient:.3f}"
            for m, role in self.roles.items()
            if m in self.fits
        )
        lines.append(f"capacity_pps = {self.capacity_pps:,.0f}" + (f", {roles}" if roles else ""))
        lines += [
            f"{name}: covariate {fit.covariate['name']}: {fit.covariate['reason']}"
            for name, fit in self.fits.items()
            if fit.covariate
        ]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)
