"""The examples in docs/costmodel.md load, and the committed real calibration refits to the
committed JSON (same data, same seed: same numbers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cosample.costmodel.data import read_measurements
from cosample.costmodel.fit import CostModelFit
from cosample.planner.datacentre import DataCentre

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = (DOCS / "costmodel.md").read_text()


def block(language: str) -> str:
    match = re.search(rf"```{language}\n(.*?)```", PAGE, re.S)
    assert match, f"no {language} example in docs/costmodel.md"
    return match.group(1)


def test_csv_example_fits(tmp_path):
    (tmp_path / "m.csv").write_text(block("csv"))
    model = CostModelFit(n_bootstrap=100).fit(read_measurements(tmp_path / "m.csv"))
    assert model.alpha_ == pytest.approx(1.54, abs=0.02)
    assert model.beta_ == pytest.approx(0.46, abs=0.02)


def test_json_example_drives_the_planner(tmp_path):
    (tmp_path / "server.json").write_text(block("json"))
    description = {
        "cost": {"alpha": 1.0, "beta": 0.5},
        "servers": [{"name": "s1", "calibration": "server.json"}],
    }
    (tmp_path / "dc.json").write_text(json.dumps(description))
    dc = DataCentre.load(tmp_path / "dc.json")
    assert (dc.alpha[0], dc.beta[0], dc.capacity_pps[0]) == (1.52, 0.46, 99840.0)


#: Calibrations of 2026-11-25 (run design side by side): data and JSON, no figures.
WITHOUT_FIGURE = [
    *(
        f"cpu-mirror_vxlan-{length}-seed{seed}"
        for length, seed in (
            ("4s", 21),
            ("2s", 22),
            ("4s", 23),
            ("2s", 24),
            ("4s", 25),
            ("2s", 26),
            ("2s", 28),
            ("4s", 27),
        )
    ),
    *(
        f"cpu-sflow-{design}-seed{seed}"
        for design, seed in (
            ("old12s", 31),
            ("6s", 32),
            ("old12s", 35),
            ("6s", 36),
            ("old12s", 39),
            ("6s", 40),
        )
    ),
    "cpu-mirror-12s-seed33",
    "cpu-mirror-4s-seed34",
    # issue 24: local samplers at any probability beside sFlow (docs/results/costmodel.md)
    "localsample/calibration-udp64",
    "localsample/calibration-udp64-64flows",
]


@pytest.mark.parametrize(
    "name",
    [
        *WITHOUT_FIGURE,
        "calibration-udp64",
        "calibration-tcp",
        "calibration-udp64-mirrors",
        *(
            f"{method}-{mechanism}"
            for method in ("cpu", "throughput")
            for mechanism in ("sflow", "mirror", "mirror_vxlan")
        ),
        "cpu-sflow-3rates",
        "cpu-sflow-first",
        "cpu-pilot",
        "cpu-mirror_vxlan-240s",
        "cpu-mirror_vxlan-4s-seed8",
        "cpu-mirror_vxlan-12s-control",
        "cpu-sflow-1550",
        "cpu-mirror-1550",
        *(f"cpu-mirror_vxlan-default-seed{seed}" for seed in (9, 10, 12)),
        *(f"cpu-{mechanism}-morning" for mechanism in ("sflow", "mirror", "mirror_vxlan")),
        "throughput-mirror-morning",
    ],
)
def test_committed_calibration_is_reproducible(name):
    csv, saved = DOCS / "data" / f"{name}.csv", DOCS / "data" / f"{name}.json"
    if not csv.exists():
        pytest.skip(f"{csv.name} not committed")
    document = json.loads(saved.read_text())
    entries = document["mechanisms"].values()
    # refit with the estimator that made the file: the cluster-robust fit (and its covariates)
    # for files that say so, the residual bootstrap for the older ones
    methods = [str(e.get("ci_method", "")) for e in entries]
    interval = (
        "cluster-cr1"
        if any(m.startswith("cluster-robust (CR1)") for m in methods)
        else "cluster"
        if any(m.startswith("cluster") for m in methods)
        else "bootstrap"
    )
    covariates = {
        m: (e.get("covariate") or {}).get("name") for m, e in document["mechanisms"].items()
    }
    refit = (
        CostModelFit(interval=interval, covariates=covariates)
        .fit(read_measurements(csv))
        .calibration_.to_dict()
    )
    for mechanism, entry in document["mechanisms"].items():
        # the CSV holds 6 significant digits; the JSON was fitted on the unrounded values
        again = refit["mechanisms"][mechanism]
        assert again["coefficient"] == pytest.approx(entry["coefficient"], rel=1e-4, abs=1e-4)
        assert again["coefficient_ci"] == pytest.approx(entry["coefficient_ci"], rel=1e-3, abs=1e-3)
    if name != "cpu-pilot" and name not in WITHOUT_FIGURE:  # the covariate pilot has no figure
        assert (DOCS / "figures" / f"{name}.png").stat().st_size > 20_000
