"""The controller's memory kept between cycles instead of handed back to the kernel and faulted in again.

A publishing cycle at 10^6 servers builds and drops about 2 GB of arrays and bytes (a 5·10^6
entry matrix, 10^6-host columns, a 204 MB plan and a 148 MB report). With the defaults, glibc
returns every block above its mmap threshold to the kernel when freed, and the next one is
fresh memory the kernel must fault in and zero, page by page; and numpy asks for transparent
huge pages on every large array (``MADV_HUGEPAGE``), which on these machines
(``transparent_hugepage/defrag = madvise``) makes such a fault compact memory first. Both showed
as kernel time, over a third of a publishing cycle at 10^6 (docs/results/controller.md, "Controller
cycle", with the numbers). Keeping freed memory in the process for the next allocation (one
cycle's arrays are the next one's sizes) and plain 4 kB pages cut most of that kernel time. The
process then holds its peak from one cycle to the next (the peak itself was not higher in the
benchmark's first cycle, 1,922 MB against 1,944 MB; over four publications in one process it
was 2.07 GB against 1.93 GB).

Process-wide: ``controller run`` calls ``keep_memory`` once at start (and the benchmark's
controller process, which runs cycles as ``controller run`` would). Neither knob changes what
is computed: the plan's bytes are the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from types import ModuleType

log = logging.getLogger("cosample.controller")

#: glibc's ``mallopt`` parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: Free memory at the top of the heap kept up to this much (bytes; mallopt takes an int).
KEEP_BYTES = 2**31 - 1


def keep_memory() -> list[str]:
    """Turn off numpy's huge-page advice and make glibc keep freed memory for reuse; returns
    what was done (empty where neither applies: another C library, another numpy)."""
    done = []
    multiarray: ModuleType  # its switch is private: not in numpy's type information
    try:  # numpy's own switch (what NUMPY_MADVISE_HUGEPAGE=0 sets at import)
        try:
            from numpy._core import multiarray  # numpy 2
        except ImportError:
            from numpy.core import multiarray  # numpy 1.26
        multiarray._set_madvise_hugepage(False)
        done.append("numpy huge-page advice off")
    except (ImportError, AttributeError):
        pass
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):  # not glibc: nothing to tune
        mallopt = None
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        # every block from the heap (no mmap per large block), the heap's top kept when freed
        if mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) == 1:
            done.append("glibc keeps freed memory")
    if done:
        log.debug("memory: %s", ", ".join(done))
    return done
