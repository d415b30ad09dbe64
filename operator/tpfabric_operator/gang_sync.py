"""Keeps one Gang record per gang another controller made (:mod:`.gang_records` decides what).

The gang pods come from one list+watch of their own (:mod:`.gang_pods`: a server-side label
selector, no other pod reaches the operator): every change marks its gang, and the syncer's
threads bring each marked gang's record in step once, from the watched pods. A record's own
changes (the placer's plan, a deletion by hand) mark its gang too, and every ``SYNC_SECONDS``
each gang and record whose last sync did not find it in step is marked again (no kopf timer: it
would put kopf's finalizer on every record). Only the leader writes. One
sync, each only when it changes: creates the record (owned by the LeaderWorkerSet, JobSet or
PodGroup, so that garbage collection removes it), writes the ranks still missing once every pod
exists, and writes the record's status. A record whose pods have all been gone for
``IDLE_SECONDS`` is deleted (a pod group has no owner to take it along).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GANG_GATE, GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import (
    GANG_LABEL,
    JOBSET_EXCLUSIVE,
    JOBSET_JOB_INDEX,
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    RANK_LABEL,
    GangSettings,
    gang_of,
)
from tpfabric_operator import leadership
from tpfabric_operator.gang_admission import default_levels
from tpfabric_operator.gang_pods import GangPods, GangSyncer
from tpfabric_operator.gang_records import (
    JOBSET_API,
    LWS_API,
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSIONS,
    GangPod,
    OwnerRef,
    elsewhere_problem,
    jobset_layout,
    owners_problem,
    pod_gpus,
    pod_group_gang,
    ranks_to_write,
    record_manifest,
    record_status,
)
from tpfabric_operator.settings import GANG_IDLE_SECONDS, GANG_SYNC_SECONDS

__all__ = ["sync_gang"]

log = logging.getLogger("tpfabric.operator.gangs")
SYNC_SECONDS = GANG_SYNC_SECONDS
IDLE_SECONDS = GANG_IDLE_SECONDS
SETTINGS = GangSettings(levels=default_levels(), max_size=1024)
_NOT_FOUND = 404
_CONFLICT = 409

_api: client.ApiClient | None = None
_idle_since: dict[tuple[str, str], float] = {}
#: (namespace, gang) -> when other namespaces were looked at, and those with a record of its name
_namespaces_seen: dict[tuple[str, str], tuple[float, list[str]]] = {}
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def _client() -> client.ApiClient:
    global _api  # noqa: PLW0603 - one client per operator process
    if _api is None:
        from tpfabric_operator.handlers import adapter  # noqa: PLC0415 - after kopf's login

        _api = adapter().core.api_client
    return _api


def _lock(key: tuple[str, str]) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _gang_pod(pod: Mapping[str, Any]) -> GangPod | None:
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    member = gang_of(meta, SETTINGS, spec=pod.get("spec") or {})
    if member is None:
        return None
    conditions = status.get("conditions") or []
    controller = next(
        (
            f"{ref.get('kind')}/{ref.get('name')}"
            for ref in meta.get("ownerReferences") or []
            if ref.get("controller")
        ),
        "",
    )
    return GangPod(
        name=str(meta.get("name")),
        member=member,
        created=str(meta.get("creationTimestamp") or ""),
        labels=meta.get("labels") or {},
        phase=str(status.get("phase") or "Pending"),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        gpus=pod_gpus(pod),
        gated=any(
            g.get("name") == GANG_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or []
        ),
        controller=controller,
    )


def _owner(custom: client.CustomObjectsApi, first: GangPod) -> tuple[OwnerRef | None, Any]:
    """Return the gang's owner reference and the owner object (None for a pod group, or when the
    owner is gone)."""
    member = first.member
    if member.kind == "PodGroup":
        return None, None
    if member.kind == "WorkloadPodGroup":  # the versions the cluster may serve, newest first
        apis = [(PODGROUP_GROUP, v, PODGROUP_PLURAL, "PodGroup") for v in PODGROUP_VERSIONS]
    else:
        apis = [LWS_API if member.kind == "LeaderWorkerSet" else JOBSET_API]
    for group, version, plural, kind in apis:
        try:
            owner = custom.get_namespaced_custom_object(
                group, version, member.namespace, plural, member.owner
            )
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            continue
        uid = str((owner.get("metadata") or {}).get("uid") or "")
        return OwnerRef(f"{group}/{version}", kind, member.owner, uid), owner
    return None, None


def _size(first: GangPod, owner: Any) -> tuple[int | None, dict[str, int] | None]:
    """Return the gang's size and, for a JobSet, its rank layout."""
    member = first.member
    if member.kind == "WorkloadPodGroup":
        return (pod_group_gang(owner, SETTINGS.levels)[0] if owner else None), None
    if member.kind != "JobSet":
        return member.size, None
    if owner is None:
        return None, None
    per_job = first.labels.get(JOBSET_EXCLUSIVE) or member.gang != member.owner
    job = f"{first.labels.get(JOBSET_REPLICATED_JOB, '')}/{first.labels.get(JOBSET_JOB_INDEX, '')}"
    layout = jobset_layout(owner, job if per_job else None)
    return (layout[""] if layout else None), layout


def _identify(
    custom: client.CustomObjectsApi, first: GangPod, pods: list[GangPod], record: Any
) -> tuple[GangPod, int | None, dict[str, int] | None, OwnerRef | None, list[str]]:
    """Return the gang's first pod (its topology ask completed from a PodGroup), its size, a
    JobSet's rank layout, the owner reference and what is wrong.

    The owner is read only when it is needed: to make the record (its uid, a JobSet's or a
    PodGroup's size) or to rank a JobSet's pods; every other pod event costs no read of it.
    """
    jobset_ranks = first.member.kind == "JobSet" and any(p.rank is None for p in pods)
    owner_ref: OwnerRef | None = None
    layout: dict[str, int] | None = None
    if record is None or jobset_ranks:
        owner_ref, owner = _owner(custom, first)
        size, layout = _size(first, owner)
    else:
        size = int((record.get("spec") or {}).get("workers") or 0) or None
    problems = [p.words() for p in first.member.problems]
    if first.member.kind == "WorkloadPodGroup" and owner_ref is not None:
        size, asked, said = pod_group_gang(owner, SETTINGS.levels)
        problems.extend(said)
        if asked is not None and first.member.topology.level is None:  # the pod's own wins
            first = replace(first, member=replace(first.member, topology=asked))
    if size is None:
        problems.append(_no_size(first))
    return first, size, layout, owner_ref, problems


def _no_size(first: GangPod) -> str:
    """Return why the gang of ``first`` has no size (its owner object does not give one)."""
    member = first.member
    if member.kind == "WorkloadPodGroup":
        return (
            f"spec.schedulingGroup.podGroupName: the PodGroup {member.owner!r} does not exist "
            "or gives no gang size"
        )
    return f"{JOBSET_NAME}: the JobSet {member.owner!r} does not give the size"


def sync_gang(namespace: str, gang: str) -> bool:
    """Bring the Gang record of ``namespace/gang`` in step with its pods (leader only); return
    whether it was in step already (nothing written, nothing missing)."""
    if not leadership.leading():
        return False
    key = (namespace, gang)
    with _lock(key):
        return _sync(namespace, gang)


def _pods_of(core: client.CoreV1Api, api: client.ApiClient, key: tuple[str, str]) -> list[GangPod]:
    """Return the live pods of gang ``key``: from the pod watch once it has listed, else listed
    (the first moments of an operator)."""
    if _gang_pods is not None and _gang_pods.synced.is_set():
        return _gang_pods.pods(key)
    listed = core.list_namespaced_pod(key[0], label_selector=f"{GANG_LABEL}={key[1]}")
    return [
        p for p in map(_gang_pod, (api.sanitize_for_serialization(i) for i in listed.items)) if p
    ]


def _sync(namespace: str, gang: str) -> bool:
    api = _client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    pods = _pods_of(core, api, (namespace, gang))
    try:
        record = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL, gang)
    except ApiException as err:
        if err.status != _NOT_FOUND:
            raise
        record = None
    if not pods:
        _forget_when_idle(custom, namespace, gang, record)
        return False
    _idle_since.pop((namespace, gang), None)
    first = min(pods, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.created))
    first, size, layout, owner_ref, problems = _identify(custom, first, pods, record)
    if size is None:
        log.warning("gang %s/%s: no record: %s", namespace, gang, problems[-1])
    made = record is None
    if record is None and owner_ref is None and first.member.kind != "PodGroup":
        # its owner is gone (garbage collection takes its record, then its pods): a record
        # made now would have no owner and outlive them
        log.info("gang %s/%s: no record: its %s is gone", namespace, gang, first.member.kind)
        return False
    if record is None and size is not None:
        manifest = record_manifest(first, size, owner_ref)
        try:
            record = custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, GANG_PLURAL, manifest
            )
            log.info(
                "gang %s/%s: record made (%d pods of %s)", namespace, gang, size, first.member.kind
            )
        except ApiException as err:
            if err.status != _CONFLICT:
                raise
            record = custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, GANG_PLURAL, gang
            )
    if record is None or size is None:
        return False
    size = int((record.get("spec") or {}).get("workers") or size)
    problems.extend(
        p
        for p in (
            owners_problem(pods),
            elsewhere_problem(pods, size, _elsewhere(custom, namespace, gang, pods, size)),
        )
        if p
    )
    ranks = ranks_to_write(pods, size, layout)
    for name, rank in ranks.items():
        core.patch_namespaced_pod(
            name, namespace, {"metadata": {"labels": {RANK_LABEL: str(rank)}}}
        )
        log.info("gang %s/%s: pod %s is rank %d", namespace, gang, name, rank)
    stored = record.get("status") or {}
    status = record_status(pods, size, stored.get("placement") or {}, problems)
    if any(stored.get(k) != v for k, v in status.items()):
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, GANG_PLURAL, gang, {"status": status}
        )
        return False
    # a gang short of pods is never settled: a namesake in another namespace (elsewhere_problem)
    # shows in no event of its own
    return not made and not ranks and len(pods) >= size


def _elsewhere(
    custom: client.CustomObjectsApi, namespace: str, gang: str, pods: list[GangPod], size: int
) -> list[str]:
    """Return the other namespaces with a Gang record of this pod group's name, while it lacks
    pods here (one list of records by name, at most every SYNC_SECONDS per gang)."""
    key = (namespace, gang)
    if len(pods) >= size or pods[0].member.kind != "PodGroup":
        _namespaces_seen.pop(key, None)
        return []
    seen = _namespaces_seen.get(key)
    if seen is not None and time.monotonic() - seen[0] < SYNC_SECONDS:
        return seen[1]
    listed = custom.list_cluster_custom_object(
        GROUP, VERSION, GANG_PLURAL, field_selector=f"metadata.name={gang}"
    )
    others = sorted(
        {
            str(item["metadata"]["namespace"])
            for item in listed.get("items") or []
            if item["metadata"].get("namespace") != namespace
        }
    )
    _namespaces_seen[key] = (time.monotonic(), others)
    return others


def _forget_when_idle(
    custom: client.CustomObjectsApi, namespace: str, gang: str, record: Any
) -> None:
    """Delete a record once its pods have been gone ``IDLE_SECONDS``."""
    if record is None:
        _idle_since.pop((namespace, gang), None)
        return
    since = _idle_since.setdefault((namespace, gang), time.monotonic())
    if time.monotonic() - since < IDLE_SECONDS:
        return
    uid = (record.get("metadata") or {}).get("uid")
    try:
        custom.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            GANG_PLURAL,
            gang,
            body={"preconditions": {"uid": uid}},
        )
        log.info("gang %s/%s: record deleted, its pods are gone", namespace, gang)
        _namespaces_seen.pop((namespace, gang), None)
    except ApiException as err:
        if err.status not in (_NOT_FOUND, _CONFLICT):
            raise
    _idle_since.pop((namespace, gang), None)


_gang_pods: GangPods | None = None
_syncer: GangSyncer | None = None
#: the records the operator has seen (their events), so that the tick also looks at a record
#: whose pods are all gone (deleted after IDLE_SECONDS); a kopf timer would do it, but a timer
#: puts kopf's finalizer on every record: a write the chart's RBAC need not grant, and a record
#: that could hold up the deletion of its namespace or of the CRD while no operator runs
_records: set[tuple[str, str]] = set()


def _sync_key(key: tuple[str, str]) -> bool:
    try:
        return sync_gang(*key)
    except ApiException as err:  # looked at again at the next tick
        log.warning("gang %s/%s: sync failed: %s", key[0], key[1], err.reason)
        return False


def _known_gangs() -> list[tuple[str, str]]:
    """Return every gang with pods now, and every record seen."""
    with_pods = _gang_pods.gangs() if _gang_pods is not None else []
    return list(dict.fromkeys([*with_pods, *_records]))


@kopf.on.startup()
def start_gang_pods(**_: Any) -> None:
    """Start the gang pods' watch and the threads that sync their records."""
    global _gang_pods, _syncer  # noqa: PLW0603 - one of each per operator process
    if _syncer is None:
        _syncer = GangSyncer(_sync_key, _known_gangs, every=SYNC_SECONDS)
        _gang_pods = GangPods(client.CoreV1Api(_client()), _gang_pod, _syncer.dirty)
        _syncer.start()
        _gang_pods.start()


@kopf.on.cleanup()
def stop_gang_pods(**_: Any) -> None:
    """Stop them with the operator."""
    if _gang_pods is not None:
        _gang_pods.stop()
    if _syncer is not None:
        _syncer.stop()


@kopf.on.event(GROUP, VERSION, GANG_PLURAL)
def on_gang_record(
    *,
    type: str | None,  # noqa: A002 - kopf's name for the watch event's type
    namespace: str | None,
    name: str,
    **_: Any,
) -> None:
    """A record changed (the placer's plan, a deletion by hand): its gang is looked at again."""
    key = (namespace or "", name)
    if type == "DELETED":
        _records.discard(key)
    else:
        _records.add(key)
    if _syncer is not None:
        _syncer.dirty(key)
