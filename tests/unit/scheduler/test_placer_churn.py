"""A busy cluster does not make the placer re-plan every waiting gang: a pod
binding or another gang's new plan never lets a waiting gang fit, so only capacity that may have
grown (a bound pod gone or finished, a node changed, a plan dropped) or a change of the gang's own
pods plans it again; and a relist never holds the store's lock while it parses."""

from __future__ import annotations

import threading
from typing import Any

from placer_world import a_worker, gang, half_node_gang, placement, two_leaves

from tpfabric_scheduler.kube import Informer, informer_kinds
from tpfabric_scheduler.store import ClusterStore


def test_binds_and_other_plans_do_not_plan_a_waiting_gang_again(
    world: Any, attempts: list[str]
) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    with store.lock:  # each leaf of 4 has 3 free nodes: a gang of 4 waits for one
        store.upsert_pod(a_worker("busy", 0, node="leaf-a-n3", gated=False))
        store.upsert_pod(a_worker("busy", 1, node="leaf-b-n3", gated=False))
    gang(writer, "waits", 4)
    placer.run_cycle()
    assert placement(writer, "waits")["state"] == "Waiting"
    placer.run_cycle()  # its own Waiting write came back
    seen = attempts.count("ns/waits")
    for k in range(3):  # the default scheduler binds pods of other tenants: capacity shrinks
        with store.lock:
            store.upsert_pod(a_worker("tenant", k, node=f"leaf-b-n{k}", gated=False, gpus=1))
        half_node_gang(writer, f"other-{k}", 1)  # and another gang is planned (into leaf-b)
        clock.now += 1
        placer.run_cycle()
    assert attempts.count("ns/waits") == seen, "no capacity came free: no plan attempt"
    assert all(placement(writer, f"other-{k}")["state"] == "Planned" for k in range(3))
    with store.lock:  # a tenant's pod on leaf-a goes: capacity came free
        store.delete_pod("ns/busy-worker-0")
    clock.now += 1
    placer.run_cycle()
    assert attempts.count("ns/waits") == seen + 1
    assert placement(writer, "waits")["state"] == "Planned"


def test_a_relist_parses_and_indexes_every_pod_without_the_stores_lock() -> None:
    store = ClusterStore()
    pods = [a_worker("job", k, node=f"n{k % 4}", gated=False) for k in range(50)]
    for pod in pods:
        pod["metadata"]["resourceVersion"] = "1"

    class OnePage:
        def __call__(self, **_: Any) -> Any:
            body = {"metadata": {"resourceVersion": "7"}, "items": pods}
            return type("Page", (), {"data": __import__("orjson").dumps(body)})()

    held: list[bool] = []

    def lock_free() -> bool:
        """Return whether another thread could take the store's lock now."""
        got: list[bool] = []

        def probe() -> None:
            got.append(store.lock.acquire(timeout=0))
            if got[0]:
                store.lock.release()

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        return got[0]

    kinds = {
        k.name: k
        for k in informer_kinds(
            store, dict.fromkeys(("nodes", "pods", "tensorparalleljobs"), OnePage())
        )
    }
    kind = kinds["pods"]
    parse, index = kind.record, kind.index
    kind.record = lambda obj: (held.append(not lock_free()), parse(obj))[1]
    kind.index = lambda records: (held.append(not lock_free()), index(records))[1]
    informer = Informer(kind, store, lambda: None)
    assert informer.relist() == "7"
    assert len(held) == 51
    assert not any(held), "parsing and indexing never held the lock"
    assert len(store.pods) == 50
    assert store.used["n0"]["nvidia.com/gpu"] == 13 * 8
