"""Errors the cost model raises on purpose; each message says what was wrong and where."""

from __future__ import annotations

from cosample.errors import CosampleError


class CostModelError(CosampleError):
    """Base of every expected cost-model failure."""


class DataError(CostModelError):
    """A measurements table that is missing columns, empty, or holds values out of range."""


class FitError(CostModelError):
    """Data that cannot identify the model (too few points or rates), or a fit that failed."""


class HarnessError(CostModelError):
    """A calibration run that could not set up, measure or clean up."""
