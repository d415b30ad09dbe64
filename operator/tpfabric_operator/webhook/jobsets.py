"""The gang webhook's view of the JobSets: what each says of its gang's ranks, kept by a watch.

A JobSet's pod names its child Job and its completion index, not the ranks the Jobs before it
hold; those follow from the JobSet's replicated Jobs (:mod:`tpfabric_core.jobset_ranks`). With
them the webhook ranks the pod at its admission, numbers its attempt and, once the gang is
planned, creates it released onto the plan, as it does a LeaderWorkerSet group's pods. It
answers in milliseconds and never reads a JobSet per admission: :class:`JobSetLayouts` keeps
every JobSet, cut down to the names, ``replicas`` and ``parallelism`` of its replicated Jobs,
from one list and a watch of ``jobsets.jobset.x-k8s.io`` (:class:`.pod_watch.PodWatch`).

A JobSet the watch has not shown yet (its pods came first) or a cluster without the JobSet CRD
(or without the right to list it) leaves the pods on the path they take without the view:
gated without a rank, ranked by the operator once the gang is whole. Nothing is refused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_operator.pod_watch import PodWatch

__all__ = ["JOBSET_GROUP", "JOBSET_PLURAL", "JOBSET_VERSION", "JobSetLayouts", "slim_jobset"]

log = logging.getLogger("tpfabric.webhook")

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_PLURAL = "jobsets"
#: what the API server answers without the JobSet CRD (404) or without the right to list it (403)
_NO_VIEW = (403, 404)


def slim_jobset(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """Return what the rank layout reads of a JobSet (the shape
    :func:`tpfabric_core.jobset_ranks.jobset_layout` takes): each replicated Job's name,
    ``replicas`` and its Job template's ``parallelism``, in order."""
    spec = jobset.get("spec")
    replicated = []
    for job in (spec.get("replicatedJobs") if isinstance(spec, Mapping) else None) or []:
        if not isinstance(job, Mapping):
            continue
        template = job.get("template")
        template = template if isinstance(template, Mapping) else {}
        job_spec = template.get("spec")
        job_spec = job_spec if isinstance(job_spec, Mapping) else {}
        replicated.append(
            {
                "name": job.get("name"),
                "replicas": job.get("replicas"),
                "template": {"spec": {"parallelism": job_spec.get("parallelism")}},
            }
        )
    return {"spec": {"replicatedJobs": replicated}}


class JobSetLayouts(PodWatch):
    """Every JobSet's replicated Jobs (:func:`slim_jobset`), current within a watch event;
    thread-safe."""

    def __init__(self, core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
        super().__init__(core, "", "jobset-layouts")
        self.custom = custom
        self._lock = threading.Lock()
        self._jobsets: dict[str, dict[str, Any]] = {}

    def jobset(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return what is kept of the JobSet (None: the watch has not shown it)."""
        with self._lock:
            return self._jobsets.get(f"{namespace}/{name}")

    def _call(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, **kwargs
        )

    def _list(self) -> str:
        """List the JobSets; without the CRD (or the right to list it) there are none (the
        webhook serves, and JobSet pods are ranked by the operator), tried again until there."""
        try:
            return super()._list()
        except ApiException as err:
            if err.status not in _NO_VIEW:
                raise
            if not self.synced.is_set():
                log.warning(
                    "JobSets cannot be listed (%s %s): no JobSet pod is ranked or born released "
                    "at admission until they can (the operator ranks them once each gang is "
                    "whole); install the JobSet CRD, or give the webhook list and watch on "
                    "jobsets.%s",
                    err.status,
                    err.reason,
                    JOBSET_GROUP,
                )
                self._replace([])
                self.synced.set()
            raise

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}", slim_jobset(obj)

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        with self._lock:
            self._jobsets = dict(entries)

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        with self._lock:
            if obj is None:
                self._jobsets.pop(key, None)
            else:
                self._jobsets[key] = self._slim(obj)[1]
