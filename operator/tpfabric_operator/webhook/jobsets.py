"""The gang webhook's view of the JobSets: what each says of its gang's ranks, kept by a watch.

A JobSet's pod names its child Job and its completion index, not the ranks the Jobs before it
hold; those follow from the JobSet's replicated Jobs (:mod:`tpfabric_core.jobset_ranks`). With
them the webhook ranks the pod at its admission, numbers its attempt and, once the gang is
planned, creates it released onto the plan, as it does a LeaderWorkerSet group's pods. It
answers in milliseconds and never reads a JobSet per admission: :class:`JobSetLayouts` keeps
every JobSet, cut down to the names, ``replicas`` and ``parallelism`` of its replicated Jobs,
from one list and a watch of ``jobsets.jobset.x-k8s.io`` (:class:`.pod_watch.PodWatch`).

A JobSet the watch has not shown yet (a watch event late behind the pods its Jobs made) is read
once by name, a list of one (``metadata.name``, under the same right to list; at most
:data:`MISS_READ_TIMEOUT_S`), and kept: for a JobSet started ``InOrder`` an unranked first pod
would leave its gang waiting whole for Jobs that JobSet makes only once the first ones run. A
JobSet that does not exist is not read again for :data:`MISS_MEMORY_S`. A cluster without the
JobSet CRD (or without the right to list it), a read that fails, or a JobSet still unknown
leaves the pods on the path they take without the view: gated without a rank, ranked by the
operator once the gang is whole. Nothing is refused.
"""

from __future__ import annotations

import logging
import threading
import time
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
#: the longest a pod's admission waits on the read of a JobSet the watch has not shown
MISS_READ_TIMEOUT_S = 0.5
#: a JobSet read and not found is not read again for this long
MISS_MEMORY_S = 10.0
#: JobSets remembered as not found, at most
_MISSES_LIMIT = 10_000


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
        #: the JobSets can be listed (the CRD is there and the right to list it given)
        self._listable = False
        #: JobSets read on a miss and not found: key -> when
        self._missed: dict[str, float] = {}

    def jobset(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return what is kept of the JobSet; one the watch has not shown is read once by name
        (None: not there, or not readable now)."""
        key = f"{namespace}/{name}"
        with self._lock:
            kept = self._jobsets.get(key)
            missed = self._missed.get(key)
        if kept is not None or not self._listable or not namespace or not name:
            return kept
        if missed is not None and time.monotonic() - missed < MISS_MEMORY_S:
            return None
        return self._read(namespace, name, key)

    def _read(self, namespace: str, name: str, key: str) -> dict[str, Any] | None:
        """Read one JobSet by name (a list of one) and keep it; None when it is not there or
        the read fails (the pod takes the path without the view)."""
        try:
            found = self.custom.list_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                field_selector=f"metadata.name={name}",
                _request_timeout=MISS_READ_TIMEOUT_S,
            )
        except Exception as err:  # noqa: BLE001 - any failure: the pod waits for the operator
            log.info("JobSet %s not read on a miss: %s", key, err)
            return None
        items = [i for i in (found or {}).get("items") or [] if isinstance(i, Mapping)]
        with self._lock:
            if not items:
                if len(self._missed) >= _MISSES_LIMIT:
                    self._missed.clear()
                self._missed[key] = time.monotonic()
                return None
            slim = self._jobsets.setdefault(key, slim_jobset(items[0]))
            self._missed.pop(key, None)
            return slim

    def _call(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, **kwargs
        )

    def _list(self) -> str:
        """List the JobSets; without the CRD (or the right to list it) there are none (the
        webhook serves, and JobSet pods are ranked by the operator), tried again until there."""
        try:
            version = super()._list()
        except ApiException as err:
            if err.status not in _NO_VIEW:
                raise
            self._listable = False
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
        self._listable = True
        return version

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}", slim_jobset(obj)

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        with self._lock:
            self._jobsets = dict(entries)
            self._missed.clear()

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        with self._lock:
            if obj is None:
                self._jobsets.pop(key, None)
            else:
                self._jobsets[key] = self._slim(obj)[1]
                self._missed.pop(key, None)
