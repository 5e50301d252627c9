"""The collector's sliding window for the controller's loop tests: see
``research.loop_window`` (a step in traffic reaches the controller as a ramp)."""

from research.loop_window import (  # noqa: F401
    TESTBED,
    chunked_noise,
    reader_for,
    run,
    swapped,
    windowed,
)
