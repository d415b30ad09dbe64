"""Serving fleets through their life with the real LeaderWorkerSet controller.

LWS v0.9.0 rolls its groups (``maxSurge``, ``maxUnavailable``), moves none by itself and knows
nothing of tpfabric; the gang webhook, the operator and the placer run beside it as a cluster
runs them. What is checked:

- a rolling update with room for a surge group: the surge group is placed whole in the free
  leaf, every group replaced in place goes back to the leaf it left, and no group is ever bound
  across two leaves;
- the same rollout with room for exactly the groups there are: the surge group waits whole with
  its reason on its record (``Surge``, ``Waiting``), and the rollout still ends (no deadlock
  between a group's old domain and its replacement);
- group health: ``Ready`` only when the leader and every worker are; a node under a group turns
  degraded: ``Degraded`` names it and, with ``tpfabric.io/on-degraded-link:
  restart-elsewhere``, the groups are moved off it one at a time, never more than
  ``maxUnavailable`` down;
- placement near another gang (``tpfabric.io/near``): a decode LWS waits for its prefill LWS
  and lands under its spine; both records say so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes import watch as kube_watch
from test_gangs_owned import controllers  # noqa: F401 - the module's controllers fixture

from control_plane_fixtures import FabricFactory, clear_jobs_and_pods, opt_in, wait_for
from tpfabric_core.api import GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL
from tpfabric_core.labels import HEALTH, SPINE

pytestmark = pytest.mark.integration

LWS = ("leaderworkerset.x-k8s.io", "v1")


def fabric(leaves: int, *, spines: int = 1, per_leaf: int = 2) -> str:
    """Return a fabric of ``spines`` x ``leaves`` leaves of ``per_leaf`` nodes (names srv-...)."""
    lines = [
        "name: serving",
        "rails: 8",
        "railOptimized: true",
        "rdmaResource: rdma/ib",
        'node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}',
        "blocks:",
        "- name: srv",
        "  spines:",
    ]
    for s in range(1, spines + 1):
        lines.append(f"  - name: srv-s{s}")
        lines.append("    leaves:")
        lines.extend(
            f'    - {{name: srv-s{s}l{leaf}, nodes: ["srv-s{s}l{leaf}-[01-0{per_leaf}]"]}}'
            for leaf in range(1, leaves + 1)
        )
    return "\n".join(lines) + "\n"


def leaf_of(node: str) -> str:
    return node.rsplit("-", 1)[0]  # srv-s1l2-01 -> srv-s1l2


def spine_of(leaf: str) -> str:
    return leaf.split("l", maxsplit=1)[0]  # srv-s1l2 -> srv-s1


@pytest.fixture
def serving(controllers: None, api: client.ApiClient, namespace: str) -> Iterator[str]:  # noqa: F811
    """The test's namespace, opted in; its LeaderWorkerSets deleted after."""
    yield opt_in(api, namespace)
    client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(
        *LWS, namespace, "leaderworkersets", propagation_policy="Foreground"
    )
    clear_jobs_and_pods(api, namespace)


def create_lws(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    *,
    replicas: int,
    max_surge: int = 0,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> None:
    """Create an LWS of ``replicas`` groups of 2 pods of 8 GPUs (a leader and one worker)."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.local/vllm:1",
                "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "1"}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    lws = {
        "apiVersion": "/".join(LWS),
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": max_surge, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"metadata": {"annotations": annotations or {}}, "spec": spec},
            },
        },
    }
    custom.create_namespaced_custom_object(*LWS, namespace, "leaderworkersets", lws)


def groups_of(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, list[client.V1Pod]]:
    """Return the live pods of LWS ``name`` by gang."""
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"leaderworkerset.sigs.k8s.io/name={name}"
    ).items
    groups: dict[str, list[client.V1Pod]] = {}
    for pod in pods:
        if not pod.metadata.deletion_timestamp and GANG_LABEL in (pod.metadata.labels or {}):
            groups.setdefault(pod.metadata.labels[GANG_LABEL], []).append(pod)
    return groups


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def settled(
    core: client.CoreV1Api, namespace: str, name: str, groups: int
) -> dict[str, set[str]] | None:
    """Return each group's leaves once exactly ``groups`` groups run whole and ready."""
    found = groups_of(core, namespace, name)
    if len(found) != groups:
        return None
    if not all(
        len(p) == 2 and all(x.spec.node_name and ready(x) for x in p) for p in found.values()
    ):
        return None
    return {g: {leaf_of(p.spec.node_name) for p in pods} for g, pods in found.items()}


class Watcher(threading.Thread):
    """Samples the LWS's pods while it runs: a group bound across two leaves, the leaves each
    group held, and the records it saw."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, groups: int) -> None:
        super().__init__(daemon=True)
        self.groups = groups
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.name = namespace, name
        self.split: list[str] = []
        self.leaves: dict[str, set[str]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        #: every (gang, condition type, status, message) seen
        self.said: set[tuple[str, str, str, str]] = set()
        #: every placement each record had, in order
        self.history: dict[str, list[str]] = {}
        self.most_unready = 0
        self.done = threading.Event()
        self._stream: kube_watch.Watch | None = None

    def run(self) -> None:
        while not self.done.is_set():
            groups = groups_of(self.core, self.namespace, self.name)
            for gang, pods in groups.items():
                leaves = {leaf_of(p.spec.node_name) for p in pods if p.spec.node_name}
                if len(leaves) > 1:
                    self.split.append(f"{gang}: {sorted(leaves)}")
                self.leaves.setdefault(gang, set()).update(leaves)
            for item in self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, GANG_PLURAL
            )["items"]:
                self.records[item["metadata"]["name"]] = item
            self.most_unready = max(
                self.most_unready,
                sum(
                    1
                    for g in range(self.groups)
                    if not (
                        len(groups.get(f"{self.name}-{g}", [])) == 2
                        and all(ready(p) for p in groups[f"{self.name}-{g}"])
                    )
                ),
            )
            time.sleep(0.2)

    def _watch_records(self) -> None:
        """Every version of every record (a condition may hold for a moment only)."""
        stream = kube_watch.Watch()
        self._stream = stream
        try:
            for event in stream.stream(
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                GANG_PLURAL,
                timeout_seconds=600,
            ):
                item = event["object"]
                placement = (item.get("status") or {}).get("placement") or {}
                self.history.setdefault(item["metadata"]["name"], []).append(
                    f"{placement.get('state')}: {placement.get('message')} "
                    f"(nodes {placement.get('nodes')}, previous {placement.get('previousNodes')})"
                )
                for c in (item.get("status") or {}).get("conditions") or []:
                    self.said.add(
                        (item["metadata"]["name"], c["type"], c["status"], c.get("message", ""))
                    )
        except Exception:  # the stream closed under stop(): only an error while watching counts
            if not self.done.is_set():
                raise

    def __enter__(self) -> Watcher:
        threading.Thread(target=self._watch_records, daemon=True).start()
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        if self._stream is not None:
            self._stream.stop()
        self.join(5)


def roll(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Change the LWS's pod template: LWS rolls every group."""
    custom.patch_namespaced_custom_object(
        *LWS,
        namespace,
        "leaderworkersets",
        name,
        {
            "spec": {
                "leaderWorkerTemplate": {
                    "workerTemplate": {
                        "metadata": {"annotations": {"example.com/revision": str(time.time())}}
                    }
                }
            }
        },
    )


def rolled(custom: client.CustomObjectsApi, namespace: str, name: str, replicas: int) -> bool:
    """Return whether LWS says its rollout of the current generation has ended."""
    lws = custom.get_namespaced_custom_object(*LWS, namespace, "leaderworkersets", name)
    status = lws.get("status") or {}
    updating = any(
        c.get("type") == "UpdateInProgress" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return (
        status.get("observedGeneration") == lws["metadata"]["generation"]
        and not updating
        and status.get("updatedReplicas") == replicas
        and status.get("readyReplicas") == replicas
        and status.get("replicas") == replicas
    )


def explain_rollout(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str, watch: Watcher
) -> str:
    lws = custom.get_namespaced_custom_object(*LWS, namespace, "leaderworkersets", "chat")
    waits = {
        name: ((record.get("status") or {}).get("placement") or {}).get("message")
        for name, record in watch.records.items()
    }
    groups = sorted(groups_of(core, namespace, "chat"))
    return f"LWS status {lws.get('status')}; groups {groups}; records {waits}"


def condition(record: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(
        (c for c in (record.get("status") or {}).get("conditions") or [] if c["type"] == kind), {}
    )


def tenant(core: client.CoreV1Api, namespace: str, node: str) -> str:
    """Another tenant's pod of 8 GPUs bound to ``node`` (no gang, no scheduler)."""
    name = f"tenant-{node}"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.local/other:1",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        },
    )
    return name


@pytest.mark.parametrize(
    ("max_surge", "spare"),
    [(1, "free"), (0, "none"), (1, "held")],
    ids=["surge-with-room-for-5", "in-place-with-room-for-4", "surge-with-room-for-4"],
)
def test_a_rolling_update_keeps_every_group_whole_in_the_leaf_it_had(
    api: client.ApiClient, serving: str, fake_nodes: FabricFactory, max_surge: int, spare: str
) -> None:
    """4 groups of 2 nodes on leaves of 2 nodes; a fifth leaf is free, absent, or held by
    another tenant until the rollout is seen waiting for its surge group."""
    fake_nodes(fabric(4 if spare == "none" else 5))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    tenants = [tenant(core, serving, f"srv-s1l5-0{i}") for i in (1, 2)] if spare == "held" else []
    create_lws(custom, serving, "chat", replicas=4, max_surge=max_surge)
    before = wait_for(lambda: settled(core, serving, "chat", 4), 120, what="4 groups ready")
    assert all(len(v) == 1 for v in before.values()), f"each group in one leaf: {before}"
    old = {p.metadata.uid for pods in groups_of(core, serving, "chat").values() for p in pods}
    started = time.monotonic()
    with Watcher(api, serving, "chat", 4) as watch:
        roll(custom, serving, "chat")
        if tenants:

            def stalled() -> dict[str, Any] | None:
                record = watch.records.get("chat-4") or {}
                said = condition(record, "Surge").get("message", "")
                return record if "the rollout waits for it" in said else None

            surge = wait_for(stalled, 60, what="the surge group's record says the rollout waits")
            assert surge["status"]["placement"]["state"] == "Waiting"
            assert "head of line" not in surge["status"]["placement"]["message"], "no hold"
            assert not rolled(custom, serving, "chat", 4)
            for name in tenants:  # room for one more group: the rollout goes on
                core.delete_namespaced_pod(name, serving, grace_period_seconds=0)
        after = wait_for(
            lambda: rolled(custom, serving, "chat", 4) and settled(core, serving, "chat", 4),
            240,
            what="the rollout ended",
            explain=lambda: explain_rollout(custom, core, serving, watch),
        )
        took = time.monotonic() - started
        time.sleep(3)  # nothing moves once the rollout has ended
        assert settled(core, serving, "chat", 4) == after, explain_rollout(
            custom, core, serving, watch
        )
    now = {p.metadata.uid for pods in groups_of(core, serving, "chat").values() for p in pods}
    assert not now & old, "every group was replaced"
    assert not watch.split, f"a group was bound across leaves: {watch.split}"
    moved = [g for g in after if after[g] != before[g]]
    assert not moved, f"every group back in the leaf it left: {before} -> {after}: " + "; ".join(
        f"{g}: {' | '.join(watch.history.get(g, []))}" for g in moved
    )
    surge = watch.records.get("chat-4")
    if max_surge:
        assert surge is not None, "LWS made a surge group (maxSurge 1) and it got a record"
        assert condition(surge, "Surge").get("status") == "True", surge.get("status")
        (leaf,) = watch.leaves["chat-4"]
        assert leaf == "srv-s1l5", "the surge group in the free leaf"
    else:
        assert surge is None, "no surge group with maxSurge 0"
    print(f"rollout of 4 groups (maxSurge {max_surge}, fifth leaf {spare}): {took:.1f} s")


def degrade(core: client.CoreV1Api, node: str) -> None:
    core.patch_node(node, {"metadata": {"labels": {HEALTH: "degraded"}}})


def test_a_degraded_node_is_reported_and_its_groups_move_one_at_a_time(
    api: client.ApiClient, serving: str, fake_nodes: FabricFactory
) -> None:
    nodes = fake_nodes(fabric(4))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_lws(
        custom,
        serving,
        "moving",
        replicas=2,
        annotations={"tpfabric.io/on-degraded-link": "restart-elsewhere"},
    )
    before = wait_for(lambda: settled(core, serving, "moving", 2), 120, what="2 groups ready")
    # the operator's gang sync writes the record every 2 s: it may lag the pods a moment
    record = wait_for(
        lambda: (
            condition(
                r := custom.get_namespaced_custom_object(
                    GROUP, VERSION, serving, GANG_PLURAL, "moving-0"
                ),
                "Ready",
            ).get("status")
            == "True"
            and r
        ),
        15,
        what="the group's record Ready",
    )
    assert condition(record, "Ready")["status"] == "True", record["status"]
    assert condition(record, "Ready")["message"] == "2/2 pods ready"
    groups = groups_of(core, serving, "moving")
    # one node under each group turns degraded at once
    bad = {
        g: next(p.spec.node_name for p in pods if p.metadata.labels.get("tpfabric.io/rank") == "1")
        for g, pods in groups.items()
    }
    old = {p.metadata.uid for pods in groups.values() for p in pods}
    with Watcher(api, serving, "moving", 2) as watch:
        for node in bad.values():
            degrade(core, node)

        def moved() -> dict[str, set[str]] | None:
            now = groups_of(core, serving, "moving")
            if any(p.metadata.uid in old for pods in now.values() for p in pods):
                return None
            return settled(core, serving, "moving", 2)

        after = wait_for(moved, 180, what="both groups moved off their degraded nodes")
    for gang, node in bad.items():
        said = {(kind, status, words) for g, kind, status, words in watch.said if g == gang}
        degraded = [w for kind, status, w in said if kind == "Degraded" and status == "True"]
        assert any(f"rank 1 on node {node}" in w for w in degraded), said
        moving = [w for kind, status, w in said if kind == "Moving" and status == "True"]
        assert any(w.startswith("moving off the degraded node") for w in moving), said
    waited = [w for _, kind, _, w in watch.said if kind == "Moving" and "waits" in w]
    print(f"moves that waited for a safe point: {sorted(set(waited))}")
    placed = {
        p.spec.node_name for pods in groups_of(core, serving, "moving").values() for p in pods
    }
    assert not placed & set(bad.values()), f"off the degraded nodes: {placed}"
    assert watch.most_unready <= 1, "one group at a time (maxUnavailable 1)"
    for gang in after:
        # the record follows its pods within the operator's one-second sync batch
        wait_for(
            lambda gang=gang: (
                condition(
                    custom.get_namespaced_custom_object(GROUP, VERSION, serving, GANG_PLURAL, gang),
                    "Degraded",
                ).get("status")
                != "True"
            ),
            15,
            what=f"{gang}'s record no longer Degraded once it moved",
        )
        assert len(after[gang]) == 1, f"{gang} whole in one leaf: {after}"
    assert before != after
    del nodes


def test_a_decode_lws_waits_for_its_prefill_and_lands_under_its_spine(
    api: client.ApiClient, serving: str, fake_nodes: FabricFactory
) -> None:
    fake_nodes(fabric(2, spines=2))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_lws(
        custom,
        serving,
        "decode",
        replicas=1,
        annotations={"tpfabric.io/near": "prefill", "tpfabric.io/near-mode": "required"},
    )

    def waits() -> dict[str, Any] | None:
        try:
            record = custom.get_namespaced_custom_object(
                GROUP, VERSION, serving, GANG_PLURAL, "decode-0"
            )
        except client.ApiException:
            return None
        placement = (record.get("status") or {}).get("placement") or {}
        return (
            record if "waits for 'prefill' to be placed" in placement.get("message", "") else None
        )

    record = wait_for(waits, 60, what="decode waits for prefill")
    assert record["spec"]["near"] == {"target": "prefill", "level": "spine", "mode": "required"}
    assert not any(
        p.spec.node_name for pods in groups_of(core, serving, "decode").values() for p in pods
    )
    # prefill pinned to the second spine: best fit alone would put decode in the first
    create_lws(custom, serving, "prefill", replicas=1, node_selector={SPINE: "srv-s2"})
    prefill = wait_for(lambda: settled(core, serving, "prefill", 1), 120, what="prefill placed")
    decode = wait_for(lambda: settled(core, serving, "decode", 1), 120, what="decode placed")
    (prefill_leaf,) = prefill["prefill-0"]
    (decode_leaf,) = decode["decode-0"]
    assert spine_of(decode_leaf) == spine_of(prefill_leaf) == "srv-s2"

    def said() -> tuple[dict[str, Any], dict[str, Any]] | None:
        near = custom.get_namespaced_custom_object(GROUP, VERSION, serving, GANG_PLURAL, "decode-0")
        by = custom.get_namespaced_custom_object(GROUP, VERSION, serving, GANG_PLURAL, "prefill-0")
        if (by.get("status") or {}).get("nearBy"):
            return near, by
        return None

    near, by = wait_for(said, 30, what="prefill's record names decode")
    assert near["status"]["placement"]["near"] == "near 'prefill' in spine 'srv-s2' (required)"
    assert by["status"]["nearBy"] == ["decode-0: near 'prefill' in spine 'srv-s2' (required)"]


def test_the_disaggregated_example_is_placed_as_it_is(
    api: client.ApiClient, serving: str, fake_nodes: FabricFactory
) -> None:
    """examples/gangs/vllm-disaggregated.yaml: decode under prefill's spine, both records say."""
    fake_nodes(fabric(2, spines=2))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    path = Path(__file__).parents[2] / "examples" / "gangs" / "vllm-disaggregated.yaml"
    for manifest in yaml.safe_load_all(path.read_text()):
        manifest["metadata"]["namespace"] = serving
        custom.create_namespaced_custom_object(*LWS, serving, "leaderworkersets", manifest)
    prefill = wait_for(lambda: settled(core, serving, "vllm-prefill", 1), 120, what="prefill")
    decode = wait_for(lambda: settled(core, serving, "vllm-decode", 1), 120, what="decode")
    (spine,) = {
        spine_of(leaf) for leaves in (*prefill.values(), *decode.values()) for leaf in leaves
    }

    def said() -> dict[str, Any] | None:
        record = custom.get_namespaced_custom_object(
            GROUP, VERSION, serving, GANG_PLURAL, "vllm-prefill-0"
        )
        return record if (record.get("status") or {}).get("nearBy") else None

    by = wait_for(said, 30, what="prefill's record names decode")
    words = f"near 'vllm-prefill' in spine '{spine}' (preferred)"
    assert by["status"]["nearBy"] == [f"vllm-decode-0: {words}"]
    near = custom.get_namespaced_custom_object(
        GROUP, VERSION, serving, GANG_PLURAL, "vllm-decode-0"
    )
    assert near["status"]["placement"]["near"] == words
