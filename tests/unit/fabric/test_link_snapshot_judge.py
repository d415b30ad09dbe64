from __future__ import annotations

import json

import pytest
from fabric_builders import two_unit_rail_fabric

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.link_snapshot_judge import (
    HealthThresholds,
    PortCounters,
    apply_link_health,
    assess_link_health,
    parse_counters_json,
)


def snapshot(*entries: dict[str, object]) -> str:
    return json.dumps({"links": list(entries)})


def test_symbol_errors_over_the_threshold_degrade_the_link_and_its_leaf() -> None:
    fabric = two_unit_rail_fabric()
    uplink = fabric.uplinks("u1r0")[0]
    counters = parse_counters_json(
        snapshot(
            {
                "switch": "u1r0",
                "port": uplink.a_port if uplink.a == "u1r0" else uplink.b_port,
                "symbol_errors": 11,
            }
        )
    )
    marked, report = apply_link_health(fabric, counters)
    assert [d.key for d in report.degraded] == [uplink.key]
    assert "11 symbol errors" in report.degraded[0].reasons[0]
    assert marked.node_health("u1-n1") == "degraded"
    assert marked.node_health("u2-n1") == "ok"


def test_counters_at_the_threshold_are_healthy() -> None:
    fabric = two_unit_rail_fabric()
    counters = [PortCounters(node="u1-n1", rail=0, symbol_errors=10, link_downed=0)]
    assert assess_link_health(fabric, counters).degraded == ()


def test_thresholds_are_configurable() -> None:
    fabric = two_unit_rail_fabric()
    counters = [PortCounters(node="u1-n1", rail=0, link_downed=3)]
    assert assess_link_health(fabric, counters).degraded
    assert not assess_link_health(fabric, counters, HealthThresholds(link_downed=5)).degraded


def test_a_downshifted_port_is_degraded() -> None:
    fabric = two_unit_rail_fabric()
    counters = [PortCounters(node="u2-n2", rail=1, rate_gbps=200)]
    report = assess_link_health(fabric, counters)
    assert "runs at 200 Gb/s, expected 400" in report.degraded[0].reasons


def test_entries_naming_no_cable_are_reported() -> None:
    fabric = two_unit_rail_fabric()
    counters = [PortCounters(switch="nope", port=1), PortCounters(node="ghost", rail=0)]
    assert assess_link_health(fabric, counters).unmatched == (
        "switch nope port 1",
        "node ghost rail 0",
    )


def test_a_bad_snapshot_entry_names_its_path() -> None:
    with pytest.raises(InputError, match=r"links\[1\]"):
        parse_counters_json(snapshot({"node": "a", "rail": 0}, {"switch": "s", "hca": "h"}))


def test_snapshot_must_be_json_with_links() -> None:
    with pytest.raises(InputError, match="'links' list"):
        parse_counters_json("{}")
