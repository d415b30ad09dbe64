"""The informers' paginated list (fake list calls; no API server)."""

from __future__ import annotations

import copy
import io
import math
import weakref
from typing import Any

import orjson
import pytest
from builders import a_job, a_node, a_worker
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GANG_GATE
from tpfabric_kube.malformed import MalformedObjects, Notice
from tpfabric_scheduler.kube import (
    LIST_PAGE_SIZE,
    POD_PAGE_SIZE,
    Informer,
    KubeWriter,
    informer_kinds,
    list_pages,
    slim_job,
    slim_node,
    slim_pod,
)
from tpfabric_scheduler.store import ClusterStore, JobRecord, NodeRecord, PodRecord


class Marker:
    """Rides in a raw object's managedFields: alive exactly as long as the raw page is."""


class Response:
    def __init__(self, body: bytes) -> None:
        self.data = body


class PagedList:
    """A list call serving ``objects`` in pages, checking what is still alive at every call."""

    def __init__(self, objects: list[dict[str, Any]], version: str = "42") -> None:
        self.objects = objects
        self.version = version
        self.calls: list[dict[str, Any]] = []
        self.alive_at_call: list[int] = []
        self._markers: list[weakref.ref[Marker]] = []
        self._responses: list[weakref.ref[Response]] = []

    def __call__(self, **kwargs: Any) -> Response:
        self.calls.append(kwargs)
        self.alive_at_call.append(
            sum(m() is not None for m in self._markers)
            + sum(r() is not None for r in self._responses)
        )
        limit = kwargs["limit"]
        start = int(kwargs.get("_continue") or 0)
        items = self.objects[start : start + limit]
        more = start + limit < len(self.objects)
        body = orjson.dumps(
            {
                "metadata": {
                    "resourceVersion": self.version,
                    **({"continue": str(start + limit)} if more else {}),
                },
                "items": items,
            }
        )
        response = Response(body)
        self._responses.append(weakref.ref(response))
        return response

    def spy_on_pages(self, parse: Any) -> None:
        """Plant a marker in every parsed raw object (its managedFields) to see it die."""

        def loads(body: bytes) -> Any:
            page = parse(body)
            for item in page.get("items") or []:
                marker = Marker()
                self._markers.append(weakref.ref(marker))
                item["metadata"]["managedFields"] = [marker]
            return page

        self.loads = loads


def pods(count: int) -> list[dict[str, Any]]:
    return [a_worker(f"job{i // 4}", i % 4, node=f"n{i % 50}", gated=False) for i in range(count)]


def test_a_list_is_read_in_pages_with_the_continue_token() -> None:
    listed = PagedList(pods(1200))
    objects, version = list_pages(listed, slim_pod)
    assert version == "42"
    assert len(objects) == 1200
    assert [c.get("_continue") for c in listed.calls] == [None, "500", "1000"]
    assert {c["limit"] for c in listed.calls} == {LIST_PAGE_SIZE}
    assert all(c["_preload_content"] is False for c in listed.calls)


def test_at_most_one_page_of_raw_objects_is_alive_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed = PagedList(pods(1600))
    listed.spy_on_pages(orjson.loads)
    monkeypatch.setattr("tpfabric_kube.list_watch.orjson.loads", listed.loads)
    objects, _ = list_pages(listed, slim_pod)
    assert len(objects) == 1600
    # when page N+1 is asked for, nothing of page N's response or raw objects is left
    assert listed.alive_at_call == [0, 0, 0, 0]
    assert all("managedFields" not in o["metadata"] for o in objects)


def test_an_empty_list_has_the_version_of_its_one_page() -> None:
    listed = PagedList([], version="7")
    assert list_pages(listed, slim_node) == ([], "7")
    assert len(listed.calls) == 1


# -- slim objects make the same records --------------------------------------------------------


def a_rich_pod() -> dict[str, Any]:
    pod = a_worker("llama", 3, node="n1", gated=True)
    pod["metadata"].update(
        {
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}",
                "team": "infra",
            },
            "ownerReferences": [{"kind": "TensorParallelJob", "name": "llama", "uid": "u"}],
            "deletionTimestamp": "2025-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        }
    )
    pod["spec"].update(
        {
            "priority": 1000,
            "priorityClassName": "high",
            "nodeSelector": {"a": "b"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
            "initContainers": [
                {"name": "rdma-init", "image": "x", "resources": {"limits": {"rdma/ib": "1"}}},
                {  # a sidecar: its requests add to the app containers'
                    "name": "log-shipper",
                    "image": "x",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                },
            ],
        }
    )
    pod["spec"]["containers"][0].update(
        {
            "image": "vllm",
            "env": [{"name": f"E{i}", "value": "v"} for i in range(50)],
            "command": ["python"],
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            "resources": {
                "limits": {"nvidia.com/gpu": "8", "rdma/ib": "1"},
                "requests": {"cpu": "16", "nvidia.com/gpu": "8"},
            },
        }
    )
    pod["status"].update(
        {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "w", "ready": True, "restartCount": 0}],
        }
    )
    return pod


def a_rich_node() -> dict[str, Any]:
    node = a_node("n1", "leaf-1")
    node["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    node["spec"] = {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "X"}]}
    node["status"]["images"] = [{"names": [f"image-{i}"], "sizeBytes": i} for i in range(100)]
    node["status"]["nodeInfo"] = {"kubeletVersion": "v1.37.2"}
    return node


def test_a_slim_pod_makes_the_record_of_the_whole_pod() -> None:
    pod = a_rich_pod()
    slim = slim_pod(copy.deepcopy(pod))
    assert PodRecord.from_object(slim) == PodRecord.from_object(pod)
    assert len(orjson.dumps(slim)) < len(orjson.dumps(pod)) / 4


def test_a_slim_node_makes_the_record_of_the_whole_node() -> None:
    node = a_rich_node()
    slim = slim_node(copy.deepcopy(node))
    assert NodeRecord.from_object(slim) == NodeRecord.from_object(node)
    assert "images" not in slim["status"]


def test_a_slim_job_makes_the_record_of_the_whole_job() -> None:
    job = a_job("llama", 4, plan=("leaf", "leaf-1", ["n1", "n2", "n3", "n4"]))
    job["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    job["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    slim, whole = JobRecord.from_object(slim_job(copy.deepcopy(job))), JobRecord.from_object(job)
    assert slim.job is not None
    assert whole.job is not None
    assert slim.job.spec == whole.job.spec
    assert (slim.key, slim.uid, slim.generation, slim.raw_status, slim.created) == (
        whole.key, whole.uid, whole.generation, whole.raw_status, whole.created
    )  # fmt: skip


# -- the informer loop -----------------------------------------------------------------------

KINDS = ("nodes", "pods", "tensorparalleljobs")


def test_an_informer_feeds_the_store_from_every_page_and_relists_after_410() -> None:
    store = ClusterStore()
    listed = PagedList(pods(700))
    changes: list[None] = []
    kind = next(k for k in informer_kinds(store, dict.fromkeys(KINDS, listed)) if k.name == "pods")
    informer = Informer(kind, store, lambda: changes.append(None))
    watched: list[str] = []

    def watch_from(version: str) -> str:
        watched.append(version)
        if len(watched) == 1:
            listed.objects = listed.objects[:10]  # what the relist will see
            raise ApiException(status=410, reason="Gone")
        informer.stop()
        return version

    informer._watch_from = watch_from  # type: ignore[method-assign]
    informer.run()
    assert informer.synced.is_set()
    assert watched == ["42", "42"]
    # every page of POD_PAGE_SIZE pods, then one page after the relist
    assert len(listed.calls) == math.ceil(700 / POD_PAGE_SIZE) + 1
    assert all(call["limit"] == POD_PAGE_SIZE for call in listed.calls)
    assert len(store.pods) == 10
    assert len(changes) == 2


# -- the writer ----------------------------------------------------------------------------------


class FakeCustom:
    """Records status patches; answers 422 to a JSON patch while ``refuse`` says so."""

    def __init__(self, refuse: int = 0) -> None:
        self.patches: list[tuple[Any, str | None]] = []
        self.refuse = refuse

    def patch_namespaced_custom_object_status(
        self, *args: Any, _content_type: str | None = None
    ) -> None:
        self.patches.append((args[-1], _content_type))
        if _content_type and self.refuse:
            self.refuse -= 1
            raise ApiException(status=422, reason="Invalid")


def a_writer(custom: Any = None, core: Any = None) -> KubeWriter:
    writer = KubeWriter.__new__(KubeWriter)
    writer.custom, writer.core = custom, core
    return writer


def test_a_status_write_for_one_incarnation_tests_its_uid_and_replaces_the_placement() -> None:
    custom = FakeCustom()
    a_writer(custom).patch_job_status("ns", "j", {"placement": {"state": "Planned"}}, uid="u1")
    ((ops, content_type),) = custom.patches
    assert content_type == "application/json-patch+json"
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "add", "path": "/status/placement", "value": {"state": "Planned"}},
    ]


def test_the_first_status_of_a_job_is_added_whole_if_it_still_has_none() -> None:
    custom = FakeCustom(refuse=1)  # no /status to add into
    a_writer(custom).patch_job_status("ns", "j", {"placement": None}, uid="u1")
    ops, _ = custom.patches[1]
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "test", "path": "/status", "value": None},
        {"op": "add", "path": "/status", "value": {"placement": None}},
    ]


def test_a_status_write_for_another_incarnation_fails() -> None:
    custom = FakeCustom(refuse=2)
    with pytest.raises(ApiException):
        a_writer(custom).patch_job_status("ns", "j", {"placement": None}, uid="old")


def test_a_status_write_without_uid_is_a_merge_patch() -> None:
    custom = FakeCustom()
    a_writer(custom).patch_job_status("ns", "j", {"placement": None})
    assert custom.patches == [({"status": {"placement": None}}, None)]


class FakeCore:
    def __init__(self, status: int | None) -> None:
        self.status = status
        self.deleted: list[tuple[str, str, Any]] = []

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any = None) -> None:
        self.deleted.append((namespace, name, body))
        if self.status is not None:
            raise ApiException(status=self.status, reason="x")


@pytest.mark.parametrize("status", [None, 404, 409])
def test_deleting_a_pod_names_its_incarnation_and_a_pod_gone_is_fine(status: int | None) -> None:
    core = FakeCore(status)
    a_writer(core=core).delete_pod("ns", "p", "u1")
    assert core.deleted == [("ns", "p", {"preconditions": {"uid": "u1"}})]


def test_deleting_a_pod_fails_on_other_errors() -> None:
    with pytest.raises(ApiException):
        a_writer(core=FakeCore(403)).delete_pod("ns", "p", "u1")


class PatchingCore:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, Any]] = []

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: Any, _preload_content: bool = True
    ) -> Any:
        self.patches.append((namespace, name, body))
        return io.BytesIO(b"{}")  # the raw answer, read and dropped


def test_a_known_pod_is_released_in_one_write_guarded_by_what_the_store_knows() -> None:
    pod = PodRecord.from_object(a_worker("llama", 0))
    core = PatchingCore()
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    a_writer(core=core).release_known_pod(pod, affinity, [])
    ((namespace, name, ops),) = core.patches
    assert (namespace, name) == ("ns", "llama-worker-0")
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": GANG_GATE}]},
    ]
    assert ops[2:] == [
        {"op": "add", "path": "/spec/affinity", "value": affinity},
        {"op": "add", "path": "/spec/schedulingGates", "value": []},
    ]


# -- one object never stops the others ----------------------------------------------------------


class Stream:
    """A watch that delivers ``events`` (as the client's Watch with ``deserialize=False``)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    def stream(self, *_: Any, **__: Any) -> Any:
        return iter(self.events)

    def stop(self) -> None:
        pass


def test_a_pod_the_informer_cannot_read_is_skipped_by_a_list_and_forgotten_by_a_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = ClusterStore()
    poison = a_worker("poison", 0, node="n1", gated=False)
    poison["spec"]["priority"] = "high"  # a value the record cannot read (a parser's bug)
    listed = PagedList([a_worker("llama", 0, node="n1", gated=False), poison])
    told: list[Notice] = []
    reports = MalformedObjects("test-informer", notify=told.append)
    kind = next(
        k for k in informer_kinds(store, dict.fromkeys(KINDS, listed), reports) if k.name == "pods"
    )
    informer = Informer(kind, store, lambda: None, reports)
    informer.relist()
    assert set(store.pods) == {"ns/llama-worker-0"}  # the list went on past the poison

    broken = a_worker("llama", 0, node="n1", gated=False)
    broken["spec"]["priority"] = "high"
    after = a_worker("mistral", 0, node="n2", gated=False)
    events = [
        {"type": "MODIFIED", "object": {**broken, "metadata": {**broken["metadata"]}}},
        {"type": "ADDED", "object": after},
    ]
    monkeypatch.setattr("tpfabric_scheduler.kube.informers.watch.Watch", lambda: Stream(events))
    informer._watch_from("42")
    # the pod that turned unreadable is forgotten, as a relist would; the next event applies
    assert set(store.pods) == {"ns/mistral-worker-0"}
    assert reports.drain()
    assert {n.where for n in told} == {"ns/poison-worker-0", "ns/llama-worker-0"}
    assert all(n.kind == "Pod" and n.skipped for n in told)


def test_a_degraded_node_whose_health_detail_cannot_be_read_is_kept_and_reported() -> None:
    store = ClusterStore()
    node = a_node("n1", "leaf-1")
    node["metadata"]["labels"]["topology.tpfabric.io/health"] = "degraded"
    node["metadata"]["annotations"] = {"topology.tpfabric.io/fabric-health": "[" * 100_000}
    told: list[Notice] = []
    reports = MalformedObjects("test-node-detail", notify=told.append)
    kind = next(
        k
        for k in informer_kinds(store, dict.fromkeys(KINDS, PagedList([node])), reports)
        if k.name == "nodes"
    )
    Informer(kind, store, lambda: None, reports).relist()
    assert store.nodes["n1"].kept is None  # unmeasured: the node stays, without its detail
    assert reports.drain()
    assert [(n.where, n.field, n.skipped) for n in told] == [
        ("n1", "topology.tpfabric.io/fabric-health", False)
    ]
    assert "100000 characters" in told[0].message


def test_a_release_adds_the_plans_annotations_key_by_key_or_as_a_map_to_a_pod_without_any() -> None:
    pod = PodRecord.from_object(a_worker("llama", 0))
    core = PatchingCore()
    notes = {"tpfabric.io/rails": "0=0x00000000000000aa", "tpfabric.io/plan-level": "leaf"}
    a_writer(core=core).release_known_pod(pod, None, [], annotations=notes)
    ((_, _, ops),) = core.patches
    assert ops[2:4] == [
        {
            "op": "add",
            "path": "/metadata/annotations/tpfabric.io~1rails",
            "value": notes["tpfabric.io/rails"],
        },
        {"op": "add", "path": "/metadata/annotations/tpfabric.io~1plan-level", "value": "leaf"},
    ]
    a_writer(core=core).release_pod("ns", "p", "7", None, [], annotations=notes, annotated=False)
    assert {"op": "add", "path": "/metadata/annotations", "value": notes} in core.patches[-1][2]


def test_a_node_off_the_fabrics_roce_contract_is_placed_like_a_degraded_one() -> None:
    node = a_node("n1", "leaf-1")
    node["status"]["conditions"].append(
        {"type": "FabricContractMet", "status": "False", "reason": "SettingsMismatch",
         "message": "PFC off on priority 3 on ens1f0np0"}
    )  # fmt: skip
    record = NodeRecord.from_object(node)
    assert record.labels["topology.tpfabric.io/health"] == "degraded"
    assert node["metadata"]["labels"]["topology.tpfabric.io/health"] == "ok"  # the object stays
    for status in ("True", "Unknown"):  # unreadable settings are no mismatch
        node["status"]["conditions"][-1]["status"] = status
        assert NodeRecord.from_object(node).labels["topology.tpfabric.io/health"] == "ok"
