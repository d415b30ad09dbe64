"""Every call the gang half makes to the API server, and the few answers it keeps a while.

:class:`GangApi` reads a gang's record, its owner, its LeaderWorkerSet and its namespace's
opt-in, and writes what a sync decided (:mod:`.apply_intent`): the record, the ranks, the
status, a leader pod deleted to move its group, Events on pods no record can speak for. Answers
that change seldom are kept ``sync_seconds`` (a LeaderWorkerSet, a namespace's opt-in label, the
other namespaces with a record of a pod group's name), so a sync of a gang in step costs one
GET of its record. Nothing here decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import (
    GANG_LABEL,
    NAMESPACE_OPT_IN_LABEL,
    NAMESPACE_OPT_IN_VALUE,
    RANK_LABEL,
    GangMember,
)
from tpfabric_kube.events import event_body, pod_object
from tpfabric_kube.malformed import MalformedObjects, event_writer
from tpfabric_operator.gangs import serving
from tpfabric_operator.gangs.owners import LWS_API, OwnerRead, owner_apis
from tpfabric_operator.gangs.pods import GangKey, gang_pod
from tpfabric_operator.gangs.records import GangPod, OwnerRef

__all__ = ["GangApi"]

log = logging.getLogger("tpfabric.operator.gangs")

_NOT_FOUND = 404
_CONFLICT = 409


class GangApi:
    """The gang half's reads and writes, on one API client (``sync_seconds``: how long the
    answers that change seldom are kept)."""

    def __init__(self, api: client.ApiClient, *, sync_seconds: float) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.sync_seconds = sync_seconds
        #: the reports of the gang pods the operator cannot read (Events on them)
        self.malformed = MalformedObjects("tpfabric-operator", notify=event_writer(self.core))
        #: (namespace, LWS) -> when it was read, and what it says
        self._lws_seen: dict[tuple[str, str], tuple[float, serving.LwsView | None]] = {}
        #: (namespace, gang) -> when other namespaces were looked at, and those with a record of
        #: its name
        self._namespaces_seen: dict[GangKey, tuple[float, list[str]]] = {}
        #: namespace -> when its opt-in label was read, and whether it had it
        self._opt_in_seen: dict[str, tuple[float, bool]] = {}
        #: (pod uid, what it was told): each pod is told each thing once
        self._told: set[tuple[str, str]] = set()

    # -- reads ----------------------------------------------------------------------------------

    def record(self, key: GangKey) -> Any:
        """Return the Gang record ``key`` (None: there is none)."""
        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, key[0], GANG_PLURAL, key[1]
            )
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            return None

    def listed_pods(self, key: GangKey) -> list[GangPod]:
        """Return the live pods of gang ``key`` as the API server lists them now."""
        listed = self.core.list_namespaced_pod(key[0], label_selector=f"{GANG_LABEL}={key[1]}")
        pods = (
            self.malformed.parse("Pod", gang_pod, self.api.sanitize_for_serialization(i))
            for i in listed.items
        )
        return [p for p in pods if isinstance(p, GangPod)]

    def owner(self, member: GangMember) -> OwnerRead:
        """Return the owner of ``member``'s gang (nothing for a pod group, or when it is gone)."""
        for group, version, plural, kind in owner_apis(member):
            try:
                owner = self.custom.get_namespaced_custom_object(
                    group, version, member.namespace, plural, member.owner
                )
            except ApiException as err:
                if err.status != _NOT_FOUND:
                    raise
                continue
            uid = str((owner.get("metadata") or {}).get("uid") or "")
            return OwnerRead(OwnerRef(f"{group}/{version}", kind, member.owner, uid), owner)
        return OwnerRead()

    def lws(self, namespace: str, name: str) -> serving.LwsView | None:
        """Return what the LeaderWorkerSet ``name`` says of its groups (read at most every
        ``sync_seconds`` per LWS; None when it is gone)."""
        key = (namespace, name)
        seen = self._lws_seen.get(key)
        if seen is not None and time.monotonic() - seen[0] < self.sync_seconds:
            return seen[1]
        group, version, plural, _kind = LWS_API
        try:
            view = serving.lws_view(
                self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
            )
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            view = None
        if len(self._lws_seen) > 4096:
            self._lws_seen.clear()
        self._lws_seen[key] = (time.monotonic(), view)
        return view

    def elsewhere(self, key: GangKey, pods: list[GangPod], size: int) -> list[str]:
        """Return the other namespaces with a Gang record of this pod group's name, while it
        lacks pods here (one list of records by name, at most every ``sync_seconds`` per gang)."""
        if len(pods) >= size or pods[0].member.kind != "PodGroup":
            self._namespaces_seen.pop(key, None)
            return []
        seen = self._namespaces_seen.get(key)
        if seen is not None and time.monotonic() - seen[0] < self.sync_seconds:
            return seen[1]
        listed = self.custom.list_cluster_custom_object(
            GROUP, VERSION, GANG_PLURAL, field_selector=f"metadata.name={key[1]}"
        )
        others = sorted(
            {
                str(item["metadata"]["namespace"])
                for item in listed.get("items") or []
                if item["metadata"].get("namespace") != key[0]
            }
        )
        self._namespaces_seen[key] = (time.monotonic(), others)
        return others

    def opted_in(self, namespace: str) -> bool:
        """Return whether ``namespace`` carries the gangs opt-in label (read at most every
        ``sync_seconds`` per namespace; a namespace that cannot be read has not opted in)."""
        seen = self._opt_in_seen.get(namespace)
        if seen is not None and time.monotonic() - seen[0] < self.sync_seconds:
            return seen[1]
        try:
            labels = self.core.read_namespace(namespace).metadata.labels or {}
            opted = labels.get(NAMESPACE_OPT_IN_LABEL) == NAMESPACE_OPT_IN_VALUE
        except ApiException as err:
            if err.status not in (403, _NOT_FOUND):
                raise
            log.warning(
                "namespace %s cannot be read (%s): taken as not opted in", namespace, err.reason
            )
            opted = False
        if len(self._opt_in_seen) > 10_000:
            self._opt_in_seen.clear()
        self._opt_in_seen[namespace] = (time.monotonic(), opted)
        return opted

    # -- writes ---------------------------------------------------------------------------------

    def make_record(self, key: GangKey, manifest: Mapping[str, Any]) -> Any:
        """Create the Gang record ``manifest``; return it (the one there, made meanwhile)."""
        namespace, gang = key
        try:
            record = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, GANG_PLURAL, manifest
            )
            spec = manifest["spec"]
            log.info(
                "gang %s/%s: record made (%d pods of %s)",
                namespace,
                gang,
                spec["workers"],
                spec["owner"]["kind"],
            )
        except ApiException as err:
            if err.status != _CONFLICT:
                raise
            record = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, GANG_PLURAL, gang
            )
        return record

    def label_rank(self, key: GangKey, pod: str, rank: int) -> None:
        """Label pod ``pod`` of gang ``key`` with its rank."""
        self.core.patch_namespaced_pod(
            pod, key[0], {"metadata": {"labels": {RANK_LABEL: str(rank)}}}
        )
        log.info("gang %s/%s: pod %s is rank %d", key[0], key[1], pod, rank)

    def move_group(self, key: GangKey, leader: GangPod) -> None:
        """Delete the group's leader pod: LWS makes the whole group again (its worker
        StatefulSet is owned by the leader pod), and the placer plans it away from the degraded
        node. A leader already gone is no error."""
        try:
            self.core.delete_namespaced_pod(
                leader.name, key[0], body={"preconditions": {"uid": leader.uid}}
            )
            log.warning(
                "gang %s/%s: moving off a degraded node: deleted leader pod %s",
                key[0],
                key[1],
                leader.name,
            )
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise

    def write_status(self, key: GangKey, status: Mapping[str, Any]) -> Any:
        """Patch the record's status (the placer's ``placement`` is left as it is); return the
        record as written."""
        return self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, key[0], GANG_PLURAL, key[1], {"status": status}
        )

    def delete_record(self, key: GangKey, record: Mapping[str, Any]) -> None:
        """Delete ``record`` (that very one: its uid is the precondition); gone or replaced
        meanwhile is no error."""
        uid = (record.get("metadata") or {}).get("uid")
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                key[0],
                GANG_PLURAL,
                key[1],
                body={"preconditions": {"uid": uid}},
            )
            log.info("gang %s/%s: record deleted, its pods are gone", key[0], key[1])
            self._namespaces_seen.pop(key, None)
        except ApiException as err:
            if err.status not in (_NOT_FOUND, _CONFLICT):
                raise

    def warn_pods(self, key: GangKey, pods: list[GangPod], *, reason: str, words: str) -> None:
        """Write a Warning Event ``reason`` saying ``words`` on each pod of the gang, once per
        pod: what is wrong where no Gang record can say it."""
        namespace, gang = key
        fresh = [p for p in pods if (p.uid, words) not in self._told]
        if not fresh:
            return
        log.warning("gang %s/%s: %s", namespace, gang, words)
        if len(self._told) > 100_000:
            self._told.clear()
        for pod in fresh:
            self._told.add((pod.uid, words))
            involved = pod_object(pod.name, namespace, pod.uid)
            body = event_body(involved, reason=reason, message=words, component="tpfabric-operator")
            try:
                self.core.create_namespaced_event(namespace, body)
            except ApiException as err:  # a lost Event is only a lost note
                log.info(
                    "pod %s/%s: the Event was not written: %s", namespace, pod.name, err.reason
                )
