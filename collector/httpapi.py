"""The collector daemon's HTTP interface: what the controller, Prometheus and operators read.

The snapshot's answers are bodies the service already holds (its bytes and signature in both
forms, made once per export): a request costs a reference read, not a render. ``/metrics``
renders at each scrape (every server's rows); ``/status`` is the counters alone.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from cosample.authenticity import HEADER
from cosample.collector import snapshotbin
from cosample.collector.errors import CollectorError
from cosample.httplimits import Limits
from cosample.httpserver import BoundedHTTPServer, send_body

if TYPE_CHECKING:  # the service imports this module
    from cosample.collector.service import Service


def http_server(service: "Service", host: str, port: int) -> BoundedHTTPServer:
    """The daemon's HTTP server on ``host:port`` (not started): ``/snapshot`` and
    ``/snapshot.bin`` (503 before the first export; signed with ``--snapshot-key``),
    ``/metrics``, ``/status``, ``/healthz``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            binary = path == snapshotbin.BINARY_PATH
            signature = None
            if path == "/snapshot" or binary:
                signed = service.signed_snapshot(binary=binary)
                if signed is None:  # not exported, or its first export not rendered yet
                    self.send_error(503, "no snapshot yet")
                    return
                body, signature = signed
                kind = snapshotbin.CONTENT_TYPE if binary else "application/json"
            elif path == "/metrics":
                body, kind = service.metrics.text(), "text/plain; version=0.0.4; charset=utf-8"
            elif path == "/healthz":
                body, kind = b"ok\n", "text/plain"
            elif path == "/status":
                body, kind = service.status_json(), "application/json"
            else:
                self.send_error(404, "try /snapshot, /snapshot.bin, /metrics, /status or /healthz")
                return
            send_body(self, body, kind, {HEADER: signature} if signature else None)

        def log_message(self, *args) -> None:
            pass

    try:
        return BoundedHTTPServer(
            (host, port),
            Handler,
            Limits(
                max_connections=service.settings.http_max_connections,
                idle_s=service.settings.http_idle_timeout_s,
            ),
        )
    except OSError as exc:
        raise CollectorError(
            f"--metrics-port {port}: cannot listen on {host} ({exc.strerror})"
        ) from None
