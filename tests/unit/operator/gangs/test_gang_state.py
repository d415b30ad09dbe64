"""What the gang half's events mark for a sync: a record's change, a gang near it, a node gone
degraded under it; and the watched pods once listed."""

from __future__ import annotations

from typing import Any

import pytest
from gang_world import NS, a_gang_world, lws_pod

from tpfabric_operator.gangs.pods import GangKey, GangPods, gang_pod
from tpfabric_operator.gangs.state import GangState

pytestmark = pytest.mark.unit


class Marks:
    """A stand-in of the syncer: the gangs marked, in order."""

    def __init__(self) -> None:
        self.keys: list[GangKey] = []

    def dirty(self, key: GangKey) -> None:
        self.keys.append(key)


def watching(*pods: dict[str, Any]) -> tuple[GangState, Marks]:
    gangs, _, _ = a_gang_world()
    watch = GangPods(None, gang_pod, lambda key: None)  # type: ignore[arg-type]
    watch._replace([watch._slim(p) for p in pods])
    watch.synced.set()
    marks = Marks()
    gangs.watch, gangs.syncer = watch, marks  # type: ignore[assignment]
    return gangs, marks


def near(target: str, words: str) -> dict[str, Any]:
    return {
        "spec": {"near": {"target": target}},
        "status": {"placement": {"state": "Planned", "near": words}},
    }


def test_a_records_change_marks_its_gang_and_the_gang_its_plan_is_near() -> None:
    gangs, marks = watching(lws_pod("prefill", 0, 0), lws_pod("decode", 0, 0))
    gangs.on_record((NS, "decode-0"), near("prefill", "on leaf l1"), deleted=False)
    assert marks.keys == [(NS, "prefill-0"), (NS, "decode-0")]
    assert (NS, "decode-0") in gangs.known_gangs()
    marks.keys.clear()
    gangs.on_record((NS, "decode-0"), None, deleted=True)
    assert marks.keys == [(NS, "prefill-0"), (NS, "decode-0")], "its line goes with it"
    assert gangs.known_gangs() == [(NS, "prefill-0"), (NS, "decode-0")], "its pods remain"


def test_a_degraded_node_marks_the_gangs_with_a_pod_on_it() -> None:
    gangs, marks = watching(lws_pod("a", 0, 0, node="n1"), lws_pod("b", 0, 0, node="n2"))
    gangs.on_degraded_node("n1")
    assert marks.keys == [(NS, "a-0")]


def test_once_listed_the_pods_come_from_the_watch() -> None:
    gangs, _ = watching(lws_pod("a", 0, 0))
    assert [p.name for p in gangs.pods_of((NS, "a-0"))] == ["a-0"]
