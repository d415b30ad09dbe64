"""The chart's alerts and dashboard, checked by Prometheus's own promtool (built from the Go module
proxy by `tpfabric toolchain build --promtool`, which `make test-integration` runs): the rules
load (`promtool check rules`), fire on the series they are for and stay quiet on the others
(`promtool test rules`, alert_rules.test.yaml); the chart's PrometheusRule carries exactly those
rules; every query of the dashboard parses and names only metrics the components export. No
cluster: the binaries only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tpfabric_cli.metrics_reference import COMPONENTS, component_rows
from tpfabric_localcluster.toolchain import PROMTOOL_BINARIES, find_toolchain

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tpfabric"
RULES = CHART / "alerts" / "tpfabric.rules.yaml"
RULE_TESTS = Path(__file__).parent / "alert_rules.test.yaml"
DASHBOARD = CHART / "dashboards" / "tpfabric.json"


def _binary(name: str) -> Path:
    toolchain = find_toolchain((name,))
    if toolchain.missing:
        pytest.fail(
            f"{name} is missing: run `tpfabric toolchain build --promtool` (`make "
            "test-integration` does it)",
            pytrace=False,
        )
    return toolchain.path(name)


@pytest.fixture(scope="module")
def promtool() -> Path:
    assert PROMTOOL_BINARIES == ("promtool",)
    return _binary("promtool")


def run(argv: list[str | Path], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_load_in_prometheus(promtool: Path) -> None:
    done = run([promtool, "check", "rules", RULES])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def test_each_alert_fires_on_its_series_and_not_on_others(promtool: Path) -> None:
    done = run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_of_the_rules_has_a_test_that_fires_it_and_one_that_does_not() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    checks = [c for t in tests for c in t.get("alert_rule_test", [])]
    fired = {c["alertname"] for c in checks if c["exp_alerts"]}
    quiet = {c["alertname"] for c in checks if not c["exp_alerts"]}
    assert fired == alerts
    assert quiet == alerts


def test_a_rule_that_would_never_fire_fails_its_test(promtool: Path, tmp_path: Path) -> None:
    broken = tmp_path / "charts" / "tpfabric" / "alerts"
    broken.mkdir(parents=True)
    text = RULES.read_text()
    assert text.count("max by (node) (tpfabric_placer_fabric_agent_silent_seconds) > 0") == 1
    (broken / RULES.name).write_text(
        text.replace(
            "max by (node) (tpfabric_placer_fabric_agent_silent_seconds) > 0",
            "max by (node) (tpfabric_placer_fabric_agent_silent_seconds) > 86400",
        )
    )
    tests = tmp_path / "tests" / "integration"
    tests.mkdir(parents=True)
    shutil.copy(RULE_TESTS, tests / RULE_TESTS.name)
    done = run([promtool, "test", "rules", RULE_TESTS.name], cwd=tests)
    assert done.returncode != 0
    assert "alertname: TpfabricFabricAgentSilent" in done.stdout + done.stderr


def test_the_charts_prometheus_rule_carries_exactly_the_rules_file() -> None:
    helm = _binary("helm")
    done = run(
        [
            helm,
            "template",
            "t",
            CHART,
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.labels.release=prometheus",
            "--api-versions",
            "monitoring.coreos.com/v1/PrometheusRule",
            "--show-only",
            "templates/prometheusrule.yaml",
        ]
    )
    assert done.returncode == 0, done.stderr
    rule = yaml.safe_load(done.stdout)
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_the_rule_needs_its_crd_and_says_so() -> None:
    helm = _binary("helm")
    done = run([helm, "template", "t", CHART, "--set", "metrics.prometheusRule.enabled=true"])
    assert done.returncode != 0
    assert "needs the Prometheus Operator's PrometheusRule CRD" in done.stderr


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_query_of_the_dashboard_parses(promtool: Path, tmp_path: Path) -> None:
    queries = _dashboard_queries()
    assert len(queries) > 20
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{i}", "expr": q.replace("$__rate_interval", "5m")}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = run([promtool, "check", "rules", path])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_and_the_alerts_name_only_metrics_the_components_export() -> None:
    exported = {row.name for make in COMPONENTS.values() for row in component_rows(make())}
    series = {f"{n}{s}" for n in exported for s in ("", "_bucket", "_sum", "_count")}
    series |= {"process_resident_memory_bytes", "process_cpu_seconds_total"}
    text = RULES.read_text() + "\n".join(_dashboard_queries())
    named = set(re.findall(r"\b((?:tpfabric|process)_[a-z0-9_]+)", text))
    assert named - series == set()


def test_the_charts_dashboard_configmap_holds_the_dashboard() -> None:
    helm = _binary("helm")
    done = run(
        [
            helm,
            "template",
            "t",
            CHART,
            "--set",
            "metrics.grafanaDashboard.enabled=true",
            "--show-only",
            "templates/grafana-dashboard.yaml",
        ]
    )
    assert done.returncode == 0, done.stderr
    configmap = yaml.safe_load(done.stdout)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["tpfabric.json"]) == json.loads(DASHBOARD.read_text())
