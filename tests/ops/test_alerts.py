"""The shipped alerting rules: valid for promtool, unit-tested with promtool's series, and each
alert documented in docs/operations.md with what to do when it fires."""

from __future__ import annotations

import re
import shutil

import yaml
from ops.promtool import OPERATIONS, RULE_TESTS, RULES, promtool


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_rules_check():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"SUCCESS: {sum(len(g['rules']) for g in yaml.safe_load(RULES.read_text())['groups'])} rules found"
        in result.stdout
    )


def test_rules_check_refuses_a_bad_expression(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        RULES.read_text().replace(
            "cosample_agent_last_apply_success == 0", "cosample_agent_last_apply_success == == 0"
        )
    )
    result = promtool("check", "rules", str(broken))
    assert result.returncode != 0 and "parse error" in result.stdout + result.stderr


def test_rule_unit_tests_pass():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_rule_unit_tests_fail_when_a_threshold_moves(tmp_path):
    """The unit tests pin the rules: a changed threshold makes them fail."""
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    (tmp_path / RULES.name).write_text(
        RULES.read_text().replace(
            "cosample_controller_predicted_max_capacity_use_ratio > 1",
            "cosample_controller_predicted_max_capacity_use_ratio > 1.5",
        )
    )
    result = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert result.returncode != 0
    assert "CosampleServerPredictedOverCapacity" in result.stdout + result.stderr


def test_every_alert_fires_in_a_unit_test():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", ())
        if case["exp_alerts"]
    }
    assert {rule["alert"] for rule in alerts()} == fired


def test_every_alert_has_a_runbook_section():
    text = OPERATIONS.read_text()
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in text.splitlines()
        if line.startswith("#")
    }
    for rule in alerts():
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert rule["annotations"]["runbook"].startswith("docs/operations.md#"), rule["alert"]
        assert anchor in headings, f"{rule['alert']}: no section #{anchor} in docs/operations.md"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
