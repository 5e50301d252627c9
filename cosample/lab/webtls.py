"""The web rig with HTTP/2 and TLS: the same nginx and backend, on three more ports.

- ``H2C_PORT`` (8080): HTTP/2 in clear text (``listen ... http2``: prior knowledge, as h2load
  and gRPC speak it);
- ``TLS_PORT`` (443): HTTP/1.1 over TLS 1.2 or 1.3 (ALPN offers http/1.1 only);
- ``H2_PORT`` (8443): HTTP/2 over TLS (ALPN h2).

A self-signed certificate for the server's address is made at start (``cryptography``, EC
P-256). Each port has its own access log (``access-PORT.log``) with nginx's connection serial
number and TLS version beside the base rig's fields, so a test counts requests, statuses and
connections per service. Clients: ``h2load`` (Debian nghttp2-client), ``wrk`` over https, and
``curl`` with ``SSLKEYLOGFILE`` (the session keys tshark needs to decrypt the capture: the
ground truth's peer). Test rig only; needs root.
"""

from __future__ import annotations

import datetime
import ipaddress
import textwrap
from dataclasses import dataclass
from pathlib import Path

from cosample.dataplane.run import CommandError, require, run
from cosample.lab.web import BACKEND_PORT, LOG_FORMAT, SERVER_ADDRESS, WebRig, web_available

H2C_PORT, TLS_PORT, H2_PORT = 8080, 443, 8443
PORTS = {"h2c": H2C_PORT, "tls": TLS_PORT, "h2": H2_PORT}
SERVERS = textwrap.dedent("""\
    log_format secure '{log_format} $connection $ssl_protocol';
    server {{
        listen {address}:{h2c} http2;
        access_log {root}/access-{h2c}.log secure;
        location /fast {{ return 200 "ok"; }}
        location / {{ proxy_pass http://127.0.0.1:{backend}; }}
    }}
    server {{
        listen {address}:{tls} ssl;
        ssl_certificate {root}/cert.pem;
        ssl_certificate_key {root}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        access_log {root}/access-{tls}.log secure;
        location /fast {{ return 200 "ok"; }}
        location / {{ proxy_pass http://127.0.0.1:{backend}; }}
    }}
    server {{
        listen {address}:{h2} ssl http2;
        ssl_certificate {root}/cert.pem;
        ssl_certificate_key {root}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        access_log {root}/access-{h2}.log secure;
        location /fast {{ return 200 "ok"; }}
        location / {{ proxy_pass http://127.0.0.1:{backend}; }}
    }}
    """)


def secure_available() -> str | None:
    """None when the secure rig can run here, else why not."""
    reason = web_available()
    if reason:
        return reason
    for program, package in (("h2load", "nghttp2-client"), ("curl", "curl")):
        try:
            require(program, package)
        except CommandError as exc:
            return str(exc)
    return None


def write_certificate(directory: Path, address: str = SERVER_ADDRESS) -> None:
    """A self-signed certificate (``cert.pem``) and its key (``key.pem``) for ``address``."""
    # cryptography's x509 loads OpenSSL's bindings: deferred to when a certificate is made
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cosample-lab")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (directory / "key.pem").chmod(0o600)


@dataclass(frozen=True)
class SecureEntry:
    """One access-log line of a secure port."""

    start: float
    request_time: float
    status: int
    connection: int
    tls: str  # "TLSv1.3", or "-" in clear text


class SecureWebRig(WebRig):
    """``WebRig`` with the h2c, TLS and h2 ports; ``url(port=...)`` addresses one."""

    def start_servers(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_certificate(self.directory)
        super().start_servers()

    def extra_servers(self) -> str:
        return SERVERS.format(
            log_format=LOG_FORMAT,
            address=SERVER_ADDRESS,
            root=self.directory,
            backend=BACKEND_PORT,
            **PORTS,
        )

    def secure_url(self, port: int, path: str = "/", **query: float) -> str:
        scheme = "http" if port == H2C_PORT else "https"
        text = "&".join(f"{key}={value}" for key, value in query.items())
        return f"{scheme}://{SERVER_ADDRESS}:{port}{path}" + (f"?{text}" if text else "")

    def port_log(self, port: int) -> list[SecureEntry]:
        path = self.directory / f"access-{port}.log"
        entries = []
        for line in path.read_text().splitlines() if path.exists() else []:
            fields = line.split(" ")
            msec, request_time, status = float(fields[0]), float(fields[1]), int(fields[2])
            entries.append(
                SecureEntry(msec - request_time, request_time, status, int(fields[-2]), fields[-1])
            )
        return entries

    def h2load(
        self, url: str, requests: int, clients: int = 2, streams: int = 1, timeout_s: float = 60
    ) -> str:
        """h2load from the client namespace (bounded: ``requests`` and a timeout); its report."""
        argv = ["h2load", "-n", str(requests), "-c", str(clients), "-m", str(streams), url]
        return run(self.lab.exec_argv(self.client, argv), timeout=timeout_s).stdout

    def curl(self, urls: list[str], keylog: Path, extra: tuple[str, ...] = ()) -> str:
        """curl fetching ``urls`` in turn on one connection (keep-alive), writing the session
        keys to ``keylog`` (``SSLKEYLOGFILE``); one ``STATUS VERSION`` line per URL."""
        argv = ["env", f"SSLKEYLOGFILE={keylog}", "curl", "-sk", "--max-time", "30", *extra]
        argv += ["-w", "%{http_code} %{http_version}\\n"]
        for url in urls:
            argv += ["-o", "/dev/null", url]
        return run(self.lab.exec_argv(self.client, argv), timeout=60).stdout
