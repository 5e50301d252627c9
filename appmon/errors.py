"""The application monitor's error type."""

from cosample.errors import CosampleError


class AppmonError(CosampleError):
    """Bad appmon input (capture, option, interface) or an unusable capture socket."""
