"""The collector's error type."""

from cosample.errors import CosampleError


class CollectorError(CosampleError):
    """Bad collector input (plan, inventory, snapshot, capture, address) or an unusable socket."""
