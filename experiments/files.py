"""Experiment results in and out: tidy CSVs, JSON, PNG figures (written atomically through
``cosample.files.write_atomic``, so a reader never sees half a file), calibration files read back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from cosample.experiments.errors import ExperimentError
from cosample.files import write_atomic

__all__ = [
    "output_dir",
    "read_calibration",
    "read_csv",
    "save_figure",
    "write_atomic",
    "write_csv",
    "write_json",
]


def output_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) if needed; a clear error if it cannot be a directory."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot create output directory: {exc.strerror}") from exc
    return path


def write_csv(frame: pd.DataFrame, path: str | Path, float_format: str | None = "%.10g") -> Path:
    """Tidy CSV without the index; missing values (e.g. infeasible gains) are empty fields.

    ``float_format=None`` keeps every digit (for values compared at high precision)."""
    return write_atomic(
        path, lambda stream: frame.to_csv(stream, index=False, float_format=float_format)
    )


def write_json(document: Any, path: str | Path) -> Path:
    """Indented, key-sorted JSON with a trailing newline."""
    return write_atomic(
        path, lambda stream: stream.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    )


def save_figure(figure: Any, path: str | Path, dpi: int = 110) -> Path:
    """Save a matplotlib figure as PNG and close it."""
    import matplotlib.pyplot as plt

    try:
        return write_atomic(
            path,
            lambda stream: figure.savefig(stream, format="png", dpi=dpi, bbox_inches="tight"),
            binary=True,
        )
    finally:
        plt.close(figure)


def read_calibration(path: str | Path) -> dict[str, float]:
    """``alpha``, ``beta`` (and ``capacity_pps`` if present) from a ``cosample fit`` JSON file."""
    from cosample.costmodel.coefficients import CalibrationFileError, read_coefficients

    try:
        return read_coefficients(path)
    except CalibrationFileError as exc:
        raise ExperimentError(str(exc)) from None


def read_csv(path: str | Path, required: tuple[str, ...]) -> pd.DataFrame:
    """Read a tidy CSV and check it has the ``required`` columns."""
    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise ExperimentError(f"{path}: no such file") from None
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ExperimentError(f"{path}: cannot read as CSV: {exc}") from exc
    missing = [column for column in required if column not in frame.columns]
    if missing:
        raise ExperimentError(
            f"{path}: missing column(s) {', '.join(missing)} "
            f"(found: {', '.join(map(str, frame.columns))})"
        )
    return frame
