"""The calibration JSON as its readers see it: one pydantic model and one reader.

``cosample fit`` and ``cosample calibrate`` write the file (``fitted.Calibration.to_dict``); the
planner, the controller's inventory, the testbed, the experiments and the comparisons all read
it through ``read_calibration_file``, so they accept and reject the same files. The model
declares the part they read; anything else in the file is left alone.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cosample.costmodel.errors import CostModelError
from cosample.errors import CosampleError
from cosample.plan.appmon import AppmonProtocol
from cosample.validation import read_document, validate

#: Which mechanism gives the planner's alpha and beta (files written before ``roles`` existed),
#: and ``alpha_sample``, the cost per sample of OVS's ``sample`` action with the IPFIX flow
#: cache (the ``sample`` local mechanism, docs/planner.md), when the campaign measured it.
ROLE_OF_MECHANISM = {"sflow": "alpha", "mirror": "beta", "sample_action_cached": "alpha_sample"}
#: The roles every calibration names; the others only when their mechanism was fitted.
REQUIRED_ROLES = ("alpha", "beta")

#: A number the file holds: finite (JSON has no NaN, Python's writer does), or null where
#: ``cosample fit`` had none to write.
Finite = Annotated[float, Field(allow_inf_nan=False)]
Interval = Annotated[list[Finite | None], Field(min_length=2, max_length=2)]


class CalibrationFileError(CostModelError):
    """A calibration file that cannot be read, is malformed, or lacks a usable coefficient."""


class _Read(BaseModel):
    """Strict about what is read (no strings for numbers), silent about the rest."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class MechanismEntry(_Read):
    """One mechanism's fit: ``fitted.MechanismFit.to_dict``."""

    coefficient: Finite | None
    coefficient_se: Finite | None = None
    coefficient_ci: Interval = [None, None]
    capacity_pps: Finite | None = None
    capacity_ci: Interval = [None, None]
    n_points: int | None = None
    n_blocks: int = 1
    ci_method: str | None = None
    covariate: dict[str, Any] | None = None

    def interval(self, which: str = "coefficient_ci") -> tuple[float, float] | None:
        """``coefficient_ci`` (or ``capacity_ci``) when both ends are there and in order."""
        low, high = getattr(self, which)
        return (low, high) if low is not None and high is not None and low <= high else None


class Metadata(_Read):
    """How the calibration was made (``cosample calibrate`` and ``fit`` fill what they know)."""

    method: str = "throughput"
    data: str | None = None
    started: str | None = None
    date: str | None = None
    loadavg_start: list[Finite] | None = None
    target_ci: dict[str, Finite] | None = None
    target_met: dict[str, bool] | None = None
    seconds: dict[str, Finite] | None = None


class AppmonCost(_Read):
    """One application mechanism's measured cost (``costmodel.appmon_fit``; the names and units
    are agreed in docs/costmodel.md, "Application monitoring costs")."""

    #: ``monitored``: on the host that serves the requests (law T(s) = T0/(1 + a s));
    #: ``analysis``: on the host that receives the copies (linear, no T0)
    host: Literal["monitored", "analysis"]
    law: Literal["share", "linear"]
    coefficient: Finite | None = None
    coefficient_ci: Interval = [None, None]
    cpu_s_per_request: Finite
    cpu_s_per_request_ci: Interval = [None, None]
    cpu_s_per_packet: Finite | None = None
    cpu_s_per_packet_ci: Interval = [None, None]
    fabric_bytes_per_request: Finite = 0.0
    fabric_bytes_per_request_ci: Interval = [None, None]
    truncate_bytes: int | None = None
    n_rounds: int = Field(ge=1)


class AppmonCosts(_Read):
    """One calibration run's application costs: ``mechanisms`` and the run's own unit."""

    mechanisms: dict[str, AppmonCost]
    base_cpu_s_per_request: Finite | None = None
    base_cpu_s_per_request_ci: Interval = [None, None]
    #: ovs-vswitchd's CPU per packet of the server's port unmonitored (the planner's unit) and
    #: packets per request; files from before the planner read them have neither
    forwarding_cpu_s_per_packet: Finite | None = None
    forwarding_cpu_s_per_packet_ci: Interval = [None, None]
    packets_per_request: Finite | None = None
    packets_per_request_ci: Interval = [None, None]
    confidence: Finite = 0.95
    metadata: dict[str, Any] = {}


class AppmonCalibration(AppmonCosts):
    """The application mechanisms' costs, measured by ``python -m
    cosample.experiments.appmon_costs`` on HTTP/1.x; keys of ``mechanisms``: ``sniffer_onsite``,
    ``selective_mirror``, ``truncated_mirror``, ``kernel_mirror`` (host ``monitored``),
    ``analysis_selective``, ``analysis_truncated``, ``analysis_kernel`` (host ``analysis``).
    ``protocols``: the same, per protocol, measured on that protocol's service (``python -m
    cosample.experiments.appmon_protocol_calibration``; files from before issue 45 have none)."""

    protocols: dict[AppmonProtocol, AppmonCosts] = {}


class CalibrationDocument(_Read):
    """The calibration JSON: the planner's coefficients, every mechanism's fit, and metadata."""

    alpha: Finite | None = None
    beta: Finite | None = None
    alpha_sample: Finite | None = None
    capacity_pps: Finite | None = None
    mechanisms: dict[str, MechanismEntry] = {}
    #: role -> mechanism, as written; older files have none
    roles: dict[str, str] = {role: mechanism for mechanism, role in ROLE_OF_MECHANISM.items()}
    metadata: Metadata = Metadata()
    ci_method: str | None = None  # files that predate the per-mechanism field
    #: the application mechanisms' costs (files from before issue 27 have none)
    appmon: AppmonCalibration | None = None

    def for_role(self, role: str) -> MechanismEntry | None:
        """The fit behind ``alpha``, ``beta`` or ``alpha_sample``."""
        return self.mechanisms.get(self.roles.get(role, ""))


def read_calibration_file(
    path: str | os.PathLike[str], error: type[CosampleError] = CalibrationFileError
) -> CalibrationDocument:
    """The calibration at ``path``, validated; ``error`` names the file, field and value."""
    return validate(
        CalibrationDocument,
        read_document(path, "calibration", error=error),
        where=str(path),
        error=error,
    )
