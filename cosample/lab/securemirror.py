"""The mirroring rig with nginx's secure ports: ``MirrorRig``'s switch, tunnel, kernel mirror and
analysis node, in front of ``SecureWebRig``'s nginx (HTTP/1.x on 80, h2c on 8080, HTTP/1.1 over
TLS on 443, h2 on 8443, each port with its own access log).

What each protocol's monitoring costs is measured on it (``python -m
cosample.experiments.appmon_protocol_calibration``) as the HTTP/1.x costs are on ``MirrorRig``:
the same switch, mechanisms and counters, one more load generator (``h2load`` for HTTP/2, run
for a duration as wrk is). Test rig only; needs root, OVS, nginx, wrk, h2load and curl.
"""

from __future__ import annotations

from cosample.dataplane.run import run
from cosample.lab.appmirror import MirrorRig, rig_unavailable
from cosample.lab.webtls import SecureWebRig, secure_available


def secure_rig_unavailable() -> str | None:
    """None when the secure mirroring rig can run here, else why not."""
    return rig_unavailable() or secure_available()


class SecureMirrorRig(SecureWebRig, MirrorRig):
    """``MirrorRig``'s network (``build_network``, ``set_mechanism``, counters, ``close``) with
    ``SecureWebRig``'s servers (``start_servers``, ``secure_url``, ``port_log``)."""

    def h2load_for(
        self, url: str, seconds: float, clients: int, streams: int = 1, threads: int = 1
    ) -> str:
        """h2load from the client namespace for ``seconds`` (timing-based: ``-D``, bounded by a
        timeout), ``clients`` connections with ``streams`` requests at once on each; its
        report."""
        argv = [
            "h2load",
            "-D",
            f"{seconds:g}",
            "-c",
            str(clients),
            "-m",
            str(streams),
            "-t",
            str(threads),
            url,
        ]
        return run(self.lab.exec_argv(self.client, argv), timeout=seconds + 30).stdout
