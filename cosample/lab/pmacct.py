"""pmacct's ``sfacctd`` as a peer collector for tests and benchmarks: started, read, stopped by PID.

It aggregates by sFlow agent (``peer_src_ip``) and prints CSV every second, appending, so every
purge is kept; ``packets()`` sums the rows per agent. With ``renormalize`` each sample counts
``sampling_rate`` packets (``sfacctd_renormalize``), without it one: the number of samples.
"""

from __future__ import annotations

import csv
import shutil
import socket
import subprocess
import time
from pathlib import Path

from cosample.collector.errors import CollectorError


def sfacctd_available() -> str | None:
    """None when sfacctd can run here, else why not."""
    return None if shutil.which("sfacctd") else "sfacctd not installed (Debian package pmacct)"


def free_udp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def count_capture(
    directory: str | Path, capture: str | Path, *, renormalize: bool = True, timeout_s: float = 60.0
) -> dict[str, int]:
    """Packets per agent as ``sfacctd`` counts a pcap of sFlow datagrams (``pcap_savefile``).

    Deterministic where a live socket is not: nothing can be lost on the way.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    peer = Sfacctd(directory, renormalize=renormalize)
    config = directory / "sfacctd-pcap.conf"
    config.write_text(
        "\n".join(
            [
                "daemonize: false",
                f"pcap_savefile: {Path(capture).resolve()}",
                "pcap_savefile_wait: false",
                f"sfacctd_renormalize: {'true' if renormalize else 'false'}",
                "plugins: print",
                "aggregate: peer_src_ip",
                "print_output: csv",
                f"print_output_file: {peer.output}",
                "print_refresh_time: 1",
                "print_output_file_append: true",
                "",
            ]
        )
    )
    try:
        result = subprocess.run(
            ["sfacctd", "-f", str(config)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CollectorError(
            f"sfacctd did not finish reading {capture} in {timeout_s:g} s"
        ) from None
    if result.returncode != 0:
        raise CollectorError(f"sfacctd failed on {capture}: {result.stdout[-300:]}")
    return peer.packets()


class Sfacctd:
    """``with Sfacctd(directory) as peer: ... peer.packets()``."""

    def __init__(
        self,
        directory: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        renormalize: bool = True,
        receive_buffer: int = 32 << 20,
        preexec_fn=None,
    ) -> None:
        self.directory = Path(directory)
        self.host, self.port = host, port or free_udp_port(host)
        self.renormalize, self.receive_buffer = renormalize, receive_buffer
        self.preexec_fn = preexec_fn  # e.g. the benchmark's PR_SET_PDEATHSIG
        self.output = self.directory / "sfacctd.csv"
        self.log = self.directory / "sfacctd.log"
        self._process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> "Sfacctd":
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "sfacctd.conf"
        config.write_text(
            "\n".join(
                [
                    "daemonize: false",
                    f"sfacctd_ip: {self.host}",
                    f"sfacctd_port: {self.port}",
                    f"sfacctd_renormalize: {'true' if self.renormalize else 'false'}",
                    f"sfacctd_pipe_size: {self.receive_buffer}",
                    "plugins: print",
                    "aggregate: peer_src_ip",
                    "print_output: csv",
                    f"print_output_file: {self.output}",
                    "print_refresh_time: 1",
                    "print_output_file_append: true",
                    "",
                ]
            )
        )
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                ["sfacctd", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self.preexec_fn,
            )
        deadline = time.monotonic() + timeout_s
        while "waiting for sFlow data" not in self.log.read_text(errors="replace"):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CollectorError(f"sfacctd did not start: {self.log.read_text()[-500:]}")
            time.sleep(0.1)
        return self

    def packets(self) -> dict[str, int]:
        """Packets (or samples, without renormalisation) per agent address, summed over purges."""
        totals: dict[str, int] = {}
        if not self.output.exists():
            return totals
        with self.output.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("PEER_SRC_IP") and row.get("PACKETS", "").isdigit():
                    totals[row["PEER_SRC_IP"]] = totals.get(row["PEER_SRC_IP"], 0) + int(
                        row["PACKETS"]
                    )
        return totals

    def settle(self, quiet_s: float = 2.5, timeout_s: float = 30.0) -> dict[str, int]:
        """Wait until the totals stop changing for ``quiet_s`` (the last purge is written)."""
        deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
        while time.monotonic() < deadline:
            now = self.packets()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
            time.sleep(0.25)
        return last or {}

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        self._process = None

    def __enter__(self) -> "Sfacctd":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
