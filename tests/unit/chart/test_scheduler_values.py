"""The scheduler's chart values against the extender's own flags (no helm, no cluster)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from chart_files import CHART, load_yaml, values_schema

from tpfabric_core.placement.topology import DEFAULT_LEVELS, parse_levels
from tpfabric_scheduler.__main__ import DEFAULT_LEVELS_TEXT, parse_args


def scheduler_values() -> dict[str, Any]:
    values: dict[str, Any] = load_yaml(CHART / "values.yaml")["scheduler"]
    return values


def levels_pattern() -> re.Pattern[str]:
    schema = values_schema()["properties"]["topology"]["properties"]["levels"]
    return re.compile(schema["pattern"])


def test_the_default_topology_levels_are_the_extenders_default() -> None:
    text = load_yaml(CHART / "values.yaml")["topology"]["levels"]
    assert text == DEFAULT_LEVELS_TEXT
    assert parse_levels(text) == DEFAULT_LEVELS


@pytest.mark.parametrize(
    "text",
    [
        DEFAULT_LEVELS_TEXT,
        "block=cloud.google.com/gce-topology-block,leaf=cloud.google.com/gce-topology-subblock",
        f"{DEFAULT_LEVELS_TEXT},nvlink=nvidia.com/gpu.clique",
        "rack!=example.com/rack",
    ],
)
def test_the_schema_accepts_what_the_extender_parses(text: str) -> None:
    assert levels_pattern().match(text)
    assert parse_args([f"--levels={text}"]).levels == parse_levels(text)


@pytest.mark.parametrize("text", ["", "leaf", "leaf=", "Leaf=a/b", "leaf=a/b,", "a=b c"])
def test_the_schema_rejects_levels_the_extender_would_refuse(text: str) -> None:
    assert not levels_pattern().match(text)


def test_the_scheduler_runs_two_replicas_with_leader_election_by_default() -> None:
    values = scheduler_values()
    assert values["replicas"] == 2
    assert values["leaderElect"] is True


def test_the_placer_lease_the_extender_takes_is_the_one_its_role_may_update() -> None:
    deployment = (CHART / "templates" / "scheduler.yaml").read_text()
    rbac = (CHART / "templates" / "scheduler-rbac.yaml").read_text()
    assert '--lease-name={{ include "tpfabric.fullname" . }}-placer' in deployment
    assert "--lease-namespace={{ .Release.Namespace }}" in deployment
    assert '"{{ $fullname }}-placer"' in rbac


def extender_pattern(key: str) -> re.Pattern[str]:
    extender = values_schema()["properties"]["scheduler"]["properties"]["extender"]
    return re.compile(extender["properties"][key]["pattern"])


@pytest.mark.parametrize(
    ("key", "flag", "text"),
    [
        ("oversubscription", "--oversubscription", "spine=1,block=3,cluster=7"),
        ("oversubscription", "--oversubscription", "block=2.5"),
        ("backgroundLoad", "--background-load", "spine=0,block=0.25,cluster=0.4"),
    ],
)
def test_the_fabric_figures_the_schema_accepts_the_extender_takes(
    key: str, flag: str, text: str
) -> None:
    assert extender_pattern(key).match(text)
    cost = parse_args([f"{flag}={text}"]).cost
    figures = cost.oversubscription if key == "oversubscription" else cost.background_load
    assert dict(figures) == {k: float(v) for k, v in (e.split("=") for e in text.split(","))}


@pytest.mark.parametrize(
    ("key", "text"),
    [("oversubscription", "spine"), ("oversubscription", "spine=-1"), ("backgroundLoad", "a=1")],
)
def test_the_schema_rejects_fabric_figures_the_extender_would_refuse(key: str, text: str) -> None:
    assert not extender_pattern(key).match(text)


def test_the_fabric_figures_reach_the_extenders_command_only_when_set() -> None:
    deployment = (CHART / "templates" / "scheduler.yaml").read_text()
    assert "{{- with $extender.oversubscription }}\n            - --oversubscription={{ . }}" in (
        deployment
    )
    assert "{{- with $extender.backgroundLoad }}\n            - --background-load={{ . }}" in (
        deployment
    )
    extender = scheduler_values()["extender"]
    assert (extender["oversubscription"], extender["backgroundLoad"]) == ("", "")
