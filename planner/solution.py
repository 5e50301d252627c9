"""What every solver returns: how much each server samples locally and who mirrors to whom."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Solution:
    """A continuous optimum of the paper's LP, before rounding to sFlow's 1-in-N.

    ``local_pps[i]`` is the part of server i's own traffic it samples itself; mirror entry j says
    server ``mirror_src[j]`` sends ``mirror_pps[j]`` of its own traffic to ``mirror_dst[j]``.
    """

    solver: str
    collected_pps: float
    local_pps: np.ndarray
    mirror_src: np.ndarray
    mirror_dst: np.ndarray
    mirror_pps: np.ndarray
    seconds: float
    variables: int = 0
    lp_backend: str | None = None

    @property
    def offload_pps(self) -> np.ndarray:
        """Per server, the total of its own traffic it mirrors to others."""
        return np.bincount(self.mirror_src, weights=self.mirror_pps, minlength=self.local_pps.size)

    @property
    def received_pps(self) -> np.ndarray:
        """Per server, the mirrored traffic it receives and samples."""
        return np.bincount(self.mirror_dst, weights=self.mirror_pps, minlength=self.local_pps.size)

    @property
    def mirror_pairs(self) -> int:
        return int(np.count_nonzero(self.mirror_pps > 0))


def empty_mirrors() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
