"""The alert rules in deploy/prometheus: each one tested by promtool, and each one named in the tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT

RULES = ROOT / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing: `make setup` installs Debian's prometheus package (as root)"
)


def alert_names() -> set[str]:
    groups = yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"]}


def test_every_rule_is_tested_firing_and_quiet():
    tests = yaml.safe_load((RULES / "alerts_test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    fired = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    assert fired == alert_names() and quiet == alert_names()


@needs_promtool
def test_the_rules_are_valid_and_pass_their_promtool_tests():
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        result = subprocess.run([PROMTOOL, *command], cwd=RULES, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
