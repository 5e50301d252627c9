"""The paper's cost law (Sec. III): throughput falls as ``T(s) = T0 / (1 + a*s)``.

``s`` in [0, 1] is the fraction of packets sampled (or mirrored), ``T0`` the throughput with no
sampling (the server's capacity, packets/s) and ``a`` the mechanism's cost per packet relative to
forwarding one. Pure functions only, plus a seeded generator of synthetic measurements used to
test the fit against a known answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from cosample.costmodel.paper import PAPER_COEFFICIENTS  # noqa: F401 - the paper's, re-exported


def throughput(rate: np.ndarray | float, capacity_pps: float, coefficient: float) -> np.ndarray:
    """``T(s) = T0 / (1 + a*s)``: the packet rate a server sustains at sampling rate ``s``."""
    return capacity_pps / (1.0 + coefficient * np.asarray(rate, dtype=float))


def coefficient_from_drop(rate: float, relative_throughput: float) -> float:
    """The ``a`` for which ``T(rate)/T0`` equals ``relative_throughput`` (inverse of the law)."""
    if not 0 < rate <= 1 or not 0 < relative_throughput:
        raise ValueError("rate must be in (0, 1] and relative_throughput > 0")
    return (1.0 / relative_throughput - 1.0) / rate


def simulate(
    coefficients: Mapping[str, float],
    capacity_pps: float,
    rates: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    repetitions: int = 3,
    noise: float = 0.01,
    seed: int = 0,
) -> pd.DataFrame:
    """Tidy synthetic measurements from the law with multiplicative Gaussian noise.

    One row per (mechanism, rate, trial); ``noise`` is the relative standard deviation.
    Seeded, so tests recover the coefficients reproducibly.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for mechanism, coefficient in coefficients.items():
        for rate in rates:
            exact = float(throughput(rate, capacity_pps, coefficient))
            for trial in range(repetitions):
                rows.append(
                    {
                        "mechanism": mechanism,
                        "rate": float(rate),
                        "trial": trial,
                        "throughput_pps": exact * (1.0 + noise * rng.standard_normal()),
                    }
                )
    return pd.DataFrame(rows, columns=["mechanism", "rate", "trial", "throughput_pps"])
