"""Every daemon's ``/metrics``, served by the running daemon, passes ``promtool check metrics``
(Prometheus's own naming lint: counters end in ``_total``, base units, no type in a name)."""

from __future__ import annotations

import re

import pytest
from ops.fleet import get
from ops.promtool import promtool


@pytest.mark.parametrize("daemon", ["agent", "collector", "controller"])
def test_promtool_check_metrics_passes(fleet, daemon):
    exposition = get(fleet.metrics_urls()[daemon])
    assert f"cosample_{daemon}_".encode() in exposition
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0 and result.stdout + result.stderr == "", (
        result.stdout + result.stderr
    )


def test_promtool_check_metrics_catches_a_bad_name():
    """What the check above would say of a counter without ``_total`` (the lint can fail)."""
    result = promtool(
        "check",
        "metrics",
        stdin=b"# HELP cosample_x_errors Errors\n"
        b"# TYPE cosample_x_errors counter\n"
        b"cosample_x_errors 1\n",
    )
    assert (
        result.returncode != 0
        and 'counter metrics should have "_total" suffix' in result.stdout + result.stderr
    )


@pytest.mark.parametrize("daemon", ["agent", "collector", "controller"])
def test_every_exposed_metric_is_documented(fleet, daemon):
    """A metric a daemon exposes is listed in docs/operations.md's "What Prometheus collects"
    (with *when ...* if it only appears sometimes), so the table stays the whole list."""
    from ops.promtool import OPERATIONS
    from prometheus_client.parser import text_string_to_metric_families

    table = OPERATIONS.read_text().split("## What Prometheus collects", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(cosample_[a-z0-9_]+)", table))
    exposed = {
        sample.name
        for family in text_string_to_metric_families(get(fleet.metrics_urls()[daemon]).decode())
        for sample in family.samples
    }
    exposed = {name for name in exposed if not name.endswith("_created")}  # client timestamps
    missing = sorted(exposed - listed)
    assert missing == [], (
        f"{daemon} exposes {missing}, not in docs/operations.md's table "
        "'What Prometheus collects': add a row"
    )


def test_agent_metrics_reach_a_remote_scraper_through_the_shipped_proxy(fleet):
    """deploy/systemd/cosample-agent-metrics.{socket,service}: the agent serves 127.0.0.1 only;
    the proxy (systemd-socket-proxyd, socket-activated as the unit does) answers with its
    metrics (the Prometheus of test_prometheus scrapes the agent this way)."""
    if fleet.agent_proxy is None:
        pytest.skip("systemd-socket-activate or systemd-socket-proxyd missing (Debian systemd)")
    through = get(f"http://{fleet.agent_proxy}/metrics")
    assert b"cosample_agent_build_info" in through and b"cosample_agent_plan_version" in through
