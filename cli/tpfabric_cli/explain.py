"""``tpfabric explain NAME``: where one live job's workers are and why, from the cluster.

For a TensorParallelJob or a Gang record (another controller's gang) it prints the job's
``status.placement`` in the placer's own words (state, message, reasons, refused nodes), its
``Degraded`` condition while a rank runs on a degraded link (with the restart weighing), its
``RDMA`` condition (whether its pods got RDMA devices, and why not), the plan's level, domain,
hops and modelled all-reduce, and a rank table that puts each rank's planned node beside the
node its pod is bound to, with that node's leaf, spine, rails and fabric health; a pod off its
planned node is flagged. ``--json`` gives the same facts to
scripts, ``--picture`` draws the job on the fabric (the demo's picture).

Two halves, kept apart: :func:`explain_object`, :func:`print_explanation` and
:func:`draw_explanation` are pure (the job, its pods and the node labels in, text or a picture
out); :func:`read_subject` is the only code here that talks to the API server, reading the job
and its pods, and :func:`read_job_nodes` the nodes of its plan and its pods, one get each (never
every node of the cluster for one job; ``--picture`` reads them all, as ``topology show --cluster``
does). A user with rights in one namespace only may not read nodes: the rows then have no leaf,
spine, rails or health, and the text says "node details hidden: no permission to read nodes"
instead of failing. Nothing here writes to the cluster, and nothing rewords what the placer
wrote: the message and reasons are printed verbatim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from tpfabric_cli.errors import user_errors
from tpfabric_cli.options import KubeconfigOpt
from tpfabric_cli.topology.node_health import NodeHealth
from tpfabric_core import labels
from tpfabric_core.api.placement import StoredPlacement, gang_problems, placement_of_status
from tpfabric_core.errors import InputError
from tpfabric_core.gang_shortfall import Shortfall, numbered, shortfall
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.hostlist import compress_hostlist
from tpfabric_core.input_limits import whole_number

if TYPE_CHECKING:
    from kubernetes import client

    from tpfabric_cli.topology import Discovery, DomainTree

__all__ = [
    "NODES_HIDDEN",
    "Explanation",
    "JobKind",
    "JobNotFoundError",
    "RankRow",
    "api_failure",
    "choose_subject",
    "context_namespace",
    "draw_explanation",
    "explain_command",
    "explain_object",
    "job_nodes",
    "owner_words",
    "picture_format",
    "print_explanation",
    "print_uncropped",
    "read_job_nodes",
    "read_subject",
]

_TIMEOUT_S = 30.0
#: what ``explain`` says when the API server refuses the user the nodes
NODES_HIDDEN = "node details hidden: no permission to read nodes"
_RAIL_KEY = re.compile(rf"^{re.escape(labels.PREFIX)}rail-(\d+)$")
_MEASURE_WIDTH = 10_000

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class JobKind(StrEnum):
    """What ``--kind`` names: a TensorParallelJob or a Gang record."""

    TPJ = "tpj"
    GANG = "gang"


@dataclass(frozen=True, slots=True)
class _KindInfo:
    """Where a kind lives in the API and how its pods say whose they are and which rank."""

    kind: str
    plural: str
    pod_label: str
    rank_label: str


@cache
def _kind_info(kind: JobKind) -> _KindInfo:
    """Return where ``kind`` lives and how its pods are labelled."""
    # imported here: the API's pydantic models are slow to import, and every command imports this
    from tpfabric_core.api import JOB_LABEL, KIND, PLURAL, WORKER_INDEX_LABEL  # noqa: PLC0415
    from tpfabric_core.api.gang import GANG_KIND, GANG_PLURAL  # noqa: PLC0415

    if kind is JobKind.TPJ:
        return _KindInfo(KIND, PLURAL, JOB_LABEL, WORKER_INDEX_LABEL)
    return _KindInfo(GANG_KIND, GANG_PLURAL, GANG_LABEL, RANK_LABEL)


class JobNotFoundError(RuntimeError):
    """No job of that name in that namespace (exit 1, as any failed read)."""


# -- the pure half -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankRow:
    """One rank of the job: its pod (None: no pod has that rank now), the node the plan gives
    it, the node the pod is bound to, and that node's place and health in the fabric (of the
    bound node once there is one, else of the planned node)."""

    rank: int | None
    """None: the pod's rank label is missing or not a number (``rank_text`` says what it is)."""
    pod: str | None
    planned: str | None
    bound: str | None
    phase: str
    leaf: str | None = None
    spine: str | None = None
    block: str | None = None
    rails: str | None = None
    """The rail leaf switches of the node, as one hostlist (e.g. ``su1-leaf1-rail[0-7]``)."""
    health: str | None = None
    rank_text: str = ""

    @property
    def off_plan(self) -> bool:
        """Return whether the pod is bound to another node than the plan gave its rank."""
        return self.bound is not None and self.planned is not None and self.bound != self.planned

    def document(self) -> dict[str, Any]:
        """Return the row as JSON, keys in the API's camelCase."""
        return {
            "rank": self.rank if self.rank is not None else (self.rank_text or None),
            "pod": self.pod,
            "plannedNode": self.planned,
            "boundNode": self.bound,
            "offPlan": self.off_plan,
            "phase": self.phase,
            "leaf": self.leaf,
            "spine": self.spine,
            "block": self.block,
            "rails": self.rails,
            "health": self.health,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """What ``explain`` says of one job: its status as written, and its ranks as they are."""

    kind: str
    namespace: str
    name: str
    phase: str | None
    ready: str | None
    workers: int | None
    placement: StoredPlacement
    """``status.placement`` as the placer wrote it (``--json`` prints it verbatim)."""
    ranks: tuple[RankRow, ...]
    owner: Mapping[str, Any] | None = None
    """A Gang's ``spec.owner`` (kind and name); None for a TensorParallelJob."""
    problems: tuple[str, ...] = ()
    """A Gang's ``status.problems``."""
    degraded: str | None = None
    """The message of the job's ``Degraded`` condition while it is True: the ranks on degraded
    links and, with ``onDegradedLink: restart-when-it-pays``, why the job restarts or keeps
    running."""
    rdma: Mapping[str, str] | None = None
    """The job's ``RDMA`` condition (status, reason, message): whether its pods got RDMA
    devices, and why not (None: the job has no such condition)."""
    short: Shortfall | None = None
    """A Gang short of pods: how many exist and which ranks are missing (None: none missing)."""
    owner_words: str = ""
    """What makes a Gang's pods (``LeaderWorkerSet x``), named when it is short of pods."""
    numbered: bool = False
    """A Gang's pods carry their attempt: it is planned from its first pods, not once whole."""
    nodes_hidden: bool = False
    """The nodes could not be read (the user may not read nodes): no leaf, spine, rails or
    health in the rows."""

    @property
    def short_words(self) -> str:
        """Return what a Gang short of pods waits for, in words ("": none missing)."""
        if self.short is None:
            return ""
        return self.short.words(self.owner_words, numbered=self.numbered)

    @property
    def off_plan(self) -> tuple[RankRow, ...]:
        """Return the rows whose pod is bound to another node than its planned one."""
        return tuple(row for row in self.ranks if row.off_plan)

    @property
    def placed_nodes(self) -> tuple[str, ...]:
        """Return the job's nodes in rank order: each rank's bound node, else its planned one."""
        return tuple(
            dict.fromkeys(node for row in self.ranks if (node := row.bound or row.planned))
        )

    def document(self) -> dict[str, Any]:
        """Return the ``--json`` document: the same facts the text shows."""
        document: dict[str, Any] = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "ready": self.ready,
            "workers": self.workers,
        }
        if self.owner is not None:
            document["owner"] = dict(self.owner)
            document["problems"] = list(self.problems)
        document["degraded"] = self.degraded
        if self.short is not None:
            document["pods"] = {
                "present": self.short.present,
                "size": self.short.size,
                "missingRanks": list(self.short.missing_ranks)
                if self.short.missing_ranks is not None
                else None,
                "message": self.short_words,
            }
        document["nodeDetails"] = NODES_HIDDEN if self.nodes_hidden else "shown"
        document["rdma"] = dict(self.rdma) if self.rdma is not None else None
        document["placement"] = dict(self.placement.raw)
        document["ranks"] = [row.document() for row in self.ranks]
        return document


def _rank_of(pod: Mapping[str, Any], rank_label: str) -> tuple[int | None, str]:
    """Return the pod's rank from ``rank_label`` (None when missing or not a number) and the
    label's text."""
    text = str(((pod.get("metadata") or {}).get("labels") or {}).get(rank_label, ""))
    return whole_number(text), text


def _pod_phase(pod: Mapping[str, Any]) -> str:
    """Return the pod's phase, saying also when it is terminating or still gated."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    if phase == "Pending" and (pod.get("spec") or {}).get("schedulingGates"):
        return "Pending (gated)"
    return phase


def _rails(node_labels: Mapping[str, str]) -> str | None:
    """Return the node's rail leaf switches in rail order as one hostlist (None: no rail label)."""
    rails = sorted(
        (int(match.group(1)), value)
        for key, value in node_labels.items()
        if (match := _RAIL_KEY.match(key))
    )
    return compress_hostlist([value for _, value in rails]) if rails else None


def _row(
    rank: int | None,
    pod: Mapping[str, Any] | None,
    planned: str | None,
    node_labels: Mapping[str, Mapping[str, str]],
    health: Mapping[str, NodeHealth],
    *,
    rank_text: str = "",
) -> RankRow:
    bound = str((pod.get("spec") or {}).get("nodeName") or "") if pod else ""
    node = bound or planned
    these = node_labels.get(node, {}) if node else {}
    sick = health.get(node) if node else None
    return RankRow(
        rank=rank,
        pod=str(pod["metadata"]["name"]) if pod else None,
        planned=planned,
        bound=bound or None,
        phase=_pod_phase(pod) if pod else "no pod",
        leaf=these.get(labels.LEAF),
        spine=these.get(labels.SPINE),
        block=these.get(labels.BLOCK),
        rails=_rails(these),
        health=sick.describe() if sick else these.get(labels.HEALTH),
        rank_text=rank_text,
    )


def explain_object(
    obj: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
    health: Mapping[str, NodeHealth] | None = None,
    *,
    nodes_hidden: bool = False,
) -> Explanation:
    """Return the explanation of ``obj`` (a TensorParallelJob or Gang as the API serves it) from
    its pods (as the API serves them) and the labels and health of the nodes, by node name
    (``nodes_hidden``: they could not be read).

    Every rank below the job's size or the plan's length, and every rank a pod carries, gets a
    row; a rank held by two pods (an old attempt still terminating) gets one row per pod, and a
    pod without a readable rank a row of its own at the end. A Gang without a plan whose pods
    have no ranks yet (ranks follow the order of creation, given once every pod exists) gets a
    row per pod only: how many pods are missing is said apart (:attr:`Explanation.short`)."""
    is_gang = obj.get("kind") == _kind_info(JobKind.GANG).kind
    info = _kind_info(JobKind.GANG if is_gang else JobKind.TPJ)
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    placement = placement_of_status(status)
    planned = placement.nodes
    by_rank: dict[int | None, list[tuple[str, Mapping[str, Any]]]] = {}
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        rank, text = _rank_of(pod, info.rank_label)
        by_rank.setdefault(rank, []).append((text, pod))
    workers = spec.get("workers")
    known = {rank for rank in by_rank if rank is not None}
    health = health or {}
    rows: list[RankRow] = []
    expected = set(range(max(int(workers or 0), len(planned))))
    short = None
    if is_gang and workers is not None:
        short = shortfall((rank for rank, held in by_rank.items() for _ in held), int(workers))
    if is_gang and not planned and None in by_rank:
        # a gang ranked by creation order gets its ranks once whole: no empty row per rank
        expected = set()
    for rank in sorted(known | expected):
        node = planned[rank] if rank < len(planned) else None
        held: list[Mapping[str, Any] | None] = [pod for _, pod in by_rank.get(rank, [])]
        rows += [_row(rank, pod, node, node_labels, health) for pod in held or [None]]
    rows += [
        _row(None, pod, None, node_labels, health, rank_text=text)
        for text, pod in by_rank.get(None, [])
    ]
    return Explanation(
        kind=info.kind,
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        phase=status.get("phase"),
        ready=status.get("ready"),
        workers=int(workers) if workers is not None else None,
        placement=placement,
        ranks=tuple(rows),
        owner=(spec.get("owner") or {}) if is_gang else None,
        problems=gang_problems(status) if is_gang else (),
        degraded=_degraded(status),
        rdma=_rdma(status),
        short=short,
        owner_words=owner_words(spec.get("owner") or {}) if is_gang else "",
        numbered=is_gang and numbered((p.get("metadata") or {}).get("labels") for p in pods),
        nodes_hidden=nodes_hidden,
    )


def owner_words(owner: Mapping[str, Any]) -> str:
    """Return what makes a Gang's pods, in words (a pod group has no owner object)."""
    kind, name = str(owner.get("kind") or ""), str(owner.get("name") or "")
    if not kind or kind == "PodGroup":
        return ""
    return f"{kind} {name}"


def _degraded(status: Mapping[str, Any]) -> str | None:
    """Return the message of the ``Degraded`` condition when it is True, else None."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Degraded" and condition.get("status") == "True":
            return str(condition.get("message") or "")
    return None


def _rdma(status: Mapping[str, Any]) -> dict[str, str] | None:
    """Return the ``RDMA`` condition's status, reason and message, None when there is none."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "RDMA":
            return {k: str(condition.get(k) or "") for k in ("status", "reason", "message")}
    return None


def _heading(explanation: Explanation) -> str:
    # imported here: placement_contrast brings the cost model, slow to import for every command
    from tpfabric_cli.placement_contrast import counted  # noqa: PLC0415

    who = f"{explanation.namespace}/{explanation.name}"
    parts = [f"[bold]{explanation.kind} {escape(who)}[/]"]
    if explanation.phase:
        parts.append(escape(" ".join(filter(None, (explanation.phase, explanation.ready)))))
    noun = "pod" if explanation.owner is not None else "worker"
    if explanation.workers is not None:
        parts.append(counted(explanation.workers, noun))
    if explanation.owner is not None:
        owner = explanation.owner
        parts.append(f"owner {escape(str(owner.get('kind', '?')))} "
                     f"{escape(str(owner.get('name', '?')))}")  # fmt: skip
    return " · ".join(parts)


def _plan_facts(placement: StoredPlacement) -> str:
    """Return the plan's level, domain, hops and modelled all-reduce in one line ("" if none)."""
    from tpfabric_cli.placement_contrast import counted, format_seconds  # noqa: PLC0415

    facts = []
    if placement.level:
        facts.append(f"level {placement.level}")
    if placement.domain:
        facts.append(f"domain {placement.domain}")
    if placement.hops is not None:
        facts.append(counted(placement.hops, "switch hop"))
    if placement.modelled_allreduce_us is not None:
        seconds = placement.modelled_allreduce_us / 1e6
        facts.append(f"all-reduce {format_seconds(seconds)} (modelled)")
    return " · ".join(facts)


def _rank_table(explanation: Explanation) -> Table:
    table = Table("rank", "pod", "planned node", "bound node", "leaf", "spine", "rails",
                  "health", "phase", title="ranks")  # fmt: skip
    for row in explanation.ranks:
        bound = escape(row.bound or "-")
        if row.off_plan:
            bound = f"[bold red]{bound} ✗ off plan[/]"
        health = escape(row.health or "-")
        if row.rank is not None:
            rank = str(row.rank)
        elif row.rank_text:
            rank = f"? {escape(row.rank_text)}"
        else:
            rank = "- (not given yet)"
        table.add_row(
            rank,
            escape(row.pod or "(no pod)"), escape(row.planned or "-"), bound,
            escape(row.leaf or "-"), escape(row.spine or "-"), escape(row.rails or "-"),
            health if row.health in (None, "ok") else f"[red]{health}[/]", escape(row.phase),
        )  # fmt: skip
    return table


def print_uncropped(console: Console, table: Table) -> None:
    """Print ``table`` at least as wide as its widest line: a cut node name is worse than a long
    line (rich crops at the console width, 80 when piped)."""
    measure = Console(width=_MEASURE_WIDTH)
    needed = Measurement.get(measure, measure.options, table).maximum
    width = max(console.width, needed)
    wide = Console(file=console.file, highlight=False, soft_wrap=True, no_color=console.no_color,
                   force_terminal=console.is_terminal, width=width)  # fmt: skip
    wide.print(table)


def print_explanation(explanation: Explanation, console: Console) -> None:
    """Print the explanation: heading, placement (verbatim), reasons, what a waiting job waits
    on, a Gang's problems, the rank table and the pods off their planned node."""
    console.print(_heading(explanation))
    placement = explanation.placement
    if not placement.present:
        console.print("no placement yet: status.placement is empty")
    else:
        console.print(f"placement [bold]{escape(placement.state or '?')}[/]: "
                      f"{escape(placement.message)}")  # fmt: skip
    if facts := _plan_facts(placement):
        console.print(f"  {escape(facts)}")
    if placement.reasons:
        console.print("why this domain:" if placement.planned else "why it waits:")
        for reason in placement.reasons:  # each names its domain itself
            console.print(f"  - {escape(reason.reason)}")
    if placement.waiting_since and not placement.planned:  # a plan keeps its first wait
        console.print(f"waiting since {escape(placement.waiting_since)}")
    if placement.refused_nodes:
        console.print("nodes kube-scheduler refused (left out of plans for 10 minutes):")
        for node in placement.refused_nodes:
            console.print(f"  - {escape(node.node)}: {escape(node.reason)}"
                          f" (since {escape(node.since)})")  # fmt: skip
    if placement.previous_nodes:
        previous = compress_hostlist(list(placement.previous_nodes))
        console.print(f"nodes of the last plan: {escape(previous)}")
    if explanation.rdma is not None:
        rdma = explanation.rdma
        if rdma["status"] == "True":
            console.print(f"transport: RDMA ({escape(rdma['reason'])}: {escape(rdma['message'])})")
        else:
            console.print(f"[yellow]transport: TCP sockets, no RDMA ({escape(rdma['reason'])}: "
                          f"{escape(rdma['message'])})[/]")  # fmt: skip
    if explanation.degraded is not None:
        console.print(f"[yellow]degraded: {escape(explanation.degraded)}[/]")
    if explanation.short is not None:
        console.print(f"[yellow]pods: {escape(explanation.short_words)}[/]")
    if explanation.nodes_hidden:
        console.print(f"[dim]{NODES_HIDDEN}[/]")
    if explanation.problems:
        console.print("[yellow]problems of the gang's pods:[/]")
        for problem in explanation.problems:
            console.print(f"  - [yellow]{escape(problem)}[/]")
    print_uncropped(console, _rank_table(explanation))
    for row in explanation.off_plan:
        console.print(f"[bold red]rank {row.rank}: pod {escape(row.pod or '')} is bound to "
                      f"{escape(row.bound or '')}, not its planned node "
                      f"{escape(row.planned or '')}[/]")  # fmt: skip


def picture_format(path: Path) -> str:
    """Return ``png`` or ``svg`` from the suffix of ``path``; InputError otherwise."""
    fmt = path.suffix.lower().removeprefix(".")
    if fmt not in ("png", "svg"):
        raise InputError("--picture", f"cannot draw {path}: unknown format",
                         "name a .png or .svg file")  # fmt: skip
    return fmt


def draw_explanation(explanation: Explanation, tree: DomainTree, path: Path) -> None:
    """Draw the fabric of ``tree`` into ``path`` (.png or .svg) with the job's nodes marked."""
    from tpfabric_cli.fabric_picture import JobMarks, Panel, draw_fabric  # noqa: PLC0415

    placement = explanation.placement
    caption = f"{placement.state or 'no placement'}: {placement.message}"
    facts = _plan_facts(placement)
    panel = Panel(
        caption + (f"\n{facts}" if facts else ""),
        (JobMarks(explanation.name, explanation.placed_nodes),),
    )
    title = f"{explanation.kind} {explanation.namespace}/{explanation.name}"
    draw_fabric(tree, path, picture_format(path), [panel], title=title)


def choose_subject(
    found: Mapping[JobKind, Mapping[str, Any] | None], namespace: str, name: str
) -> tuple[JobKind, Mapping[str, Any]]:
    """Return the one object ``found`` holds (the kinds looked up -> the object, None when the
    API server answered 404). JobNotFoundError when none exists, InputError when both do."""
    present = [(kind, obj) for kind, obj in found.items() if obj is not None]
    if len(present) == 1:
        return present[0]
    kinds = " or ".join(_kind_info(kind).kind for kind in found)
    if not present:
        raise JobNotFoundError(f"no {kinds} named {name!r} in namespace {namespace!r}")
    raise InputError(
        "--kind",
        f"both a TensorParallelJob and a Gang are named {name!r} in namespace {namespace!r}",
        "pass --kind tpj or --kind gang",
    )


# -- the one part that reads the cluster ---------------------------------------------------------


def api_failure(err: Exception, what: str) -> RuntimeError:
    """Return the one-line error for a failed read ``what`` of a job, a Gang or pods."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    if isinstance(err, ApiException):
        reason = f"{err.status} {err.reason}"
        if err.status in (401, 403):
            reason += " (the kubeconfig's user needs get on tensorparalleljobs and gangs and list "
            reason += "on pods in the namespace; node details also get on nodes)"
        return RuntimeError(f"{what}: API server answered {reason}")
    cause = getattr(err, "reason", None) or err  # urllib3's MaxRetryError: the last failure
    return RuntimeError(f"{what}: cannot reach the API server ({type(cause).__name__}: {cause})")


def _get(
    custom: client.CustomObjectsApi, kind: JobKind, namespace: str, name: str
) -> dict[str, Any] | None:
    """Return the object, or None when the API server answers 404 (also: its CRD is missing)."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415
    from urllib3.exceptions import HTTPError  # noqa: PLC0415

    from tpfabric_core.api import GROUP, VERSION  # noqa: PLC0415

    plural = _kind_info(kind).plural
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, _request_timeout=_TIMEOUT_S
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise api_failure(error, f"reading {plural} {namespace}/{name}") from error
    except HTTPError as error:
        raise api_failure(error, f"reading {plural} {namespace}/{name}") from error
    return obj


def read_subject(
    kubeconfig: Path | None, namespace: str | None, name: str, kind: JobKind | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the job (``kind``, or whichever of TensorParallelJob and Gang exists) in
    ``namespace`` (None: the kubeconfig context's, else ``default``) and its pods, as the API
    serves them (dicts, camelCase)."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.rest import ApiException  # noqa: PLC0415
    from urllib3.exceptions import HTTPError  # noqa: PLC0415

    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415

    namespace = namespace or context_namespace(kubeconfig)
    with node_api(kubeconfig) as core:
        custom = client.CustomObjectsApi(core.api_client)
        kinds = [kind] if kind is not None else list(JobKind)
        found = {k: _get(custom, k, namespace, name) for k in kinds}
        chosen, obj = choose_subject(found, namespace, name)
        if kind is None:
            other = next(_kind_info(k).kind for k in kinds if k is not chosen)
            err.print(f"[dim]found a {_kind_info(chosen).kind}, no {other} of that name[/]")
        selector = f"{_kind_info(chosen).pod_label}={name}"
        try:
            pods = core.list_namespaced_pod(
                namespace, label_selector=selector, _request_timeout=_TIMEOUT_S
            ).items
        except (ApiException, HTTPError) as error:
            raise api_failure(error, f"listing the pods of {namespace}/{name}") from error
        serialized = [core.api_client.sanitize_for_serialization(pod) for pod in pods]
    return dict(obj), serialized


def job_nodes(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Return the nodes a job's explanation shows: its plan's and those its pods are bound to."""
    planned = [node for node in placement_of_status(obj.get("status") or {}).nodes if node]
    bound = [str(node) for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))]
    return sorted(set(planned) | set(bound))


def read_job_nodes(kubeconfig: Path | None, names: Sequence[str]) -> Discovery | None:
    """Return the labels and fabric health of the nodes ``names`` (a get per node: never the
    whole cluster for one job), or None when the API server refuses the user the nodes (a user
    with rights in one namespace only: node details are then hidden, never an error)."""
    from tpfabric_cli.kube_nodes import NodesHiddenError, node_api, read_named_nodes  # noqa: PLC0415
    from tpfabric_cli.topology.sources import nodes_discovery  # noqa: PLC0415

    try:
        with node_api(kubeconfig) as core:
            return nodes_discovery(read_named_nodes(core, names))
    except NodesHiddenError as error:
        err.print(f"[dim]{escape(NODES_HIDDEN)} ({escape(str(error))})[/]")
        return None


def context_namespace(kubeconfig: Path | None) -> str:
    """Return the namespace of the kubeconfig's current context, ``default`` when it names none
    (as kubectl does)."""
    from kubernetes import config  # noqa: PLC0415

    try:
        _, active = config.list_kube_config_contexts(
            config_file=str(kubeconfig) if kubeconfig is not None else None
        )
    except (config.ConfigException, OSError, TypeError, KeyError):
        return "default"
    return str(((active or {}).get("context") or {}).get("namespace") or "default")


def _nccl_views(
    kubeconfig: Path | None, pods: Sequence[Mapping[str, Any]], obj: Mapping[str, Any]
) -> list[Any]:
    """Return each pod's NCCL view (:mod:`tpfabric_cli.nccl_view`), read through the exec API."""
    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415
    from tpfabric_cli.nccl_view import read_nccl_views  # noqa: PLC0415

    kind = JobKind.GANG if obj.get("kind") == _kind_info(JobKind.GANG).kind else JobKind.TPJ
    with node_api(kubeconfig) as core:
        return read_nccl_views(core, pods, _kind_info(kind).rank_label)


# -- the command ---------------------------------------------------------------------------------


@user_errors
def explain_command(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The TensorParallelJob or Gang.")],
    *,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Its namespace (default: the kubeconfig context's, else default).",
        ),
    ] = None,
    kind: Annotated[
        JobKind | None,
        typer.Option(
            "--kind",
            help="tpj (TensorParallelJob) or gang (a Gang record); default: whichever exists.",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    picture: Annotated[
        Path | None,
        typer.Option(
            "--picture", metavar="FILE", help="Also draw the job on the fabric (.png or .svg)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the same facts as JSON (for scripts).")
    ] = False,
    nccl: Annotated[
        bool,
        typer.Option(
            "--nccl",
            help="Also read each running pod's NCCL topology dump and rdma-init report (exec "
            "API: needs create on pods/exec) and say per GPU whether NCCL attached it to the "
            "planned NIC.",
        ),
    ] = False,
) -> None:
    """Explain one job's placement: the plan and its reasons (the placer's words), each rank's
    planned and bound node with its leaf, spine, rails and health, and why a waiting job waits."""
    from tpfabric_cli.topology import Sources, discover, domain_tree  # noqa: PLC0415

    if picture is not None:
        picture_format(picture)  # a wrong suffix fails before any cluster read
    obj, pods = read_subject(kubeconfig, namespace, name, kind)
    nodes: Discovery | None
    if picture is not None:  # the picture is of the whole fabric: every node is read
        nodes = discover(Sources(cluster=True, kubeconfig=kubeconfig))
    else:
        nodes = read_job_nodes(kubeconfig, job_nodes(obj, pods))
    explanation = explain_object(
        obj,
        pods,
        nodes.labels if nodes is not None else {},
        nodes.health if nodes is not None else {},
        nodes_hidden=nodes is None,
    )
    views = _nccl_views(kubeconfig, pods, obj) if nccl else None
    if as_json:
        document = explanation.document()
        if views is not None:
            document["nccl"] = [view.document() for view in views]
        typer.echo(json.dumps(document, indent=2))
    else:
        print_explanation(explanation, out)
        if views is not None:
            from tpfabric_cli.nccl_view import print_nccl_views  # noqa: PLC0415

            print_nccl_views(views, out)
    if picture is not None and nodes is not None:
        draw_explanation(explanation, domain_tree(nodes), picture)
        err.print(f"wrote {escape(str(picture))}")
