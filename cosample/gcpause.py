"""Python's cyclic garbage collector paused while a bulk step builds millions of objects.

Reading a 10^5-server CSV fleet, or a controller cycle at 10^5 servers, allocates about 10^6
containers and makes no reference cycles; with the collector on, its repeated scans of the
growing heap took a third to a half of those steps (docs/results/controller.md, "Controller cycle" and
"Planning at scale"). Memory is still freed by reference counting meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, on again after it (and after any error) if it
    was on before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
