"""``tpfabric queue``: the gangs that wait, in the order the placer considers them.

Every TensorParallelJob and Gang record of a namespace (or of all, ``-A``) that has no plan yet,
ordered as the placer orders its waiting gangs (:func:`tpfabric_core.placement.queue_order.
queue_order`: priority, then arrival), each with how long it has waited and what it waits for,
in the words the cluster already holds: the placer's ``status.placement`` message (no domain
with room, a head-of-line hold, a partner), a Gang's missing pods
(:mod:`tpfabric_core.gang_shortfall`), its problems, or its suspension. Suspended and invalid
gangs are listed after the queue without a position: the placer does not consider them.

Two halves, as ``explain``: :func:`queue_entries` is pure (objects in, entries out), and
:func:`read_queue` is the only code here that reads the cluster: the jobs, the Gang records and
their pods (for the pods' priority), in one namespace or all. Nothing here reads nodes, so a user
with rights in one namespace sees that namespace's queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tpfabric_cli.errors import user_errors
from tpfabric_cli.explain import api_failure, context_namespace, owner_words, print_uncropped
from tpfabric_cli.options import KubeconfigOpt
from tpfabric_core.api.placement import INVALID, gang_problems, placement_of_status
from tpfabric_core.gang_shortfall import numbered, shortfall
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.input_limits import whole_number
from tpfabric_core.placement.queue_order import job_key, queue_order
from tpfabric_core.timestamps import parse_rfc3339

__all__ = ["QueueEntry", "queue_command", "queue_entries", "read_queue", "waited"]

out = Console(highlight=False, soft_wrap=True)
_TIMEOUT_S = 30.0
#: phases of a job that no longer waits for a plan
_DONE = frozenset({"Succeeded", "Failed", "Running"})


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One gang that waits: where it is in the placer's order and what it waits for."""

    position: int | None
    """1 for the gang the placer considers first; None: not considered (suspended, invalid)."""
    kind: str
    namespace: str
    name: str
    priority: int
    """The highest ``spec.priority`` of its pods (0 while it has none)."""
    gpus: int
    waiting_since: str
    """When it began to wait (``status.placement.waitingSince``, else its creation)."""
    waited_seconds: float
    state: str
    """``Waiting``, ``Pending`` (not all its pods exist), ``Replanning``, ``Suspended``,
    ``Invalid``."""
    waits_for: str

    def document(self) -> dict[str, Any]:
        """Return the entry as JSON (camelCase keys)."""
        return {
            "position": self.position,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "priority": self.priority,
            "gpus": self.gpus,
            "waitedSince": self.waiting_since,
            "waitedSeconds": round(self.waited_seconds),
            "state": self.state,
            "waitsFor": self.waits_for,
        }


def waited(seconds: float) -> str:
    """Return a duration as ``kubectl`` prints ages: ``45s``, ``12m``, ``3h4m``, ``2d5h``."""
    whole = max(int(seconds), 0)
    if whole < 120:
        return f"{whole}s"
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if minutes < 60:
        return f"{minutes}m"
    if hours < 3:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{hours}h" if days < 2 else f"{days}d{hours % 24}h"


def _job_label() -> str:
    # imported here: the API's pydantic models are slow to import, and every command imports this
    from tpfabric_core.api import JOB_LABEL  # noqa: PLC0415

    return JOB_LABEL


def _pods_by_job(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Return the pods by the key of the job (or Gang record) they belong to."""
    job_label = _job_label()
    found: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        namespace = str(meta.get("namespace") or "")
        if labels.get(job_label):
            key = job_key(namespace, str(labels[job_label]), gang=False)
        elif labels.get(GANG_LABEL):
            key = job_key(namespace, str(labels[GANG_LABEL]), gang=True)
        else:
            continue
        found.setdefault(key, []).append(pod)
    return found


def _live(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get(
        "deletionTimestamp"
    )


def _entry(
    obj: Mapping[str, Any], members: Sequence[Mapping[str, Any]], now: float
) -> tuple[QueueEntry, str] | None:
    """Return the entry of one job or Gang record and its creationTimestamp, None when it does
    not wait for a plan (it has one, or it is done)."""
    gang = obj.get("kind") == "Gang"
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    placement = placement_of_status(status)
    state = placement.state or ""
    phase = str(status.get("phase") or "")
    if placement.planned or phase in _DONE:
        return None
    created = str(meta.get("creationTimestamp") or "")
    since = placement.waiting_since or created
    workers = whole_number(spec.get("workers")) or 0
    gpus = workers * (whole_number(spec.get("gpusPerWorker")) or 0)
    live = [pod for pod in members if _live(pod)]
    priority = max((int((p.get("spec") or {}).get("priority") or 0) for p in members), default=0)
    message = placement.message or ""
    if spec.get("suspend"):
        shown, words = "Suspended", "suspended (spec.suspend): not considered until it resumes"
    elif state == INVALID or gang_problems(status) or phase == INVALID:
        problems = "; ".join(gang_problems(status))
        shown, words = "Invalid", message or problems or "invalid"
    elif gang and (short := shortfall((_rank(p) for p in live), workers)) is not None:
        early = numbered((p.get("metadata") or {}).get("labels") for p in live)
        shown, words = "Pending", short.words(owner_words(spec.get("owner") or {}), numbered=early)
    elif state:
        shown, words = state, message or state
    elif not live:
        shown, words = "Pending", "its worker pods are not created yet"
    else:
        shown, words = "Pending", "not planned yet: the placer looks at it in its next cycle"
    started = parse_rfc3339(since) or now
    entry = QueueEntry(
        position=None,
        kind="Gang" if gang else "TensorParallelJob",
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        priority=priority,
        gpus=gpus,
        waiting_since=since,
        waited_seconds=max(now - started, 0.0),
        state=shown,
        waits_for=words,
    )
    return entry, created


def _rank(pod: Mapping[str, Any]) -> int | None:
    return whole_number(((pod.get("metadata") or {}).get("labels") or {}).get(RANK_LABEL))


def queue_entries(
    objects: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], now: float
) -> list[QueueEntry]:
    """Return the waiting gangs among ``objects`` (TensorParallelJobs and Gang records as the API
    serves them) in the placer's order, numbered, then those it does not consider; ``pods``:
    theirs, for their priority and a Gang's missing pods."""
    by_job = _pods_by_job(pods)
    queued: list[tuple[tuple[int, str, str], QueueEntry]] = []
    aside: list[QueueEntry] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        gang = obj.get("kind") == "Gang"
        key = job_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""), gang=gang)
        found = _entry(obj, by_job.get(key, []), now)
        if found is None:
            continue
        entry, created = found
        if entry.state in ("Suspended", "Invalid"):
            aside.append(entry)
        else:
            queued.append((queue_order(entry.priority, created, key), entry))
    queued.sort(key=lambda item: item[0])
    numbered = [
        QueueEntry(**{**_fields(entry), "position": index})
        for index, (_, entry) in enumerate(queued, 1)
    ]
    return numbered + sorted(aside, key=lambda e: (e.namespace, e.name))


def _fields(entry: QueueEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in QueueEntry.__slots__}


def print_queue(entries: Sequence[QueueEntry], console: Console, *, namespaces: bool) -> None:
    """Print the queue as a table (the namespace column with ``namespaces``)."""
    if not entries:
        console.print("no gang waits")
        return
    columns = ["#", *(["namespace"] if namespaces else []), "kind", "name", "priority", "gpus"]
    table = Table(*columns, "waiting", "state", "waits for", box=None, pad_edge=False)
    for entry in entries:
        kind = "gang" if entry.kind == "Gang" else "tpj"
        table.add_row(
            str(entry.position) if entry.position is not None else "-",
            *([escape(entry.namespace)] if namespaces else []),
            kind,
            escape(entry.name),
            str(entry.priority),
            str(entry.gpus),
            waited(entry.waited_seconds),
            entry.state,
            escape(entry.waits_for),
        )
    print_uncropped(console, table)  # one line per gang, however long its words


# -- the one part that reads the cluster ---------------------------------------------------------


def read_queue(
    kubeconfig: Path | None, namespace: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return the TensorParallelJobs and Gang records of ``namespace`` (None: every namespace)
    and their pods, as the API serves them."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.rest import ApiException  # noqa: PLC0415
    from urllib3.exceptions import HTTPError  # noqa: PLC0415

    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415
    from tpfabric_core.api import GROUP, PLURAL, VERSION  # noqa: PLC0415
    from tpfabric_core.api.gang import GANG_PLURAL  # noqa: PLC0415

    where = f"namespace {namespace}" if namespace else "every namespace"
    objects: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    with node_api(kubeconfig) as core:
        custom = client.CustomObjectsApi(core.api_client)
        for plural in (PLURAL, GANG_PLURAL):
            try:
                if namespace:
                    listed = custom.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, _request_timeout=_TIMEOUT_S
                    )
                else:
                    listed = custom.list_cluster_custom_object(
                        GROUP, VERSION, plural, _request_timeout=_TIMEOUT_S
                    )
            except ApiException as error:
                if error.status == 404:  # the CRD is not installed
                    continue
                raise api_failure(error, f"listing {plural} in {where}") from error
            except HTTPError as error:
                raise api_failure(error, f"listing {plural} in {where}") from error
            objects.extend(listed.get("items") or [])
        for label in (_job_label(), GANG_LABEL):
            try:
                if namespace:
                    found = core.list_namespaced_pod(
                        namespace, label_selector=label, _request_timeout=_TIMEOUT_S
                    )
                else:
                    found = core.list_pod_for_all_namespaces(
                        label_selector=label, _request_timeout=_TIMEOUT_S
                    )
            except (ApiException, HTTPError) as error:
                raise api_failure(error, f"listing the pods in {where}") from error
            pods.extend(core.api_client.sanitize_for_serialization(p) for p in found.items)
    return objects, pods


@user_errors
def queue_command(
    *,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="The namespace (default: the kubeconfig context's, else default).",
        ),
    ] = None,
    all_namespaces: Annotated[
        bool,
        typer.Option(
            "--all-namespaces", "-A", help="Every namespace (needs list rights in all of them)."
        ),
    ] = False,
    kubeconfig: KubeconfigOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the same facts as JSON (for scripts).")
    ] = False,
) -> None:
    """List the gangs that wait for a plan (TensorParallelJobs and Gang records), in the order
    the placer considers them (priority, then arrival), with how long each has waited and what
    it waits for; suspended and invalid ones follow, without a position."""
    if all_namespaces and namespace:
        from tpfabric_core.errors import InputError  # noqa: PLC0415

        raise InputError("--all-namespaces", "give --namespace or --all-namespaces, not both")
    chosen = None if all_namespaces else (namespace or context_namespace(kubeconfig))
    objects, pods = read_queue(kubeconfig, chosen)
    entries = queue_entries(objects, pods, time.time())
    if as_json:
        typer.echo(json.dumps([entry.document() for entry in entries], indent=2))
    else:
        print_queue(entries, out, namespaces=chosen is None)
