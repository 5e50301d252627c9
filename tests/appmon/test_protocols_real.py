"""Ground truth for HTTP/2 and HTTP over TLS (root, nginx with TLS and HTTP/2, h2load, wrk,
curl with ``SSLKEYLOGFILE``, tshark): ``cosample.experiments.appmon_protocols`` on a short run.

- h2c (h2load, 8 streams at once per connection): requests, status classes and success rate
  exactly the access log's; every stream paired as tshark pairs it, with the same service time
  to the microsecond and the same status.
- HTTP/1.1 over TLS: requests and answers the access log's (wrk), success rate absent; on the
  connections curl's key log decrypts (TLS 1.3 and 1.2), every request and answer at tshark's
  times and every handshake as long as tshark's (ClientHello to the client's Finished).
- h2 at the record level, one stream at a time: requests and answers the log's, the mean service
  time within 1 ms + 10 % of the log's; with curl's keys, each stream as tshark's.
"""

from __future__ import annotations

import pytest

from cosample.experiments.appmon_protocols import PHASES, run
from cosample.lab.webtls import secure_available

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    reason = secure_available()
    if reason:
        pytest.skip(reason)
    phases = tuple(p for p in PHASES if p.name != "h2_many")
    result = run(120, phases, tmp_path_factory.mktemp("protocols"))
    return {(row["phase"], row["metric"]): row for row in result}


def value(rows, phase, metric):
    row = rows[(phase, metric)]
    return row["analyser"], row["reference"]


def test_h2c_is_exact_per_stream(rows):
    for metric in ("requests", "answers paired", "2xx", "5xx", "connections"):
        analysed, reference = value(rows, "h2c", metric)
        assert analysed == reference, metric
    analysed, reference = value(rows, "h2c", "success rate")
    assert analysed == pytest.approx(reference, abs=1e-12)
    paired, streams = value(rows, "h2c", "streams paired as tshark's")
    assert paired == streams >= 120
    assert value(rows, "h2c", "statuses equal") == (streams, streams)
    assert value(rows, "h2c", "largest service-time difference (s)")[0] <= 1e-6


def test_http1_over_tls_from_the_record_layer(rows):
    for phase in ("tls_wrk", "tls_curl"):
        for metric in ("requests", "answers paired", "handshakes"):
            analysed, reference = value(rows, phase, metric)
            assert analysed == reference, (phase, metric)
        assert value(rows, phase, "success rate")[0] is None  # absent, never 1
        assert value(rows, phase, "2xx")[0] == value(rows, phase, "5xx")[0] == 0
    compared, decrypted = value(rows, "tls_curl", "requests compared with tshark")
    assert compared == decrypted > 0
    assert value(rows, "tls_curl", "largest service-time difference (s)")[0] <= 1e-6
    assert value(rows, "tls_curl", "largest handshake-time difference (s)")[0] <= 1e-6


def test_h2_over_tls_one_stream_at_a_time(rows):
    for metric in ("requests", "answers paired", "handshakes"):
        analysed, reference = value(rows, "h2_one", metric)
        assert analysed == reference, metric
    mean, log_mean = value(rows, "h2_one", "mean service time (s)")
    assert mean == pytest.approx(log_mean, abs=0.001, rel=0.1)
    paired, streams = value(rows, "h2_curl", "streams paired as tshark's")
    assert paired == streams > 0
    assert value(rows, "h2_curl", "largest service-time difference (s)")[0] <= 1e-6
