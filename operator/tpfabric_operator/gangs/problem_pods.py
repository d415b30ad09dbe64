"""Gang pods the webhook admitted unwired are told why, where a user looks: an Event on the pod.

The gang webhook never refuses a pod: one it cannot take in (``tpfabric.io/gang-size: "abc"``, a
gang label without a size, a level that is not configured, another scheduler named) is admitted
unwired with a warning, which only the client that created it sees (for a controller's pods:
nobody). The webhook answers admissions and writes nothing itself, so it marks such a pod instead
(the label ``tpfabric.io/gang-problem: "true"``, its problems in the annotation
``tpfabric.io/gang-problems``), and this module tells it: one list+watch of the marked pods (a
server-side label selector: no other pod reaches the operator), and a Warning Event
``GangPodNotWired`` on each, naming the label at fault and the fix, which ``kubectl describe
pod`` and ``kubectl get events`` show.

Each Event's name is fixed by the pod's uid, so that two replicas, a restart or a relist write
it once (the next create is a 409). Every replica tells: no leadership is needed for a write that
cannot be doubled.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.gangs import GANG_PROBLEM_LABEL, GANG_PROBLEMS_ANNOTATION
from tpfabric_kube.events import event_body, pod_object
from tpfabric_operator.pod_watch import PodWatch

__all__ = ["NOT_WIRED_REASON", "ProblemPods", "problem_event"]

log = logging.getLogger("tpfabric.operator.gangs")
NOT_WIRED_REASON = "GangPodNotWired"
_COMPONENT = "tpfabric-operator"


def problem_event(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the Warning Event that tells a marked pod its problems (None: a pod that is gone,
    or carries no problems)."""
    meta = pod.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    problems = str((meta.get("annotations") or {}).get(GANG_PROBLEMS_ANNOTATION) or "").strip()
    if not uid or not name or not problems or meta.get("deletionTimestamp"):
        return None
    digest = hashlib.sha256(f"{_COMPONENT}/{NOT_WIRED_REASON}/{uid}".encode()).hexdigest()[:16]
    namespace = str(meta.get("namespace") or "default")
    words = "; ".join(problems.splitlines())
    return event_body(
        pod_object(name, namespace, uid),
        reason=NOT_WIRED_REASON,
        message=(
            "tpfabric's gang webhook admitted this pod unwired (no gang gate, RDMA or placement "
            f"with its gang): {words}"
        ),
        component=_COMPONENT,
        name=f"{name[:200]}.{digest}",
    )


class ProblemPods(PodWatch):
    """Every marked pod, told once: an Event per pod uid (nothing is kept but the uids told)."""

    def __init__(self, core: client.CoreV1Api) -> None:
        super().__init__(core, f"{GANG_PROBLEM_LABEL}=true", "gang-problem-pods")
        self._told: set[str] = set()

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        meta = obj.get("metadata") or {}
        self._tell(obj)
        return f"{meta.get('namespace')}/{meta.get('name')}", None

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        return

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is not None:
            self._tell(obj)

    def _tell(self, pod: Mapping[str, Any]) -> None:
        event = problem_event(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if event is None or uid in self._told:
            return
        if len(self._told) > 100_000:
            self._told.clear()
        self._told.add(uid)
        try:
            self.core.create_namespaced_event(event["metadata"]["namespace"], event)
            log.warning(
                "pod %s/%s: admitted unwired: %s",
                event["metadata"]["namespace"],
                event["involvedObject"]["name"],
                event["message"],
            )
        except ApiException as err:  # 409: told already (another replica, a restart)
            if err.status != 409:
                log.info("pod %s: the Event was not written: %s", uid, err.reason)
