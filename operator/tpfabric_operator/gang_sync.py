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
from dataclasses import dataclass, replace
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GANG_GATE, GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL, MAX_GANG_WORKERS
from tpfabric_core.gangs import (
    GANG_LABEL,
    GANG_SIZE_LABEL,
    JOBSET_EXCLUSIVE,
    JOBSET_JOB_INDEX,
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    KUEUE_POD_GROUP_TOTAL,
    LWS_SIZE,
    NAMESPACE_OPT_IN_LABEL,
    NAMESPACE_OPT_IN_VALUE,
    RANK_LABEL,
    GangSettings,
    gang_of,
    not_opted_in,
)
from tpfabric_core.labels import HEALTH
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision, rdma_condition
from tpfabric_core.timestamps import rfc3339
from tpfabric_kube.malformed import MalformedObjects, event_writer
from tpfabric_operator import fabric_health, leadership, serving
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
    too_large_problem,
)
from tpfabric_operator.settings import GANG_IDLE_SECONDS, GANG_SYNC_SECONDS
from tpfabric_operator.webhook.admission import default_levels

__all__ = ["sync_gang"]

log = logging.getLogger("tpfabric.operator.gangs")
SYNC_SECONDS = GANG_SYNC_SECONDS
IDLE_SECONDS = GANG_IDLE_SECONDS
SETTINGS = GangSettings(levels=default_levels(), max_size=1024)
_NOT_FOUND = 404
_CONFLICT = 409

_api: client.ApiClient | None = None
#: (namespace, LWS) -> when it was read, and what it says (see _lws_of)
_lws_seen: dict[tuple[str, str], tuple[float, serving.LwsView | None]] = {}
#: (namespace, LWS) -> the group being moved off a degraded node, since when, and the uids of
#: the pods it had then (the move is over once the group is ready with none of them)
_moving: dict[tuple[str, str], tuple[str, float, frozenset[str]]] = {}
#: (namespace, gang) -> the degraded nodes a moved group was placed back on (no healthy domain
#: had room): it is not moved again while those stay its degraded nodes
_moved_back: dict[tuple[str, str], frozenset[str]] = {}
#: the operator's kopf index of degraded nodes (fabric_health.degraded_nodes), once seen
_degraded_index: Mapping[str, Any] | None = None
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


_reports: MalformedObjects | None = None


def _malformed() -> MalformedObjects:
    """Return the reports of the gang pods the operator cannot read (Events on them)."""
    global _reports  # noqa: PLW0603 - one per operator process
    if _reports is None:
        _reports = MalformedObjects(
            "tpfabric-operator", notify=event_writer(client.CoreV1Api(_client()))
        )
    return _reports


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
        node=(pod.get("spec") or {}).get("nodeName") or None,
        uid=str(meta.get("uid") or ""),
        rdma=parse_decision((meta.get("annotations") or {}).get(RDMA_ANNOTATION)),
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
    if size is not None and size > MAX_GANG_WORKERS:
        # no record can hold it: said on the pods (NoGangRecord), never tried (a 422 each sync)
        said = [p.words() for p in first.member.problems if p.key in _SIZE_KEYS]
        problems.append(
            said[0] if said else too_large_problem(first.member.kind, first.member.owner, size)
        )
        size, layout = None, None
    elif size is None:
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
    if member.kind == "JobSet":
        return f"{JOBSET_NAME}: the JobSet {member.owner!r} does not give the size"
    said = [p.words() for p in member.problems if p.key in _SIZE_KEYS]
    return said[0] if said else f"{member.kind} {member.owner!r}: its pods do not give the size"


_SIZE_KEYS = (LWS_SIZE, GANG_SIZE_LABEL, KUEUE_POD_GROUP_TOTAL)


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
    pods = (
        _malformed().parse("Pod", _gang_pod, api.sanitize_for_serialization(i))
        for i in listed.items
    )
    return [p for p in pods if isinstance(p, GangPod)]


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
    if not _opted_in(core, namespace):
        # pods labelled by hand where no one opted in: not this operator's to manage
        _tell_pods(
            core, namespace, gang, pods, reason="NamespaceNotOptedIn", words=not_opted_in(namespace)
        )
        return False
    first = min(pods, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.created))
    first, size, layout, owner_ref, problems = _identify(custom, first, pods, record)
    if size is None:
        words = f"no Gang record: {problems[-1]}"
        _tell_pods(core, namespace, gang, pods, reason="NoGangRecord", words=words)
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
    # a gang with a problem (two owners claim its name...) gets no ranks: the placer plans a
    # gang record once every pod has its rank, and would plan this one in the moment between
    # the rank writes and the status that names the problem
    ranks = ranks_to_write(pods, size, layout) if not problems else {}
    for name, rank in ranks.items():
        core.patch_namespaced_pod(
            name, namespace, {"metadata": {"labels": {RANK_LABEL: str(rank)}}}
        )
        log.info("gang %s/%s: pod %s is rank %d", namespace, gang, name, rank)
    stored = record.get("status") or {}
    status = record_status(pods, size, stored.get("placement") or {}, problems)
    life = _serving(custom, core=core, first=first, pods=pods, size=size, stored=stored)
    status["conditions"] = life.conditions
    status["nearBy"] = _near_by(first.member.namespace, first.member.owner, gang)
    if any(stored.get(k) != v for k, v in status.items()):
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, GANG_PLURAL, gang, {"status": status}
        )
        return False
    # a gang short of pods is never settled: a namesake in another namespace (elsewhere_problem)
    # shows in no event of its own; nor is one on a degraded node (the node's recovery is no
    # event of the gang's)
    return not made and not ranks and len(pods) >= size and life.settled


@dataclass(frozen=True, slots=True)
class _Serving:
    conditions: list[dict[str, Any]]
    settled: bool


def _lws_of(custom: client.CustomObjectsApi, namespace: str, name: str) -> serving.LwsView | None:
    """Return what the LeaderWorkerSet ``name`` says of its groups (read at most every
    ``SYNC_SECONDS`` per LWS; None when it is gone)."""
    key = (namespace, name)
    seen = _lws_seen.get(key)
    if seen is not None and time.monotonic() - seen[0] < SYNC_SECONDS:
        return seen[1]
    group, version, plural, _kind = LWS_API
    try:
        view = serving.lws_view(
            custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        )
    except ApiException as err:
        if err.status != _NOT_FOUND:
            raise
        view = None
    if len(_lws_seen) > 4096:
        _lws_seen.clear()
    _lws_seen[key] = (time.monotonic(), view)
    return view


def _on_degraded_nodes(pods: list[GangPod]) -> list[fabric_health.RankOnDegradedNode]:
    """Return each pod of the gang on a node labelled degraded: rank, node, the agent's reasons."""
    index = _degraded_index
    if index is None:
        return []
    return fabric_health.on_degraded_nodes(((p.rank, p.node) for p in pods), index)


def _unready_groups(
    namespace: str, view: serving.LwsView, gang: str, own: int | None
) -> serving.Unready:
    """Return the LWS's other groups that are not ready now, from the watched pods (a group
    below its replicas with no pod at all counts: it is being made again)."""
    groups: dict[int, tuple[str, bool]] = {}
    if _gang_pods is None:
        return serving.Unready(0)
    for key in _gang_pods.gangs():
        if key[0] != namespace or key[1] == gang:
            continue
        members = _gang_pods.pods(key)
        if not members or members[0].member.kind != "LeaderWorkerSet":
            continue
        if members[0].member.owner != view.name:
            continue
        index = serving.group_index(members[0].labels)
        size = members[0].member.size or len(members)
        if index is None:
            continue
        groups[index] = (key[1], serving.group_ready([p.ready for p in members], size))
    return serving.others_unready(view, groups, own)


def _serving(
    custom: client.CustomObjectsApi,
    *,
    core: client.CoreV1Api,
    first: GangPod,
    pods: list[GangPod],
    size: int,
    stored: Mapping[str, Any],
) -> _Serving:
    """Return the record's conditions (Ready, Degraded, Surge, Moving: :mod:`.serving`) and move
    a degraded LWS group when its owner asks and it is safe."""
    member = first.member
    ready = serving.group_ready([p.ready for p in pods], size)
    not_ready = [p.name for p in pods if not p.ready]
    conditions = [
        serving.condition(
            "Ready",
            ready,
            "GroupReady" if ready else "PodsNotReady",
            f"{sum(p.ready for p in pods)}/{size} pods ready"
            + (f" (not ready: {', '.join(sorted(not_ready)[:3])})" if not_ready else ""),
        )
    ]
    transport = rdma_condition(p.rdma for p in pods)
    if transport is not None:  # the RDMA the pods got (the gang webhook's decision), and why
        conditions.append(transport)
    on_degraded = _on_degraded_nodes(pods)
    had_degraded = any(c.get("type") == "Degraded" for c in stored.get("conditions") or [])
    if on_degraded or had_degraded:
        conditions.append(
            serving.condition(
                "Degraded",
                bool(on_degraded),
                "LinkDegraded" if on_degraded else "LinksHealthy",
                fabric_health.straggler_message(on_degraded)
                if on_degraded
                else "no node under the group is degraded now",
            )
        )
    view = None
    if member.kind == "LeaderWorkerSet":
        view = _lws_of(custom, member.namespace, member.owner)
    index = serving.group_index(first.labels) if view is not None else None
    waiting = ((stored.get("placement") or {}).get("state")) == "Waiting"
    surge = serving.surge_message(index, view, waiting=waiting) if view is not None else ""
    if surge:
        conditions.append(serving.condition("Surge", True, "RollingUpdate", surge))
    degraded_nodes = frozenset(r.node for r in on_degraded)
    group_key = (member.namespace, member.gang)
    moving = _moving.get((member.namespace, member.owner))
    if moving is not None and moving[0] == member.gang:
        made_again = ready and not any(p.uid in moving[2] for p in pods)
        if made_again or time.monotonic() - moving[1] > serving.MOVE_SECONDS:
            _moving.pop((member.namespace, member.owner), None)
            moving = None
            if made_again and degraded_nodes:
                _moved_back[group_key] = degraded_nodes
    if _moved_back.get(group_key) not in (None, degraded_nodes):
        del _moved_back[group_key]  # other nodes went degraded (or recovered): judged afresh
    if view is not None:
        move = serving.move_decision(
            group=member.gang,
            view=view,
            degraded=bool(on_degraded),
            ready=ready,
            others_unready=_unready_groups(member.namespace, view, member.gang, index),
            moving=moving[0] if moving is not None else None,
            placed_back=sorted(_moved_back.get(group_key, ())),
            no_room=fabric_health.room_elsewhere(
                (stored.get("placement") or {}).get("healthyRoom"), on_degraded
            )
            if on_degraded
            else "",
        )
        if move is not None:
            if move.now:
                _move(core, member.namespace, member.owner, member.gang, pods)
            conditions.append(serving.condition("Moving", move.now, "DegradedLink", move.message))
    now = rfc3339(time.time())
    merged = serving.merge_conditions(conditions, stored.get("conditions") or [], now)
    return _Serving(merged, settled=not on_degraded and not surge)


def _move(
    core: client.CoreV1Api, namespace: str, owner: str, gang: str, pods: list[GangPod]
) -> None:
    """Delete the group's leader pod: LWS makes the whole group again (its worker StatefulSet
    is owned by the leader pod), and the placer plans it away from the degraded node."""
    leader = next((p for p in pods if p.rank == 0), None)
    if leader is None:
        return
    _moving[(namespace, owner)] = (gang, time.monotonic(), frozenset(p.uid for p in pods))
    try:
        core.delete_namespaced_pod(
            leader.name, namespace, body={"preconditions": {"uid": leader.uid}}
        )
        log.warning(
            "gang %s/%s: moving off a degraded node: deleted leader pod %s",
            namespace,
            gang,
            leader.name,
        )
    except ApiException as err:
        if err.status != _NOT_FOUND:
            _moving.pop((namespace, owner), None)
            raise


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
    _moved_back.pop((namespace, gang), None)
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


#: namespace -> when its opt-in label was read, and whether it had it
_opt_in_seen: dict[str, tuple[float, bool]] = {}
#: (pod uid, what it was told): each pod is told each thing once
_told: set[tuple[str, str]] = set()


def _opted_in(core: client.CoreV1Api, namespace: str) -> bool:
    """Return whether ``namespace`` carries the gangs opt-in label (read at most every
    ``SYNC_SECONDS`` per namespace; a namespace that cannot be read has not opted in)."""
    seen = _opt_in_seen.get(namespace)
    if seen is not None and time.monotonic() - seen[0] < SYNC_SECONDS:
        return seen[1]
    try:
        labels = core.read_namespace(namespace).metadata.labels or {}
        opted = labels.get(NAMESPACE_OPT_IN_LABEL) == NAMESPACE_OPT_IN_VALUE
    except ApiException as err:
        if err.status not in (403, _NOT_FOUND):
            raise
        log.warning(
            "namespace %s cannot be read (%s): taken as not opted in", namespace, err.reason
        )
        opted = False
    if len(_opt_in_seen) > 10_000:
        _opt_in_seen.clear()
    _opt_in_seen[namespace] = (time.monotonic(), opted)
    return opted


def _tell_pods(
    core: client.CoreV1Api,
    namespace: str,
    gang: str,
    pods: list[GangPod],
    *,
    reason: str,
    words: str,
) -> None:
    """Write a Warning Event ``reason`` saying ``words`` on each pod of the gang, once per pod:
    what is wrong where no Gang record can say it."""
    fresh = [p for p in pods if (p.uid, words) not in _told]
    if not fresh:
        return
    log.warning("gang %s/%s: %s", namespace, gang, words)
    if len(_told) > 100_000:
        _told.clear()
    for pod in fresh:
        _told.add((pod.uid, words))
        body = {
            "metadata": {"generateName": f"{pod.name[:200]}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": namespace,
                "uid": pod.uid,
            },
            "type": "Warning",
            "reason": reason,
            "message": words[:1024],
            "source": {"component": "tpfabric-operator"},
            "reportingComponent": "tpfabric-operator",
            "count": 1,
        }
        try:
            core.create_namespaced_event(namespace, body)
        except ApiException as err:  # a lost Event is only a lost note
            log.info("pod %s/%s: the Event was not written: %s", namespace, pod.name, err.reason)


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
        _gang_pods = GangPods(client.CoreV1Api(_client()), _gang_pod, _syncer.dirty, _malformed())
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
    body: Mapping[str, Any] | None = None,
    degraded_nodes: Mapping[str, Any] | None = None,
    **_: Any,
) -> None:
    """A record changed (the placer's plan, a deletion by hand): its gang is looked at again,
    and so is the gang it asks to be near (whose record names those placed near it)."""
    _keep_index(degraded_nodes)
    key = (namespace or "", name)
    _note_near(key, None if type == "DELETED" else body)
    if type == "DELETED":
        _records.discard(key)
    else:
        _records.add(key)
    if _syncer is not None:
        _syncer.dirty(key)


def _keep_index(index: Mapping[str, Any] | None) -> None:
    """Keep kopf's index of degraded nodes (kopf hands it to handlers only)."""
    global _degraded_index  # noqa: PLW0603 - one index per operator process
    if index is not None:
        _degraded_index = index


@kopf.on.event("nodes", labels={HEALTH: "degraded"})
def on_degraded_node(
    *, name: str, degraded_nodes: Mapping[str, Any] | None = None, **_: Any
) -> None:
    """A node labelled degraded changed: every gang with a pod on it is looked at again."""
    _keep_index(degraded_nodes)
    if _gang_pods is None or _syncer is None:
        return
    for key in _gang_pods.gangs():
        if any(p.node == name for p in _gang_pods.pods(key)):
            _syncer.dirty(key)


#: (namespace, near target) -> record name -> what its plan says of being near the target
_near_from: dict[tuple[str, str], dict[str, str]] = {}
_near_lock = threading.Lock()


def _note_near(key: tuple[str, str], body: Mapping[str, Any] | None) -> None:
    """Keep what record ``key`` says of the gang it asks to be near, and look at that gang."""
    namespace, name = key
    near = ((body or {}).get("spec") or {}).get("near") or {}
    target = str(near.get("target") or "")
    placement = ((body or {}).get("status") or {}).get("placement") or {}
    words = str(placement.get("near") or "") if placement.get("state") == "Planned" else ""
    touched: set[str] = set()
    with _near_lock:
        for (ns, other), entries in list(_near_from.items()):
            if ns == namespace and name in entries and other != target:
                del entries[name]
                touched.add(other)
        if target:
            entries = _near_from.setdefault((namespace, target), {})
            line = f"{name}: {words}" if words else ""
            if entries.get(name, "") != line:
                touched.add(target)
            if line:
                entries[name] = line
            else:
                entries.pop(name, None)
    if _gang_pods is None or _syncer is None or not touched:
        return
    for gang_key in _gang_pods.gangs():
        pods = _gang_pods.pods(gang_key) if gang_key[0] == namespace else []
        if pods and (gang_key[1] in touched or pods[0].member.owner in touched):
            _syncer.dirty(gang_key)


def _near_by(namespace: str, owner: str, gang: str) -> list[str]:
    """Return the gangs placed near this one (by its owner's or its record's name)."""
    with _near_lock:
        lines = {
            line
            for target in (owner, gang)
            for line in (_near_from.get((namespace, target)) or {}).values()
        }
    return sorted(lines)
