"""The operator's TPFABRIC_* knobs: read in one place, refused with the variable named, listed in
the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpfabric_operator.settings import KNOBS, Knob, SettingsError, queue_requirement, read

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_defaults_are_read_when_the_variable_is_unset_or_empty() -> None:
    knob = next(k for k in KNOBS if k.env == "TPFABRIC_CREATE_CONCURRENCY")
    assert read(knob, {}) == 16
    assert read(knob, {knob.env: " "}) == 16
    assert read(knob, {knob.env: "4"}) == 4


@pytest.mark.parametrize(
    ("raw", "words"),
    [("fast", "is not a whole number"), ("0", "is below 1"), ("2.5", "is not a whole number")],
)
def test_a_value_that_cannot_be_used_names_the_variable_and_what_it_must_be(
    raw: str, words: str
) -> None:
    knob = next(k for k in KNOBS if k.env == "TPFABRIC_CREATE_CONCURRENCY")
    with pytest.raises(SettingsError) as caught:
        read(knob, {knob.env: raw})
    assert str(caught.value).startswith(f"TPFABRIC_CREATE_CONCURRENCY={raw!r} {words}")
    assert "default 16" in str(caught.value)


def test_a_number_below_its_least_value_is_refused() -> None:
    with pytest.raises(SettingsError, match="TPFABRIC_X='-1' is below 0"):
        read(Knob("TPFABRIC_X", "1", "x"), {"TPFABRIC_X": "-1"})


def test_no_knob_is_read_anywhere_else_in_the_operator() -> None:
    folder = REPO / "operator" / "tpfabric_operator"
    readers = [
        path.name
        for path in folder.rglob("*.py")
        if path.name != "settings.py"
        and re.search(r"environ(\.get)?\(?\[?\s*\"TPFABRIC_", path.read_text())
    ]
    assert readers == []


def test_every_knob_is_in_the_docs_with_its_default() -> None:
    text = (REPO / "docs" / "install.md").read_text()
    for knob in KNOBS:
        assert f"| `{knob.env}` | `{knob.default}` |" in text, knob.env


def test_a_number_above_its_greatest_value_is_refused() -> None:
    knob = next(k for k in KNOBS if k.env == "TPFABRIC_DEGRADED_LINK_BANDWIDTH")
    assert read(knob, {knob.env: "1"}) == 1.0
    with pytest.raises(SettingsError, match=r"TPFABRIC_DEGRADED_LINK_BANDWIDTH='1\.5' is above 1"):
        read(knob, {knob.env: "1.5"})


def test_a_bad_fabric_profile_stops_the_operator_with_the_field_and_the_fix() -> None:
    from tpfabric_operator.settings import fabric_profile  # noqa: PLC0415

    with pytest.raises(SettingsError) as caught:
        fabric_profile('{"linkLayer": "infiniband", "infiniband": {"serviceLevel": 16}}')
    assert str(caught.value).startswith(
        "TPFABRIC_FABRIC_PROFILE: fabric.profile.infiniband.serviceLevel: Input should be less"
    )
    assert fabric_profile("") is None
    assert fabric_profile('{"linkLayer": "roce"}') == (
        '{"ecmp":{"levels":[],"qpsPerConnection":4,"splitDataOnQps":false},'
        '"infiniband":{"adaptiveRoutingServiceLevels":[],"serviceLevel":null},'
        '"linkLayer":"roce","nccl":{"railPlane":true},"roce":{"dscp":null,'
        '"fifoTrafficClass":null,"pfcPriority":null,"trafficClass":null},"sharp":false}'
    )


def test_a_switch_is_true_or_false_and_nothing_else() -> None:
    knob = next(k for k in KNOBS if k.env == "TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME")
    assert read(knob, {}) is False
    assert read(knob, {knob.env: "True"}) is True
    with pytest.raises(SettingsError, match=r"'yes' is not true or false \(default false"):
        read(knob, {knob.env: "yes"})


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{not json", "is not a label selector as JSON: Expecting property name"),
        (
            '{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}',
            "matchExpressions[0].operator: 'Gt' is none of In, NotIn, Exists, DoesNotExist",
        ),
        ('{"matchLabels": {"team": "a b"}}', "matchLabels.team: 'a b' is not a label value"),
        ('{"namespaceSelector": {}}', "namespaceSelector: not a field of a label selector"),
    ],
)
def test_kueues_namespace_selector_that_cannot_be_used_names_the_variable_and_the_field(
    raw: str, words: str
) -> None:
    env = "TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR"
    with pytest.raises(SettingsError) as caught:
        queue_requirement({env: raw})
    assert str(caught.value).startswith(f"{env}=")
    assert words in str(caught.value)


def test_kueues_requirement_is_off_unless_asked_and_then_holds_only_the_selected_namespaces() -> (
    None
):
    name = "kubernetes.io/metadata.name"
    assert not queue_requirement({}).applies({name: "team-a"})
    asked = queue_requirement(
        {
            "TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
            "TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR": '{"matchLabels": {"queues": "on"}}',
        }
    )
    assert asked.applies({name: "team-a", "queues": "on"})
    assert not asked.applies({name: "team-b"})
