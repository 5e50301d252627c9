"""Every daemon's ``/metrics``, served by the running daemon, passes ``promtool check metrics``
(Prometheus's own naming lint: counters end in ``_total``, base units, no type in a name)."""

from __future__ import annotations

import pytest

from ops.fleet import get
from ops.promtool import promtool


@pytest.mark.parametrize("daemon", ["agent", "collector", "controller"])
def test_promtool_check_metrics_passes(fleet, daemon):
    exposition = get(fleet.metrics_urls()[daemon])
    assert f"cosample_{daemon}_".encode() in exposition
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_promtool_check_metrics_catches_a_bad_name():
    """What the check above would say of a counter without ``_total`` (the lint can fail)."""
    result = promtool("check", "metrics", stdin=b"# HELP cosample_x_errors Errors\n"
                                                b"# TYPE cosample_x_errors counter\n"
                                                b"cosample_x_errors 1\n")
    assert result.returncode != 0 and 'counter metrics should have "_total" suffix' in \
        result.stdout + result.stderr
