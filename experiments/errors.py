"""Errors the experiments raise on purpose."""

from __future__ import annotations

from cosample.errors import CosampleError


class ExperimentError(CosampleError):
    """Bad experiment settings or input data; the message names the option or file and the problem."""
