"""What the records of gangs asking to be near another say of it, as their events bring it."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_operator.gangs.near import NearBy, near_line

pytestmark = pytest.mark.unit


def a_record(target: str, *, planned: str = "") -> dict[str, Any]:
    status = {"placement": {"state": "Planned", "near": planned}} if planned else {}
    return {"spec": {"near": {"target": target}}, "status": status}


def test_a_record_names_its_target_and_says_where_once_planned() -> None:
    assert near_line("decode", a_record("prefill")) == ("prefill", "")
    planned = a_record("prefill", planned="on leaf l1 with prefill")
    assert near_line("decode", planned) == ("prefill", "decode: on leaf l1 with prefill")
    assert near_line("decode", None) == ("", "")
    waiting = {"spec": {"near": {"target": "prefill"}}, "status": {"placement": {"near": "x"}}}
    assert near_line("decode", waiting) == ("prefill", ""), "words of a plan only"


def test_the_target_is_synced_again_each_time_its_lines_change() -> None:
    near = NearBy()
    key = ("team", "decode")
    assert near.note(key, a_record("prefill")) == set(), "no line yet"
    assert near.note(key, a_record("prefill", planned="on leaf l1")) == {"prefill"}
    assert near.lines("team", "prefill", "prefill-0") == ["decode: on leaf l1"]
    assert near.note(key, a_record("prefill", planned="on leaf l1")) == set(), "no change"
    assert near.note(key, a_record("other", planned="on leaf l2")) == {"prefill", "other"}
    assert near.lines("team", "prefill", "prefill-0") == []
    assert near.note(key, None) == {"other"}, "the record is gone"
    assert near.lines("team", "other", "x") == []


def test_a_gang_is_found_near_by_its_owners_name_or_its_records() -> None:
    near = NearBy()
    near.note(("team", "a"), a_record("llama", planned="near llama"))
    near.note(("team", "b"), a_record("llama-0", planned="near llama-0"))
    near.note(("other", "c"), a_record("llama", planned="elsewhere"))
    assert near.lines("team", "llama", "llama-0") == ["a: near llama", "b: near llama-0"]
