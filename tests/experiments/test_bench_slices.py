"""bench_slices at a small size: every figure it prints is there and consistent (no timing is
asserted: the sizes and bytes are what the design promises)."""

from __future__ import annotations

from research import bench_slices


def test_bench_slices_measures_bytes_and_costs(capsys):
    result = bench_slices.measure(400, two_phase=True)
    plan, planset = result["plan"], result["plan set"]
    assert plan["hosts"] == planset["hosts"] == 400
    assert plan["slice_bytes_max"] < 5000 < plan["plan_bytes"]
    assert planset["slice_bytes_median"] > plan["slice_bytes_median"]  # two phases each
    polls = {(row["host"], row["stage"]): row for row in plan["agent"]}
    for host in {row["host"] for row in plan["agent"]}:
        first, same = polls[host, "first poll"], polls[host, "unchanged poll"]
        after = polls[host, "next publication"]
        assert same["bytes"] < 400 < first["bytes"] < plan["slice_bytes_max"] + 400
        assert first["versions"] == same["versions"] == [101] and after["versions"] == [102]
    bench_slices._print(result)
    assert "a signature per slice instead would cost" in capsys.readouterr().out
