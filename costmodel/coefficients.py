"""The part of a calibration file other tools use: ``alpha``, ``beta`` and ``capacity_pps``
(and ``alpha_sample`` when the calibration measured OVS's cached ``sample`` action).

The planner (a server's ``calibration``), the experiments (``--calibration``), the controller's
inventory and the testbed read coefficients through these functions, which read the file through
``calibration_file``: every reader accepts and rejects the same files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from cosample.costmodel.calibration_file import (
    CalibrationDocument,
    CalibrationFileError,
    read_calibration_file,
)
from cosample.validation import problem

__all__ = ["KEYS", "CalibrationFileError", "coefficients", "intervals", "read_coefficients"]

KEYS = ("alpha", "beta", "capacity_pps", "alpha_sample")


def read_coefficients(
    path: str | os.PathLike[str], required: Iterable[str] = ("alpha", "beta")
) -> dict[str, float]:
    """The positive ``alpha``/``beta``/``capacity_pps`` of the calibration file at ``path``."""
    return coefficients(read_calibration_file(path), path, required)


def coefficients(
    document: CalibrationDocument,
    where: str | os.PathLike[str],
    required: Iterable[str] = ("alpha", "beta"),
) -> dict[str, float]:
    """The positive ``alpha``/``beta``/``capacity_pps`` a calibration holds.

    Keys in ``required`` must be there; the others are returned when present and not null
    (``cosample fit`` writes null for a mechanism it did not measure). ``where`` names the file
    in errors.
    """
    found = {}
    for key in KEYS:
        value = getattr(document, key)
        if value is None:
            if key in required:
                raise problem(
                    (key,),
                    "missing: the planner needs it (a finite number > 0)",
                    where=str(where),
                    error=CalibrationFileError,
                )
            continue
        if value <= 0:
            raise CalibrationFileError(
                f"{where}: {key} = {value:.4g}: the planner needs a value > 0, and this calibration "
                "measured none (see its warnings); re-measure, or give it explicitly"
            )
        found[key] = float(value)
    return found


def intervals(document: CalibrationDocument) -> dict[str, tuple[float, float]]:
    """The calibration's confidence intervals of ``alpha``, ``beta``, ``alpha_sample`` and
    ``capacity_pps``.

    Each comes from the mechanism the file's ``roles`` names (``sflow`` and ``mirror`` in older
    files); capacity's interval spans alpha's and beta's mechanisms' capacity intervals (lowest low
    end, highest high end). Missing ends leave an interval out.
    """
    found: dict[str, tuple[float, float]] = {}
    capacity: list[tuple[float, float]] = []
    for role in ("alpha", "beta", "alpha_sample"):
        fit = document.for_role(role)
        if fit is None:
            continue
        if (interval := fit.interval("coefficient_ci")) is not None:
            found[role] = interval
        if role != "alpha_sample" and (interval := fit.interval("capacity_ci")) is not None:
            capacity.append(interval)
    if capacity:
        found["capacity_pps"] = (min(low for low, _ in capacity), max(high for _, high in capacity))
    return found
