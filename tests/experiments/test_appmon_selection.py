"""``research.appmon_selection`` on the committed real capture."""

from __future__ import annotations

from pathlib import Path

from cosample.appmon.pcap import frames
from research import appmon_selection as selection

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "appmon" / "pipelined-nginx.pcap"


def test_selections_nest_and_cutting_only_shrinks():
    requests, totals = selection.count(CAPTURE, 80, 78)
    assert requests == 60
    order = ("psh", "psh+ends", "server_all", "all")
    for smaller, larger in zip(order, order[1:]):
        assert totals[smaller][0] <= totals[larger][0] and totals[smaller][1] <= totals[larger][1]
    for copies, whole, cut in totals.values():
        assert copies * (78 + selection.VXLAN_OVERHEAD) >= cut and cut <= whole
    # the capture kept 256 bytes of each frame: bytes are counted at the wire's length
    captured = sum(len(frame) + selection.VXLAN_OVERHEAD for _, frame in frames(CAPTURE))
    assert totals["all"][0] == sum(1 for _ in frames(CAPTURE))
    # 18 bodies of 3000 bytes in frames of which at most 190 payload bytes each were kept
    assert totals["all"][1] > captured + 18 * (3000 - 3 * 190)


def test_the_command_prints_per_request_figures(capsys):
    assert selection.main([str(CAPTURE), "--cut", "96"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("60 requests; per request:") and "cut to 96" in out
    assert selection.main([str(CAPTURE), "--port", "8080"]) == 2
    assert "no request to port 8080" in capsys.readouterr().err
