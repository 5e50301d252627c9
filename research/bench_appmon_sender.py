"""The sender of ``bench_appmon_saturation``: tcpreplay (Debian ``tcpreplay``) offering a
recording at a fixed frame rate on one end of a veth pair, looped as often as a step needs.

A Python sender (a packet socket paced every millisecond) reached 14,000-37,000 frames/s on
this shared machine, so the analyser was never offered 100,000; tcpreplay with the recording
preloaded (``--preload-pcap``) paces in C and offers 150,000-260,000 frames/s here.

Loops repeat the recording as it is, the same 5-tuples each time: every connection of the
recording opens with a SYN and ends with a FIN, so the analyser pairs each loop's requests and
responses as it paired the first (``appmon replay`` of a recording looped three times counts
exactly three times its requests and responses); the benchmark checks that in every step
(``counts_right``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from research.bench_appmon_records import favour

SENDER = "tcpreplay"
#: tcpreplay's report: "Actual: 270280 packets (65279825 bytes) sent in 1.80 seconds", and its
#: device statistics' "Failed packets:          0"
ACTUAL = re.compile(r"^Actual: (\d+) packets \(\d+ bytes\) sent in ([\d.]+) seconds", re.M)
FAILED = re.compile(r"^\s*Failed packets:\s+(\d+)", re.M)


def sender_missing() -> str | None:
    """None when the sender is installed, else one line saying what to install."""
    if shutil.which(SENDER):
        return None
    return (
        f"{SENDER} is not installed (Debian package tcpreplay: "
        "`source bin/bootstrap.sh; install_system full`)"
    )


def loops_for(rate: float, seconds: float, recording: int) -> int:
    """Whole passes over a recording of ``recording`` frames that come closest to ``seconds``
    at ``rate`` frames per second (at least one)."""
    if recording < 1 or rate <= 0 or seconds <= 0:
        raise ValueError(f"loops_for: rate {rate}, seconds {seconds}, recording {recording}")
    return max(1, round(rate * seconds / recording))


def sender_argv(interface: str, pcap: Path, rate: float, loops: int, nice: int = 0) -> list[str]:
    """tcpreplay offering ``pcap`` on ``interface``: ``loops`` passes at ``rate`` frames per
    second, the file in memory first (its start-up is not the step's); ``nice`` below 0: the
    sender's scheduling priority raised (``nice(1)``), on a machine whose other processes
    would otherwise leave it a fraction of its core."""
    if rate < 1 or loops < 1 or not -20 <= nice <= 19:
        raise ValueError(f"sender_argv: rate {rate}, loops {loops}, nice {nice}")
    return [
        *(["nice", "-n", str(nice)] if nice else []),
        SENDER,
        f"--intf1={interface}",
        "--preload-pcap",
        f"--pps={round(rate)}",
        f"--loop={loops}",
        str(pcap),
    ]


def sent(report: str) -> tuple[int, float, int]:
    """(frames sent, seconds, frames the device refused) from tcpreplay's report."""
    actual, failed = ACTUAL.search(report), FAILED.search(report)
    if not actual or not failed:
        raise ValueError(
            f"tcpreplay's report has no 'Actual:' or 'Failed packets:' line: {report!r}"
        )
    return int(actual[1]), float(actual[2]), int(failed[1])


def offer(
    interface: str, pcap: Path, rate: float, loops: int, frames: int, nice: int = 0
) -> tuple[int, float, int]:
    """Run the sender for one step (``frames``: the recording's length); (sent, seconds,
    refused). The timeout is total: four times the step's nominal time, and at least 60 s;
    ``nice``: the sender's, in a session of its own (``favour``)."""
    timeout = max(60.0, 4 * frames * loops / rate)
    done = subprocess.run(
        sender_argv(interface, pcap, rate, loops),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        start_new_session=True,
        preexec_fn=(lambda: favour(os.getpid(), nice)) if nice else None,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tcpreplay exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return sent(done.stdout)
