"""The part of a calibration file other tools use: ``alpha``, ``beta`` and ``capacity_pps``.

The planner (a server's ``calibration``), the experiments (``--calibration``) and the testbed
read calibration JSON through this one function, so they accept and reject the same files.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

from cosample.costmodel.errors import CostModelError

KEYS = ("alpha", "beta", "capacity_pps")


class CalibrationFileError(CostModelError):
    """A calibration file that cannot be read or lacks a usable coefficient."""


def read_coefficients(path: str | os.PathLike[str],
                      required: Iterable[str] = ("alpha", "beta")) -> dict[str, float]:
    """The finite, positive ``alpha``/``beta``/``capacity_pps`` the file holds.

    Keys in ``required`` must be there; the others are returned when present and not null
    (``cosample fit`` writes null for a mechanism it did not measure).
    """
    path = Path(path)
    required = set(required)
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise CalibrationFileError(f"{path}: cannot read calibration: {reason}") from None
    except json.JSONDecodeError as exc:
        raise CalibrationFileError(f"{path}: calibration is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise CalibrationFileError(f"{path}: calibration must be a JSON object with alpha and beta")
    found = {}
    for key in KEYS:
        value = document.get(key)
        if value is None and key not in required:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise CalibrationFileError(f"{path}: {key}: expected a finite number > 0, got {value!r}")
        if value <= 0:
            raise CalibrationFileError(
                f"{path}: {key} = {value:.4g}: the planner needs a value > 0, and this calibration "
                "measured none (see its warnings); re-measure, or give it explicitly")
        found[key] = float(value)
    return found


#: Mechanisms behind alpha and beta in files written before ``roles`` was recorded.
DEFAULT_ROLES = {"alpha": "sflow", "beta": "mirror"}


def read_intervals(path: str | os.PathLike[str]) -> dict[str, tuple[float, float]]:
    """The calibration's confidence intervals of ``alpha``, ``beta`` and ``capacity_pps``.

    alpha and beta come from the mechanisms the file's ``roles`` name (``sflow`` and ``mirror``
    in older files); capacity's interval spans those mechanisms' capacity intervals (lowest low
    end, highest high end). Missing or non-finite ends are left out. Call after
    ``read_coefficients`` has accepted the file.
    """
    document = json.loads(Path(path).read_text())
    mechanisms = document.get("mechanisms") if isinstance(document, dict) else None
    if not isinstance(mechanisms, dict):
        return {}
    roles = document.get("roles") if isinstance(document.get("roles"), dict) else DEFAULT_ROLES
    found: dict[str, tuple[float, float]] = {}
    capacity: list[tuple[float, float]] = []
    for role in ("alpha", "beta"):
        fit = mechanisms.get(roles.get(role, DEFAULT_ROLES[role]))
        if not isinstance(fit, dict):
            continue
        interval = _interval(fit.get("coefficient_ci"))
        if interval is not None:
            found[role] = interval
        interval = _interval(fit.get("capacity_ci"))
        if interval is not None:
            capacity.append(interval)
    if capacity:
        found["capacity_pps"] = (min(low for low, _ in capacity), max(high for _, high in capacity))
    return found


def _interval(value) -> tuple[float, float] | None:
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                    for x in value) and value[0] <= value[1]):
        return float(value[0]), float(value[1])
    return None
