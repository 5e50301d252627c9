"""Errors the controller raises on purpose."""

from __future__ import annotations

from cosample.errors import CosampleError


class ControllerError(CosampleError):
    """A controller failure whose message names the input, the field and the bad value."""


class InventoryError(ControllerError):
    """A bad inventory (or a calibration it names): the controller does not start."""


class SnapshotError(ControllerError):
    """A snapshot that cannot be fetched, parsed or reconciled with the inventory.

    The cycle keeps the current plan and reports the message; nothing is published.
    """
