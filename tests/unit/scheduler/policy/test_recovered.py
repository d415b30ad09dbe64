"""Restarts lose nothing (policy/recovered.py): a Gang record made again while its whole gang
runs gets where the gang runs written back as its placement; nothing is planned or moved."""

from __future__ import annotations

import copy

from placer_world import two_leaves
from policy_world import cycle_of, rules
from test_placer_gangs import a_gang_record, gang_pod

from tpfabric_core.api.placement import read_placement
from tpfabric_scheduler.policy.recovered import recover, running_without_plan
from tpfabric_scheduler.store import ClusterStore


def record_made_again_while_its_gang_runs(store: ClusterStore, running: int = 2) -> None:
    two_leaves(store)
    with store.lock:
        store.upsert_job(copy.deepcopy(a_gang_record("vllm-0", 2)))
        for rank in range(2):
            pod = gang_pod("vllm-0", rank)
            if rank < running:
                pod["spec"].update(nodeName=f"leaf-b-n{rank}", schedulingGates=[])
            store.upsert_pod(pod)


def test_a_gang_running_without_a_plan_gets_where_it_runs_written_back() -> None:
    store = ClusterStore()
    record_made_again_while_its_gang_runs(store)
    ((job, members),) = running_without_plan(store)
    intent = recover(job, members, cycle_of(store).snapshot, rules())
    recovered = read_placement(intent.placement)
    assert recovered.planned
    assert (recovered.domain, recovered.nodes) == ("leaf-b", ["leaf-b-n0", "leaf-b-n1"])
    assert recovered.message.startswith("ns/gang:vllm-0: 2 workers in leaf 'leaf-b'")
    assert intent.event == "PlacementRecovered"
    assert intent.release == (), "nothing is released or moved"


def test_a_gang_part_running_part_gated_is_not_read_back() -> None:
    store = ClusterStore()
    record_made_again_while_its_gang_runs(store, running=1)
    assert running_without_plan(store) == []
