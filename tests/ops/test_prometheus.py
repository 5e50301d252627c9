"""A real Prometheus scraping a running agent, collector and controller on loopback
(tests/ops/conftest.py): the series docs/operations.md promises are there, the shipped rules
evaluate without error (and the stray sFlow the fleet sends makes the collector's alerts
pending), and every query of the Grafana dashboard parses and returns data."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ops.fleet import TRUTH, get
from ops.promtool import DASHBOARD, DEPLOY, OPERATIONS, RULES, promtool
from waiting import wait_for

SERVERS = set(TRUTH)
#: Grafana's variables, as the test substitutes them (all servers; a window of 30 s of 1-s scrapes).
VARIABLES = {
    "$server": ".*",
    "${server}": ".*",
    "$__rate_interval": "30s",
    "$__interval": "1s",
    "$__range": "1m",
}


def promised_series() -> list[str]:
    """The metric names of docs/operations.md's table "What Prometheus collects", with their
    labels: ``name{label,label}`` (rows marked *when ...* are conditional and left out)."""
    text = OPERATIONS.read_text().split("## What Prometheus collects", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in text.splitlines():
        if line.startswith("| `cosample_") and "*when" not in line:
            names += re.findall(r"`(cosample_[a-z0-9_]+(?:\{[a-z_,]+\})?)`", line.split("|")[1])
    return names


def test_the_docs_promise_series_of_every_daemon():
    names = promised_series()
    text = OPERATIONS.read_text().split("## What Prometheus collects", 1)[1].split("\n## ", 1)[0]
    rows = [
        line.split("|")[1]
        for line in text.splitlines()
        if line.startswith("| `cosample_") and "*when" not in line
    ]
    assert len(names) == sum(row.count("`cosample_") for row in rows)  # none missed by the parser
    for daemon in ("agent", "collector", "controller"):
        assert any(name.startswith(f"cosample_{daemon}_") for name in names), daemon


def test_prometheus_scrapes_every_daemon(prometheus, fleet):
    up = prometheus.query('up{job=~"cosample-.*"}')
    jobs = {r["metric"]["job"]: r["value"][1] for r in up}
    assert jobs == {"cosample-agent": "1", "cosample-collector": "1", "cosample-controller": "1"}
    [agent] = [r["metric"]["instance"] for r in up if r["metric"]["job"] == "cosample-agent"]
    assert agent == fleet.agent_target()  # through the metrics proxy where it runs


@pytest.mark.parametrize("series", promised_series())
def test_promised_series_is_scraped(prometheus, series):
    name, _, labels = series.partition("{")
    found = wait_for(lambda: prometheus.query(name), timeout_s=20)
    for label in filter(None, labels.rstrip("}").split(",")):
        assert all(label in r["metric"] for r in found), (series, found[:3])
    if labels.startswith("server"):
        assert {r["metric"]["server"] for r in found} == SERVERS


def test_build_info_names_the_formats_each_daemon_reads_and_writes(prometheus):
    """What a rolling upgrade checks before the controller writes a new plan format."""
    from cosample import __version__
    from cosample.collector.snapshot import SNAPSHOT_VERSION
    from cosample.plan.formats import FORMAT_VERSION

    labels = {
        r["metric"]["__name__"]: r["metric"]
        for r in prometheus.query('{__name__=~"cosample_.*_build_info"}')
    }
    assert labels["cosample_agent_build_info"]["plan_formats_read"] == str(FORMAT_VERSION)
    assert labels["cosample_collector_build_info"]["plan_formats_read"] == str(FORMAT_VERSION)
    assert labels["cosample_collector_build_info"]["snapshot_format_written"] == str(
        SNAPSHOT_VERSION
    )
    assert labels["cosample_controller_build_info"]["plan_format_written"] == str(FORMAT_VERSION)
    assert labels["cosample_controller_build_info"]["snapshot_formats_read"] == str(
        SNAPSHOT_VERSION
    )
    assert {metric["version"] for metric in labels.values()} == {__version__}


def test_per_server_estimates_lie_inside_their_intervals(prometheus):
    """The collector's estimates and intervals as Prometheus stored them: one triple per server,
    low <= estimate <= high, every server sending (the simulated sFlow)."""

    def triples():
        values = {}
        for suffix in ("", "_ci95_low", "_ci95_high"):
            for r in prometheus.query(f"cosample_collector_packets_per_second{suffix}"):
                values.setdefault(r["metric"]["server"], {})[suffix] = float(r["value"][1])
        return values

    values = wait_for(lambda: (v := triples()) and all(len(t) == 3 for t in v.values()) and v)
    assert set(values) == SERVERS
    for server, t in values.items():
        assert 0 < t["_ci95_low"] <= t[""] <= t["_ci95_high"], (server, t)
    # the recording rule's half-width against the series read at the same moment: the
    # estimates move between rule evaluations (a plan change widens every interval), so the
    # two are compared until they agree, for at most 30 s
    seen: list = []

    def agreeing() -> bool:
        now = triples()
        widths = prometheus.query("server:cosample_collector_packets_ci95_half_width:ratio")
        seen[:] = [now, widths]
        if {r["metric"]["server"] for r in widths} != SERVERS or set(now) != SERVERS:
            return False
        if any(len(t) != 3 for t in now.values()):
            return False
        return all(
            float(r["value"][1]) == pytest.approx(_half_width(now[r["metric"]["server"]]), rel=0.5)
            for r in widths
        )

    try:
        wait_for(agreeing, timeout_s=30.0)
    except AssertionError:
        raise AssertionError(f"the rule's half-widths never matched the series: {seen}") from None


def _half_width(triple: dict[str, float]) -> float:
    """Half the 95 % interval, relative to the estimate."""
    return (triple["_ci95_high"] - triple["_ci95_low"]) / (2 * triple[""])


def test_controller_predicted_capacity_use_matches_its_status(prometheus, fleet):
    """Scraped value and the controller's own status agree (both taken after its cycles settled;
    the traffic is steady, so a cycle in between moves it little)."""
    status = json.loads(get(fleet.controller_url + "/status"))
    [result] = prometheus.query("cosample_controller_predicted_max_capacity_use_ratio")
    scraped = float(result["value"][1])
    assert 0 < scraped < 1 and scraped == pytest.approx(status["predicted_max_use"], rel=0.5)

    def versions():
        [version] = prometheus.query("cosample_controller_plan_version")
        [agent] = prometheus.query("cosample_agent_plan_version")
        now = json.loads(get(fleet.controller_url + "/status"))["plan_version"]
        return float(agent["value"][1]), float(version["value"][1]), now

    # a publication between two scrapes is seen by one scrape first: wait for the scrapes after
    # it, and fail if the agent never runs the version the controller published
    found = wait_for(lambda: (v := versions()) and v[0] == v[1] == v[2] and v, timeout_s=60)
    assert found[0] == found[1] == found[2]


def test_rules_evaluate_without_error(prometheus):
    def evaluated():
        groups = prometheus.api("rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return all(rule["lastEvaluation"] > "2000" for rule in rules) and rules

    rules = wait_for(evaluated, timeout_s=20)
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    assert len(rules) == sum(len(group["rules"]) for group in shipped)
    assert [
        (r.get("name"), r["health"], r.get("lastError", "")) for r in rules if r["health"] != "ok"
    ] == []


def test_alerts_on_the_live_fleet(prometheus):
    """The stray datagrams (truncated, from an unknown agent) make the collector's two loss alerts
    pending; nothing else is wrong in this fleet, so no other cosample alert is active."""

    def active():
        alerts = prometheus.api("alerts")["data"]["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("reason")) for a in alerts}

    found = wait_for(
        lambda: (
            (a := active())
            >= {
                ("CosampleCollectorUnknownAgents", "unplanned_agent"),
                ("CosampleCollectorLosingSamples", "truncated"),
            }
            and a
        ),
        timeout_s=30,
    )
    names = {name for name, _ in found}
    assert not names & {
        "CosampleAgentNotConverged",
        "CosampleAgentSafeState",
        "CosampleServerPredictedOverCapacity",
        "CosampleControllerStale",
        "CosampleControllerCollectorsUnreadable",
        "CosampleTargetDown",
        "CosampleAgentUnsigned",
        "CosampleCollectorPlanBehind",
    }, found


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target and annotation, variables substituted."""
    document = json.loads(DASHBOARD.read_text())
    panels = list(document["panels"])
    for panel in document["panels"]:
        panels += panel.get("panels", [])
    queries = [
        (panel["title"], target["expr"]) for panel in panels for target in panel.get("targets", ())
    ]
    queries += [(a["name"], a["expr"]) for a in document["annotations"]["list"] if "expr" in a]
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            inner = variable["query"]["query"]
            metric = re.fullmatch(r"label_values\((\w+), *(\w+)\)", inner)
            assert metric, inner  # the one variable form used: label_values(metric, label)
            queries.append((variable["name"], f"count by ({metric[2]}) ({metric[1]})"))
    substituted = []
    for title, expr in queries:
        for variable, value in VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, (title, expr)
        substituted.append((title, expr))
    return substituted


def test_dashboard_is_importable_json():
    document = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids)) and document["uid"] == "cosample"
    titles = " ".join(title for title, _ in dashboard_queries()).lower()
    for subject in ("interval", "coverage", "capacity", "plan version", "publications", "dropped"):
        assert subject in titles, subject


#: Queries that rightly return nothing in a healthy fleet: nothing ignored, no publication in
#: the last minute once the fleet has settled.
MAY_BE_EMPTY = ("cosample_collector_ignored_total", "changes(cosample_controller_plan_version")


@pytest.mark.parametrize("title,expr", dashboard_queries(), ids=lambda value: value[:60])
def test_dashboard_query_runs_and_has_data(prometheus, title, expr):
    """Each query parses (Prometheus's own parser, /api/v1/query_range) and runs without error;
    all but MAY_BE_EMPTY return series from the fleet."""
    import time

    end = time.time()

    def data():
        answer = prometheus.api(
            "query_range", query=expr, start=str(end - 60), end=str(time.time()), step="1"
        )
        assert answer["status"] == "success" and "warnings" not in answer, answer
        return answer["data"]["result"] or any(part in expr for part in MAY_BE_EMPTY)

    assert wait_for(data, timeout_s=30), (title, expr)


def test_prometheus_config_shipped_is_valid(tmp_path):
    """deploy/prometheus/prometheus.yml with its rule file where the test keeps it."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["rule_files"] = [str(RULES)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
