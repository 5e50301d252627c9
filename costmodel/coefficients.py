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
