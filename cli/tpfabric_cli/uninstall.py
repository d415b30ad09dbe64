"""``tpfabric uninstall-cleanup``: what ``helm uninstall`` cannot remove, removed.

The chart's objects go with the release; what tpfabric's components wrote into the cluster does
not, and some of it would wedge or mislead once they are gone. The chart's post-delete hook runs
this command (``uninstall.cleanup``); run it by hand after ``helm uninstall --no-hooks``:

- it first waits (``--wait-seconds``) until the release's operator, scheduler, gang webhook and
  fabric agent pods are gone, so that nothing writes again behind it;
- the Leases the components took in the release namespace (``--lease``), and the fabric agents'
  heartbeat Leases (labelled ``tpfabric.io/heartbeat``, in ``--agent-namespace``; each is owned
  by its Node, so it would otherwise stay as long as the node): deleted;
- kopf's finalizer on every TensorParallelJob (the operator's reconcile timer needs it): removed,
  so that deleting a job, its namespace or the CRD no longer waits for an operator that is gone;
  and tpfabric's ``kueue.x-k8s.io/resource-in-use`` finalizer on the Kueue Workloads of
  TensorParallelJobs, for the same reason;
- the Gang records (the operator's bookkeeping of other controllers' gangs; a reinstalled
  operator makes them again from their pods, and the placer recovers their plans): deleted;
- pods that would wait for ever: unbound pods that name ``tpfabric-scheduler`` (gated by
  tpfabric's gang gate or not; no scheduler will bind them): deleted, each by uid. Their
  controllers make them again without tpfabric (the webhook is gone); a bare pod is gone for good
  (``--dry-run`` lists them first). Pods already bound run on;
- on every node, what the fabric agent wrote and nothing else reads after it: the label
  ``topology.tpfabric.io/health``, the annotation ``topology.tpfabric.io/fabric-health`` and the
  condition ``FabricHealthy`` (stale health would mislead whoever reads it next). The topology
  labels and the rail map (``topology.tpfabric.io/leaf``, ``rail-N``, ``rail-ports``...) are
  discovery's facts about the fabric and stay, for a reinstall or another reader (Kueue TAS);
  ``--remove-topology`` removes every ``topology.tpfabric.io/`` label and annotation too.

Two halves: the pure decisions (:func:`node_cleanup`, :func:`stranded`, :func:`without`) and
:func:`run_cleanup`, which lists and writes through the API client. It never touches an object
tpfabric did not write to, nor a field of one it did not write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tpfabric_cli.errors import user_errors
from tpfabric_cli.options import KubeconfigOpt
from tpfabric_core import labels as topology
from tpfabric_core.fabric.agent_heartbeat import HEARTBEAT_LABEL
from tpfabric_core.fabric.link_publish import CONDITION_TYPE, DETAIL_ANNOTATION
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION

__all__ = [
    "AGENT_CONDITIONS",
    "KOPF_FINALIZER",
    "KUEUE_FINALIZER",
    "NodeCleanup",
    "Report",
    "node_cleanup",
    "run_cleanup",
    "stranded",
    "uninstall_cleanup_command",
    "without",
]

#: kopf's finalizer on every TensorParallelJob (its default name)
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
#: the finalizer the operator keeps on the Kueue Workload of a queued job (Kueue's own name)
KUEUE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
#: the node conditions the fabric agent writes (its health, and its node against the fabric's
#: contract): both go with the agent
AGENT_CONDITIONS = (CONDITION_TYPE, CONTRACT_CONDITION)
#: the components whose pods must be gone before anything is cleaned (they would write again)
WRITERS = ("operator", "scheduler", "gang-webhook", "fabric-agent")
_TIMEOUT_S = 30.0
out = Console(highlight=False, soft_wrap=True)


# -- the pure half -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCleanup:
    """What to remove from one node."""

    name: str
    labels: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    #: the fabric agent's node conditions to remove (:data:`AGENT_CONDITIONS`)
    conditions: tuple[str, ...] = ()

    def words(self) -> str:
        """Return what is removed, in one line."""
        parts = [*self.labels, *self.annotations, *(f"condition {c}" for c in self.conditions)]
        return f"node {self.name}: {', '.join(parts)}"


def node_cleanup(
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    conditions: Iterable[str],
    *,
    remove_topology: bool = False,
) -> NodeCleanup | None:
    """Return what to remove from a node: the fabric agent's label, annotation and condition,
    and with ``remove_topology`` every ``topology.tpfabric.io/`` key (None: nothing)."""
    if remove_topology:
        gone_labels = tuple(sorted(k for k in labels if k.startswith(topology.PREFIX)))
        gone_annotations = tuple(sorted(k for k in annotations if k.startswith(topology.PREFIX)))
    else:
        gone_labels = (topology.HEALTH,) if topology.HEALTH in labels else ()
        gone_annotations = (DETAIL_ANNOTATION,) if DETAIL_ANNOTATION in annotations else ()
    present = set(conditions)
    gone_conditions = tuple(c for c in AGENT_CONDITIONS if c in present)
    if not (gone_labels or gone_annotations or gone_conditions):
        return None
    return NodeCleanup(name, gone_labels, gone_annotations, gone_conditions)


def stranded(pod: Mapping[str, Any], scheduler: str) -> str | None:
    """Return why a pod would wait for ever once tpfabric is gone (None: it would not): it is
    not bound and names ``scheduler``, gated by tpfabric or not."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp"):
        return None
    if spec.get("schedulerName") != scheduler:
        return None
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    gated = f", gated by {', '.join(sorted(str(g) for g in gates))}" if gates else ""
    return f"unbound, names {scheduler}{gated}"


def without(finalizers: Sequence[str] | None, finalizer: str) -> list[str] | None:
    """Return ``finalizers`` without ``finalizer`` (None: it is not there)."""
    held = list(finalizers or [])
    if finalizer not in held:
        return None
    return [f for f in held if f != finalizer]


@dataclass
class Report:
    """What the cleanup did (or, ``dry``, would do), one line per object."""

    dry: bool = False
    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        """Record one line."""
        self.lines.append(line)

    def done(self, what: str, verb: str) -> None:
        """Record that ``what`` was ``verb`` (``deleted``, ``removed``), or would be."""
        self.lines.append(f"{what}: {'would be ' if self.dry else ''}{verb}")


# -- the one part that talks to the API server ---------------------------------------------------


def _wait_for_writers(
    core: Any, release: str, wait_seconds: float, report: Report, clock: Callable[[], float]
) -> None:
    """Wait until no pod of the release's components remains (at most ``wait_seconds``)."""
    selector = (
        f"app.kubernetes.io/instance={release},app.kubernetes.io/component in ({','.join(WRITERS)})"
    )
    deadline = clock() + wait_seconds
    while True:
        left = core.list_pod_for_all_namespaces(
            label_selector=selector, _request_timeout=_TIMEOUT_S
        ).items
        if not left:
            return
        if clock() >= deadline:
            names = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in left[:5])
            report.add(
                f"warning: pods of the release still there after {wait_seconds:.0f} s: {names}"
            )
            return
        time.sleep(1.0)


def _leases(
    coordination: Any, namespace: str, names: Sequence[str], dry: bool, report: Report
) -> None:
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    for name in names:
        try:
            if not dry:
                coordination.delete_namespaced_lease(name, namespace, _request_timeout=_TIMEOUT_S)
            else:
                coordination.read_namespaced_lease(name, namespace, _request_timeout=_TIMEOUT_S)
        except ApiException as err:
            if err.status == 404:
                continue
            raise
        report.done(f"lease {namespace}/{name}", "deleted")


def _heartbeats(coordination: Any, namespace: str, dry: bool, report: Report) -> None:
    """Delete the fabric agents' heartbeat Leases in ``namespace`` (each by uid)."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    listed = coordination.list_namespaced_lease(
        namespace, label_selector=HEARTBEAT_LABEL, _request_timeout=_TIMEOUT_S
    )
    for lease in listed.items:
        name = lease.metadata.name
        if not dry:
            try:
                coordination.delete_namespaced_lease(
                    name, namespace, body={"preconditions": {"uid": lease.metadata.uid}},
                    _request_timeout=_TIMEOUT_S,
                )  # fmt: skip
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
        report.done(f"lease {namespace}/{name} (fabric agent heartbeat)", "deleted")


def _finalizers(
    custom: Any,
    resource: tuple[str, str, str],
    finalizer: str,
    report: Report,
    *,
    owned_by: str | None = None,
) -> None:
    """Remove ``finalizer`` from every object of ``resource`` (group, version, plural), those of
    an owner of kind ``owned_by`` only when given."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    group, version, plural = resource
    dry = report.dry
    try:
        listed = custom.list_cluster_custom_object(
            group, version, plural, _request_timeout=_TIMEOUT_S
        )
    except ApiException as err:
        if err.status == 404:  # the CRD is not installed (Kueue's, or ours deleted)
            return
        raise
    for obj in listed.get("items") or []:
        meta = obj.get("metadata") or {}
        if owned_by and not any(
            r.get("kind") == owned_by for r in meta.get("ownerReferences") or []
        ):
            continue
        kept = without(meta.get("finalizers"), finalizer)
        if kept is None:
            continue
        where = f"{plural} {meta.get('namespace')}/{meta.get('name')}"
        if not dry:
            patch = [
                {"op": "test", "path": "/metadata/finalizers", "value": meta.get("finalizers")},
                {"op": "replace", "path": "/metadata/finalizers", "value": kept},
            ]
            try:
                custom.patch_namespaced_custom_object(
                    group, version, meta["namespace"], plural, meta["name"], patch,
                    _content_type="application/json-patch+json", _request_timeout=_TIMEOUT_S,
                )  # fmt: skip
            except ApiException as err:
                if err.status in (404, 422):  # gone, or changed under us: looked at no more
                    report.add(f"{where}: finalizer {finalizer} not removed ({err.reason})")
                    continue
                raise
        report.done(f"{where}: finalizer {finalizer}", "removed")


def _gangs(custom: Any, dry: bool, report: Report) -> None:
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    from tpfabric_core.api import GROUP, VERSION  # noqa: PLC0415
    from tpfabric_core.api.gang import GANG_PLURAL  # noqa: PLC0415

    try:
        listed = custom.list_cluster_custom_object(
            GROUP, VERSION, GANG_PLURAL, _request_timeout=_TIMEOUT_S
        )
    except ApiException as err:
        if err.status == 404:
            return
        raise
    for obj in listed.get("items") or []:
        meta = obj["metadata"]
        if not dry:
            try:
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], GANG_PLURAL, meta["name"],
                    body={"preconditions": {"uid": meta["uid"]}}, _request_timeout=_TIMEOUT_S,
                )  # fmt: skip
            except ApiException as err:
                if err.status not in (404, 409):
                    raise
        report.done(f"gang {meta['namespace']}/{meta['name']}", "deleted")


def _pods(core: Any, scheduler: str, dry: bool, report: Report) -> None:
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    token: str | None = None
    while True:
        page = core.list_pod_for_all_namespaces(
            field_selector=f"spec.schedulerName={scheduler},spec.nodeName=",
            limit=500, _continue=token, _request_timeout=_TIMEOUT_S,
        )  # fmt: skip
        for pod in page.items:
            why = stranded(core.api_client.sanitize_for_serialization(pod), scheduler)
            if why is None:
                continue
            if not dry:
                try:
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace,
                        body={"preconditions": {"uid": pod.metadata.uid}},
                        _request_timeout=_TIMEOUT_S,
                    )  # fmt: skip
                except ApiException as err:
                    if err.status not in (404, 409):
                        raise
            report.done(f"pod {pod.metadata.namespace}/{pod.metadata.name} ({why})", "deleted")
        token = getattr(page.metadata, "var_continue", None)
        if not token:
            return


def _nodes(core: Any, remove_topology: bool, dry: bool, report: Report) -> None:
    from tpfabric_cli.kube_nodes import (  # noqa: PLC0415
        FIELD_MANAGER,
        patch_node_labels,
        read_nodes,
    )

    for node in read_nodes(core):
        plan = node_cleanup(
            node.name,
            node.labels,
            node.annotations,
            node.conditions,
            remove_topology=remove_topology,
        )
        if plan is None:
            continue
        if not dry:
            if plan.labels or plan.annotations:
                removed = dict.fromkeys(plan.annotations)
                patch_node_labels(core, node.name, {}, list(plan.labels), removed or None)
            if plan.conditions:  # conditions merge on their type: only these go
                gone = [{"type": kind, "$patch": "delete"} for kind in plan.conditions]
                core.patch_node_status(
                    node.name,
                    {"status": {"conditions": gone}},
                    field_manager=FIELD_MANAGER,
                    _content_type="application/strategic-merge-patch+json",
                    _request_timeout=_TIMEOUT_S,
                )
        report.done(plan.words(), "removed")


def run_cleanup(
    api: Any,
    *,
    namespace: str,
    release: str,
    leases: Sequence[str],
    agent_namespace: str | None = None,
    remove_topology: bool = False,
    wait_seconds: float = 120.0,
    dry_run: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Report:
    """Clean what the release's components wrote (see the module); return what was done."""
    from kubernetes import client  # noqa: PLC0415

    from tpfabric_core.api import GROUP, PLURAL, SCHEDULER_NAME, VERSION  # noqa: PLC0415

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    report = Report(dry=dry_run)
    if not dry_run:
        _wait_for_writers(core, release, wait_seconds, report, clock)
    coordination = client.CoordinationV1Api(api)
    _leases(coordination, namespace, leases, dry_run, report)
    _heartbeats(coordination, agent_namespace or namespace, dry_run, report)
    _finalizers(custom, (GROUP, VERSION, PLURAL), KOPF_FINALIZER, report)
    _finalizers(
        custom,
        ("kueue.x-k8s.io", "v1beta2", "workloads"),
        KUEUE_FINALIZER,
        report,
        owned_by="TensorParallelJob",
    )
    _gangs(custom, dry_run, report)
    _pods(core, SCHEDULER_NAME, dry_run, report)
    _nodes(core, remove_topology, dry_run, report)
    return report


@user_errors
def uninstall_cleanup_command(
    *,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="The release namespace (its Leases).")
    ],
    release: Annotated[
        str, typer.Option(help="The release whose component pods must be gone first.")
    ] = "tpfabric",
    lease: Annotated[
        list[str] | None,
        typer.Option(
            "--lease",
            help="A Lease the components took in the release namespace (repeatable; default: the "
            "chart's <fullname>-operator, -placer and -scheduler).",
        ),
    ] = None,
    agent_namespace: Annotated[
        str | None,
        typer.Option(
            help="The fabric agent's namespace (its heartbeat Leases; default: --namespace)."
        ),
    ] = None,
    remove_topology: Annotated[
        bool,
        typer.Option(
            "--remove-topology",
            help="Also remove every topology.tpfabric.io/ node label and annotation "
            "(discovery's levels, rails and rail map), kept by default.",
        ),
    ] = False,
    wait_seconds: Annotated[
        float,
        typer.Option(help="How long to wait for the release's component pods to be gone."),
    ] = 120.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be removed.")
    ] = False,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Remove what `helm uninstall` leaves: the components' Leases (the fabric agents'
    heartbeats too), kopf's finalizers on
    TensorParallelJobs, Gang records, pods that would wait for ever for tpfabric's scheduler,
    and the fabric agent's node label, annotation and condition (the chart's post-delete hook
    runs it)."""
    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415

    fullname = release if "tpfabric" in release else f"{release}-tpfabric"  # as the chart names it
    names = lease or [f"{fullname}-{suffix}" for suffix in ("operator", "placer", "scheduler")]
    with node_api(kubeconfig) as core:
        report = run_cleanup(
            core.api_client,
            namespace=namespace,
            release=release,
            leases=names,
            agent_namespace=agent_namespace,
            remove_topology=remove_topology,
            wait_seconds=wait_seconds,
            dry_run=dry_run,
        )
    for line in report.lines:
        out.print(escape(line))
    if not report.lines:
        out.print("nothing to clean")
