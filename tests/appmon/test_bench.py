"""The benchmark runs end to end on a small capture and agrees with tshark (its speed is not checked)."""

from __future__ import annotations

import shutil

import pytest
from appmon_traffic import Conversation, request, response

from cosample.appmon.pcap import write_pcap
from research.bench_appmon import main


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (Debian package tshark)")
def test_benchmark_compares_with_tshark(tmp_path, capsys):
    frames = []
    for k in range(5):
        c = Conversation(cport=30000 + k)
        frames += c.handshake(100.0 + k)
        for i in range(4):
            start = 100.0 + k + i * 0.1
            frames += [
                c.send(start, request(f"/{i}")),
                c.send(start + 0.002 * (i + 1), response(500 if i == 3 else 200), False),
            ]
    path = write_pcap(tmp_path / "small.pcap", sorted(frames, key=lambda item: item[0]))
    assert main(["--capture", str(path), "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line[:34].strip(): line[34:].split() for line in out.splitlines()[2:5]}
    analyser, tshark = rows["analyser (frames in memory)"], rows["tshark, fields http.time"]
    assert analyser[:2] == tshark[:2] == ["20", "5"]  # responses, 5xx
    assert float(analyser[2]) == pytest.approx(float(tshark[2]), abs=0.001)  # mean ms
    assert "analyser / tshark, frames per CPU second" in out
