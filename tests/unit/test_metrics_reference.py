"""docs/metrics.md is the generator's output from the components' own metric definitions, and
every metric of every component keeps Prometheus' naming conventions and has a stability."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from tpfabric_cli.metrics_reference import (
    COMPONENTS,
    MetricRow,
    component_rows,
    convention_problems,
    render_reference,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_metrics_reference_is_the_generators_output() -> None:
    assert PAGE.read_text() == render_reference(), "run `tpfabric metrics reference`"


def test_the_reference_lists_what_operators_alert_on() -> None:
    text = render_reference()
    for name in (
        "tpfabric_build_info",
        "tpfabric_placer_gang_wait_seconds",
        "tpfabric_placer_oldest_waiting_gang_seconds",
        "tpfabric_placer_plans_dropped_total",
        "tpfabric_placer_plans_refused_total",
        "tpfabric_operator_degraded_link_moves_total",
        "tpfabric_webhook_answers_total",
        "tpfabric_malformed_objects_total",
        "tpfabric_fabric_agent_last_read_timestamp_seconds",
        "tpfabric_placer_fabric_agent_silent_seconds",
        "tpfabric_fabric_port_info",
        "node_infiniband_packet_sequence_errors_total",
    ):
        assert f"| `{name}` |" in text, name
    assert (
        "| `tpfabric_placer_gang_wait_seconds` | histogram | ALPHA | `outcome`, `level` |" in text
    )
    # node_exporter's names, kept as it names them: no stability of tpfabric's
    assert "| `node_infiniband_symbol_error_total` | counter | - | `device`, `port` |" in text


def test_every_metric_of_every_component_keeps_the_naming_conventions() -> None:
    problems = [
        f"{row.name}: {problem}"
        for make in COMPONENTS.values()
        for row in component_rows(make())
        for problem in convention_problems(row)
    ]
    assert problems == []


def test_a_metric_breaking_the_conventions_is_caught() -> None:
    registry = CollectorRegistry()
    Gauge("tpfabric_queue_total", "how many.", registry=registry)
    Counter("tpfabric_wait_ms", "Milliseconds waited.", registry=registry)
    counter, gauge = sorted(component_rows([registry]), key=lambda row: row.kind)
    assert convention_problems(gauge) == [
        "only a counter's name ends in _total",
        "HELP is a sentence",
    ]
    assert convention_problems(counter) == ["time is in seconds, named _seconds"]
    assert convention_problems(
        MetricRow("tpfabric_plan_duration", "histogram", "ALPHA", (), "Time.")
    ) == ["a histogram's name ends in its unit (_seconds, _bytes, _gbps, _lanes, _minute, _ratio)"]
    # another exporter's name is not asked tpfabric's prefix or stability, but Prometheus' rules
    assert convention_problems(MetricRow("node_infiniband_x_total", "counter", "", (), "X.")) == []
    assert convention_problems(MetricRow("node_other_x_total", "counter", "", (), "X.")) == [
        "not a tpfabric_ snake_case name",
        "no stability",
    ]
    assert convention_problems(MetricRow("node_infiniband_x", "counter", "", (), "X.")) == [
        "a counter's name ends in _total"
    ]


def test_no_two_components_define_one_metric() -> None:
    seen: dict[str, str] = {}
    for title, make in COMPONENTS.items():
        for row in component_rows(make()):
            assert row.name not in seen, f"{row.name} in {seen.get(row.name)} and {title}"
            seen[row.name] = title
