"""A gang's world for the gang half's unit tests: its pods as the API server lists them, a
recording stand-in of :class:`~tpfabric_operator.gangs.kube.GangApi`, and a gang state on
clocks the test drives."""

from __future__ import annotations

import copy
from typing import Any

from tpfabric_core.gangs import (
    GANG_LABEL,
    GANG_NAME_LABEL,
    GANG_SIZE_LABEL,
    LWS_GROUP_INDEX,
    LWS_NAME,
    LWS_SIZE,
    LWS_WORKER_INDEX,
    ON_DEGRADED_ANNOTATION,
    RANK_LABEL,
    GangMember,
)
from tpfabric_operator.gangs import serving
from tpfabric_operator.gangs.owners import OwnerRead
from tpfabric_operator.gangs.pods import GangKey, gang_pod
from tpfabric_operator.gangs.records import GangPod, OwnerRef
from tpfabric_operator.gangs.state import GangState
from tpfabric_operator.gangs.sync import sync_gang

NS = "team"
T0 = 1_800_000_000.0


def lws_pod(
    lws: str,
    group: int,
    worker: int,
    *,
    size: int = 2,
    ready: bool = False,
    node: str | None = None,
) -> dict[str, Any]:
    """Return a pod of group ``group`` of LeaderWorkerSet ``lws``, labelled by the gang webhook."""
    name = f"{lws}-{group}" + (f"-{worker}" if worker else "")
    status: dict[str, Any] = {"phase": "Running" if ready else "Pending"}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-12-04T10:00:00Z",
            "labels": {
                LWS_NAME: lws,
                LWS_GROUP_INDEX: str(group),
                LWS_WORKER_INDEX: str(worker),
                GANG_LABEL: f"{lws}-{group}",
                RANK_LABEL: str(worker),
            },
            "annotations": {LWS_SIZE: str(size)},
        },
        "spec": {"nodeName": node} if node else {},
        "status": status,
    }


def group_pod(
    group: str, name: str, *, size: int = 3, rank: int | None = None, job: str = "trainer"
) -> dict[str, Any]:
    """Return a pod of the plain pod group ``group`` (made by Job ``job``)."""
    labels = {GANG_NAME_LABEL: group, GANG_SIZE_LABEL: str(size), GANG_LABEL: group}
    if rank is not None:
        labels[RANK_LABEL] = str(rank)
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-12-04T10:00:0{len(name) % 10}Z",
            "labels": labels,
            "ownerReferences": [{"kind": "Job", "name": job, "controller": True}],
        },
        "spec": {},
        "status": {"phase": "Pending"},
    }


def pods_of(*manifests: dict[str, Any]) -> list[GangPod]:
    """Return the gang pods the operator reads of ``manifests``."""
    pods = [gang_pod(m) for m in manifests]
    assert all(p is not None for p in pods)
    return [p for p in pods if p is not None]


def an_lws(name: str, *, replicas: int = 2, move: bool = False) -> dict[str, Any]:
    """Return LeaderWorkerSet ``name`` (groups of 2; ``move``: restart-elsewhere)."""
    annotations = {ON_DEGRADED_ANNOTATION: "restart-elsewhere"} if move else {}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}},
    }


class RecordingApi:
    """What the gang half asks of the API server, answered from memory, every call written
    down in :attr:`calls` (the writes with what they wrote)."""

    def __init__(self) -> None:
        self.pods: dict[GangKey, list[GangPod]] = {}
        self.records: dict[GangKey, dict[str, Any]] = {}
        self.owners: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> the object
        self.opted: set[str] = {NS}
        self.other_namespaces: dict[GangKey, list[str]] = {}
        self.calls: list[tuple[Any, ...]] = []

    def record(self, key: GangKey) -> Any:
        self.calls.append(("get record", key[1]))
        return copy.deepcopy(self.records.get(key))

    def listed_pods(self, key: GangKey) -> list[GangPod]:
        return list(self.pods.get(key, []))

    def owner(self, member: GangMember) -> OwnerRead:
        self.calls.append(("get owner", member.kind, member.owner))
        found = self.owners.get((member.kind, member.owner))
        if found is None:
            return OwnerRead()
        ref = OwnerRef("x/v1", member.kind, member.owner, found["metadata"]["uid"])
        return OwnerRead(ref, found)

    def lws(self, namespace: str, name: str) -> serving.LwsView | None:
        self.calls.append(("get lws", name))
        found = self.owners.get(("LeaderWorkerSet", name))
        return serving.lws_view(found) if found is not None else None

    def elsewhere(self, key: GangKey, pods: list[GangPod], size: int) -> list[str]:
        return self.other_namespaces.get(key, [])

    def opted_in(self, namespace: str) -> bool:
        return namespace in self.opted

    def make_record(self, key: GangKey, manifest: dict[str, Any]) -> Any:
        self.calls.append(("make record", key[1], manifest["spec"]["workers"]))
        record = copy.deepcopy(manifest)
        record["metadata"]["uid"] = f"uid-record-{key[1]}"
        self.records[key] = record
        return copy.deepcopy(record)

    def label_rank(self, key: GangKey, pod: str, rank: int) -> None:
        self.calls.append(("label rank", pod, rank))

    def move_group(self, key: GangKey, leader: GangPod) -> None:
        self.calls.append(("delete pod", leader.name))

    def write_status(self, key: GangKey, status: dict[str, Any]) -> Any:
        self.calls.append(("write status", key[1], status.get("phase")))
        record = self.records[key]
        record["status"] = {**(record.get("status") or {}), **copy.deepcopy(status)}
        return copy.deepcopy(record)

    def delete_record(self, key: GangKey, record: dict[str, Any]) -> None:
        self.calls.append(("delete record", key[1], record["metadata"]["uid"]))
        self.records.pop(key, None)

    def warn_pods(self, key: GangKey, pods: list[GangPod], *, reason: str, words: str) -> None:
        self.calls.append(("warn pods", reason, words))

    def writes(self) -> list[tuple[Any, ...]]:
        """Return the calls that wrote something."""
        return [c for c in self.calls if not c[0].startswith("get ")]


class Clock:
    """The wall clock and the monotonic one, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def a_gang_world(
    *, sync_seconds: float = 2.0, idle_seconds: float = 5.0
) -> tuple[GangState, RecordingApi, Clock]:
    """Return a gang state on a recording API and a driven clock (no watch: the pods are
    listed, as in an operator's first moments)."""
    api = RecordingApi()
    clock = Clock()
    gangs = GangState(
        api,  # type: ignore[arg-type]
        sync_gang,
        sync_seconds=sync_seconds,
        idle_seconds=idle_seconds,
        wall=clock.wall,
        monotonic=clock.monotonic,
    )
    return gangs, api, clock
