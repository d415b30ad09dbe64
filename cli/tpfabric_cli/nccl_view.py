"""``tpfabric explain --nccl``: NCCL's own view of each running pod, beside the pairing.

Each running pod of the job holds, in its shared volume (``/tpfabric``), the ``rdma-init``
report (the planned GPU -> NIC pairing) and the topology NCCL dumped (``nccl-topo-dump.xml``,
``NCCL_TOPO_DUMP_FILE``). Both are read through the Kubernetes exec API (``cat`` in the pod's
first container, which mounts the volume): the kubeconfig's user needs ``create`` on
``pods/exec``. A pod whose files cannot be read gets one line saying why (not running, no dump
yet: NCCL writes it when a communicator is created, RBAC, ...); the comparison itself is
:func:`tpfabric_core.nccl_topology.compare_with_plan`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from tpfabric_core.errors import InputError
from tpfabric_core.nccl_topology import TopologyCheck, compare_with_plan, parse_topology_dump

if TYPE_CHECKING:
    from kubernetes import client

__all__ = [
    "DUMP_PATH",
    "REPORT_PATH",
    "PodNcclView",
    "nccl_view",
    "print_nccl_views",
    "read_nccl_views",
]

REPORT_PATH = "/tpfabric/rdma-init-report.json"
DUMP_PATH = "/tpfabric/nccl-topo-dump.xml"
_EXEC_TIMEOUT_S = 20


@dataclass(frozen=True, slots=True)
class PodNcclView:
    """One pod: its rank, and either the per-GPU checks or why they could not be made."""

    pod: str
    rank: str
    checks: tuple[TopologyCheck, ...] = ()
    unreadable: str | None = None

    def document(self) -> dict[str, Any]:
        """Return the view as JSON."""
        return {
            "pod": self.pod,
            "rank": self.rank,
            "unreadable": self.unreadable,
            "gpus": [check.document() for check in self.checks],
        }


def nccl_view(pod: str, rank: str, report_text: str, dump_text: str) -> PodNcclView:
    """Return the view of one pod from the text of its report and of NCCL's dump (pure)."""
    try:
        report = json.loads(report_text)
    except json.JSONDecodeError as err:
        return PodNcclView(pod, rank, unreadable=f"{REPORT_PATH} is not JSON ({err.msg})")
    pairs = ((report.get("fabric") or {}).get("pairs") or []) if isinstance(report, dict) else []
    try:
        topology = parse_topology_dump(dump_text, DUMP_PATH)
    except InputError as err:
        return PodNcclView(pod, rank, unreadable=str(err))
    if not topology.gpus:
        return PodNcclView(pod, rank, unreadable=f"{DUMP_PATH} names no GPU")
    return PodNcclView(pod, rank, checks=compare_with_plan(topology, pairs))


def print_nccl_views(views: Sequence[PodNcclView], console: Console) -> None:
    """Print, per pod, whether NCCL attached each GPU to the NIC the pairing planned."""
    console.print("NCCL's view (its topology dump) against the pairing:")
    for view in views:
        head = f"  rank {escape(view.rank)} {escape(view.pod)}"
        if view.unreadable is not None:
            console.print(f"{head}: [yellow]not checked: {escape(view.unreadable)}[/]")
            continue
        wrong = [c for c in view.checks if not c.agrees]
        verdict = "[red]differs[/]" if wrong else "as planned"
        console.print(f"{head}: {verdict}")
        for check in view.checks:
            line = escape(check.words())
            console.print(f"    [red]{line}[/]" if not check.agrees else f"    {line}")


def _exec_cat(core: client.CoreV1Api, namespace: str, pod: str, container: str, path: str) -> str:
    """Return the file's text from inside the pod; RuntimeError with the reason otherwise."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415
    from kubernetes.stream import stream  # noqa: PLC0415

    try:
        response = stream(
            core.connect_get_namespaced_pod_exec, pod, namespace, container=container,
            command=["cat", path], stderr=True, stdin=False, stdout=True, tty=False,
            _preload_content=False,
        )  # fmt: skip
        response.run_forever(timeout=_EXEC_TIMEOUT_S)
        out, err = response.read_stdout() or "", response.read_stderr() or ""
        code = response.returncode
        response.close()
    except ApiException as error:
        reason = f"exec refused: {error.status} {error.reason}"
        if error.status in (401, 403):
            reason += " (needs create on pods/exec)"
        raise RuntimeError(reason) from error
    except Exception as error:  # websocket failures have no common base class
        raise RuntimeError(f"exec failed: {type(error).__name__}: {error}") from error
    if code not in (0, None):
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else f"cat exited {code}")
    return str(out)


def read_nccl_views(
    core: client.CoreV1Api, pods: Sequence[Mapping[str, Any]], rank_label: str
) -> list[PodNcclView]:
    """Return the view of every pod of the job, reading its files where it runs."""
    views = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
        rank = str((meta.get("labels") or {}).get(rank_label, "?"))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        if phase != "Running":
            views.append(PodNcclView(name, rank, unreadable=f"the pod is {phase}, not Running"))
            continue
        container = str((spec.get("containers") or [{}])[0].get("name") or "")
        try:
            report = _exec_cat(core, namespace, name, container, REPORT_PATH)
            dump = _exec_cat(core, namespace, name, container, DUMP_PATH)
        except RuntimeError as err:
            reason = str(err)
            if "No such file" in reason and DUMP_PATH in reason:
                reason += " (NCCL writes it when the job creates its first communicator)"
            views.append(PodNcclView(name, rank, unreadable=reason))
            continue
        views.append(nccl_view(name, rank, report, dump))
    return views
