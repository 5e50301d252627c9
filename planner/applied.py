"""The plan as the switches apply it (``Realised``): what ``realise`` rounds a solution to, and
what the plan file, its report and the application part read (``Solution.applied``).

A record alone, so that whoever reads it needs none of the modules that compute it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Realised:
    """Rates as they will be configured, and the load and volumes they predict per server."""

    planned_rate: np.ndarray  # continuous fraction sampled locally (the optimum)
    local_rate: np.ndarray  # applied: 1/N, or 0
    sflow_sampling: np.ndarray  # N per server, 0 meaning no local sampling by sFlow
    local_pps: np.ndarray  # own packets sampled locally: U / N
    mirror_src: np.ndarray
    mirror_dst: np.ndarray
    mirror_pps: np.ndarray  # after the top-up
    planned_mirror_pps: np.ndarray  # before it (the continuous optimum)
    load_pps: np.ndarray
    distinct_pps: np.ndarray  # distinct own packets collected per server
    inbound_distinct_pps: float  # extra distinct packets from bridges sampling inbound traffic
    samples_pps: float  # samples/s sent to the collector (overlap and inbound included)
    #: K per server sampling by the sample action (rate K/65535), 0 elsewhere; None: no server
    sample_probability: np.ndarray | None = None

    @property
    def collected_pps(self) -> float:
        """Distinct packets collected: own traffic of every server, plus inbound extras."""
        return float(self.distinct_pps.sum()) + self.inbound_distinct_pps
