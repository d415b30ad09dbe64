"""The README's main command: tpfabric end to end on the local control plane.

Brings up a cluster of fake 8-GPU nodes from a fabric description (labelled with its topology),
starts tpfabric's gang placer/extender, its own kube-scheduler and the operator, and fills a
seeded share of the nodes with other tenants' pods, as on any shared cluster. Then the same job
runs twice on that cluster: as plain pods under the default kube-scheduler, and as a
TensorParallelJob; the demo prints, side by side, the leaf and spine domains each spans, the
switch hops of its ring and its modelled all-reduce time, and says plainly when the default
scheduler happened to do as well. Then the other example jobs; where every rank landed and why;
pictures of the placements (PNG and SVG); and it cleans up.

The figures come from ``tpfabric_core``'s cost model (:mod:`tpfabric_cli.placement_contrast`),
never from a measurement: kwok runs no containers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from rich.console import Console
from rich.table import Table

from tpfabric_cli.placement_contrast import (
    PlacementFacts,
    background_load,
    counted,
    format_seconds,
    placement_facts,
    verdict,
)
from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, VERSION, TensorParallelJob
from tpfabric_core.api.placement import placement_of_status
from tpfabric_core.fabric_description import FabricDescription
from tpfabric_core.hostlist import compress_hostlist
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.rdma_default import NodeOffer
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import GPU_RESOURCE, apply_fake_nodes, wait_ready
from tpfabric_localcluster.tpfabric import start_operator, start_scheduling
from tpfabric_operator.jobs.children import worker_rdma

__all__ = ["DEFAULT_SEED", "run_demo"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
#: The job run both ways: 4 workers x 8 GPUs that belong on one leaf.
CONTRAST_JOB = EXAMPLES / "llama-70b-tp8x4.yaml"
DEFAULT_SEED = 7
#: Share of the nodes other tenants hold before the demo's jobs arrive.
BUSY_SHARE = 0.4
#: Every example job must still fit: the contrast job on a leaf, the 16-worker one in a spine.
FREE_IN_A_LEAF = 4
FREE_IN_A_SPINE = 20
#: How many times the plain pods are submitted: one round could be luck either way.
DEFAULT_ROUNDS = 5
_LOAD = "app=background-load"
_PLAIN = "app=default-scheduler-contrast"


@dataclass(frozen=True, slots=True)
class _Job:
    """What the demo needs of an example TensorParallelJob manifest."""

    name: str
    workers: int
    gpus: int
    manifest: dict[str, Any]
    #: what each worker asks of the RDMA resource (:meth:`with_rdma`; None: nothing)
    rdma: tuple[str, int] | None = None

    @classmethod
    def load(cls, path: Path) -> _Job:
        manifest: dict[str, Any] = yaml.safe_load(path.read_text())
        spec = manifest["spec"]
        return cls(
            name=str(manifest["metadata"]["name"]),
            workers=int(spec["workers"]),
            gpus=int(spec.get("gpusPerWorker", 8)),
            manifest=manifest,
        )

    def with_rdma(self, resource: str, nodes: list[NodeOffer]) -> _Job:
        """Return the job with its workers' RDMA ask as the operator makes it (its own rule,
        :func:`~tpfabric_operator.jobs.children.worker_rdma`): ``spec.rdma`` where it names
        them, else the cluster's ``resource`` and what the nodes offer a worker (0: TCP)."""
        decision = worker_rdma(TensorParallelJob.model_validate(self.manifest), nodes, resource)
        rdma = (decision.resource, decision.count) if decision.count > 0 else None
        return replace(self, rdma=rdma)


def _plain_pod(name: str, job: _Job, *, label: str, node: str | None = None) -> dict[str, Any]:
    """Return a plain pod asking for one worker's GPUs (and RDMA); bound to ``node`` if given."""
    limits = {GPU_RESOURCE: str(job.gpus)}
    if job.rdma is not None:
        limits[job.rdma[0]] = str(job.rdma[1])
    key, value = label.split("=")
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "worker",
                "image": "registry.invalid/tp-worker:demo",  # kwok never pulls images
                "resources": {"limits": limits},
            }
        ]
    }
    if node is not None:
        spec["nodeName"] = node  # another tenant's pod, already running there
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {key: value}},
        "spec": spec,
    }


def run_demo(
    fabric: FabricDescription,
    *,
    keep: bool,
    console: Console,
    log: Callable[[str], None],
    out: Path | None = Path("out"),
    seed: int = DEFAULT_SEED,
) -> None:
    """Run the demo on a fresh local cluster; print placements and the contrast with the default
    scheduler; draw them into ``out`` (``None``: no pictures); clean up unless ``keep``."""
    cluster = LocalCluster("tpfabric-demo", log=log)
    cluster.up()
    try:
        with api_client(cluster.kubeconfig) as api:
            names = apply_fake_nodes(api, fabric)
            wait_ready(api, names)
            console.print(
                f"[bold]{len(names)} fake 8-GPU nodes[/] Ready from fabric {fabric.name!r}, "
                "labelled with their block, spine, leaf and rail switches"
            )
            start_scheduling(cluster)
            start_operator(cluster)
            console.print("tpfabric placer/extender, its kube-scheduler and the operator are up")
            core = client.CoreV1Api(api)
            _wait_default_service_account(core)
            nodes = core.list_node().items
            node_labels = {n.metadata.name: n.metadata.labels for n in nodes}
            topology = ClusterTopology.from_node_labels(node_labels)
            offers = [
                offer
                for node in nodes
                if (offer := NodeOffer.from_node(api.sanitize_for_serialization(node)))
            ]
            job = _Job.load(CONTRAST_JOB).with_rdma(fabric.rdma_resource, offers)
            busy = _occupy(core, topology, job, seed, console)
            default, ours = _same_job_twice(api, core, topology, job, console)
            placed = {job.name: ours.nodes, **_place_other_examples(api, job.name, console)}
            for name in sorted(placed):
                _show_job(api, name, node_labels, console)
            if out is not None:
                _draw(cluster, out, console, job.name, busy=busy, default=default, ours=ours,
                      placed=placed)  # fmt: skip
    finally:
        if keep:
            console.print(f"cluster left up: export KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.down()


def _same_job_twice(
    api: client.ApiClient,
    core: client.CoreV1Api,
    topology: ClusterTopology,
    job: _Job,
    console: Console,
) -> tuple[PlacementFacts, PlacementFacts]:
    """Run ``job`` as plain pods under the default scheduler (several rounds), then as a
    TensorParallelJob; print the contrast; return (the default's first round, tpfabric's)."""
    rounds = [
        placement_facts("default kube-scheduler", _run_plain(core, job), topology, job.gpus)
        for _ in range(DEFAULT_ROUNDS)
    ]
    _apply(api, job.manifest)
    placed = _placed_nodes(api, job.name, console)
    if len(placed) != job.workers:
        message = placement_of_status(_job_status(api, job.name)).message
        raise RuntimeError(f"{job.name} was not placed in time: {message or 'no plan'}")
    ours = placement_facts("tpfabric", placed, topology, job.gpus)
    _print_contrast(console, job, rounds[0], ours)
    spans = ", ".join(str(len(r.leaves)) for r in rounds)
    lucky = sum(len(r.leaves) == 1 for r in rounds)
    same = len({frozenset(r.nodes) for r in rounds}) == 1
    console.print(
        f"The default scheduler, {len(rounds)} rounds on this load (first one above): "
        f"leaf domains spanned {spans}{' (the same nodes every round)' if same else ''}; all on "
        f"one leaf in {lucky} of {len(rounds)}. Times are the cost model's (link bandwidth, "
        "hops, oversubscription), not a measurement."
    )
    return rounds[0], ours


def _place_other_examples(
    api: client.ApiClient, done: str, console: Console
) -> dict[str, tuple[str, ...]]:
    """Apply every example job but ``done``; return each one's nodes by rank once it runs."""
    others = [_Job.load(path) for path in sorted(EXAMPLES.glob("*.yaml"))]
    others = [other for other in others if other.name != done]
    for other in others:
        _apply(api, other.manifest)
    return {other.name: _placed_nodes(api, other.name, console) for other in others}


def _occupy(
    core: client.CoreV1Api, topology: ClusterTopology, job: _Job, seed: int, console: Console
) -> frozenset[str]:
    """Fill a seeded share of the nodes with other tenants' pods (bound, no scheduler); return
    the busy nodes once every such pod runs."""
    busy = background_load(
        topology, share=BUSY_SHARE, seed=seed,
        free_in_a_leaf=FREE_IN_A_LEAF, free_in_a_spine=FREE_IN_A_SPINE,
    )  # fmt: skip
    for node in sorted(busy):
        core.create_namespaced_pod("default", _plain_pod(f"tenant-{node}", job, label=_LOAD,
                                                         node=node))  # fmt: skip
    _wait_pods(core, _LOAD, len(busy), phase="Running")
    console.print(
        f"other tenants hold [bold]{len(busy)} of {len(topology)} nodes[/] (seed {seed}, "
        f"--seed changes them): {compress_hostlist(sorted(busy))}"
    )
    return busy


def _run_plain(core: client.CoreV1Api, job: _Job) -> list[str]:
    """Return where the default scheduler puts the job's workers as plain pods (rank order),
    then remove them (and wait until they are gone) so that the TensorParallelJob finds the
    same free nodes."""
    for rank in range(job.workers):
        core.create_namespaced_pod("default", _plain_pod(f"{job.name}-plain-{rank}", job,
                                                         label=_PLAIN))  # fmt: skip
    pods = _wait_pods(core, _PLAIN, job.workers, phase=None)
    nodes = {p.metadata.name: p.spec.node_name for p in pods}
    core.delete_collection_namespaced_pod("default", label_selector=_PLAIN)
    _wait_pods(core, _PLAIN, 0, phase=None)
    return [nodes[f"{job.name}-plain-{rank}"] for rank in range(job.workers)]


def _wait_pods(
    core: client.CoreV1Api, selector: str, count: int, *, phase: str | None, timeout: float = 90.0
) -> list[Any]:
    """Return the pods of ``selector`` once exactly ``count`` exist, all bound (and in ``phase``
    when given); TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod("default", label_selector=selector).items
        done = [p for p in pods if p.spec.node_name and (phase is None or p.status.phase == phase)]
        if len(pods) == count and len(done) == count:
            return list(pods)
        time.sleep(0.5)
    raise TimeoutError(f"pods {selector}: expected {count} bound within {timeout:.0f}s")


def _apply(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, manifest
    )


def _job_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, name
    )
    status: dict[str, Any] = job.get("status") or {}
    return status


def _placed_nodes(
    api: client.ApiClient, name: str, console: Console, timeout: float = 120.0
) -> tuple[str, ...]:
    """Return the nodes of job ``name`` by rank once it runs (saying so while it waits)."""
    deadline = time.monotonic() + timeout
    told_waiting = False
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = _job_status(api, name)
        if status.get("phase") in {"Running", "Failed"}:
            break
        if status.get("phase") == "Waiting" and not told_waiting:
            waiting = placement_of_status(status)
            console.print(f"[yellow]{name} waits[/]: {waiting.message or None}")
            told_waiting = True
        time.sleep(0.5)
    return tuple(placement_of_status(status).nodes)


def _print_contrast(
    console: Console, job: _Job, default: PlacementFacts, ours: PlacementFacts
) -> None:
    """Print the two placements of the same job side by side, then the verdict."""
    console.rule(f"the same job twice on the same busy cluster: {job.name}")
    size = default.allreduce.message_bytes // 2**20
    table = Table(caption=f"all-reduce: the cost model's time for {size} MiB per GPU")
    for header in (f"{job.workers} workers x {job.gpus} GPUs", "plain pods, default scheduler",
                   "TensorParallelJob, tpfabric"):  # fmt: skip
        table.add_column(header, overflow="fold")
    both = (default, ours)
    table.add_row("nodes", *(compress_hostlist(list(p.nodes)) for p in both))
    table.add_row("leaf domains", *(f"{len(p.leaves)}: {', '.join(p.leaves)}" for p in both))
    table.add_row("spine domains", *(f"{len(p.spines)}: {', '.join(p.spines)}" for p in both))
    table.add_row("max switch hops", *(str(p.max_hops) for p in both))
    table.add_row(
        "all-reduce",
        *(f"{format_seconds(p.allreduce.best_s)} ({p.allreduce.algorithm})" for p in both),
    )
    console.print(table)
    did_well, sentence = verdict(default, ours)
    console.print(f"[{'yellow' if did_well else 'bold'}]{sentence}[/]")


def _show_job(
    api: client.ApiClient, name: str, node_labels: dict[str, dict[str, str]], console: Console
) -> None:
    status = _job_status(api, name)
    placement = placement_of_status(status)
    console.rule(f"TensorParallelJob {name}: {status.get('phase', '?')} {status.get('ready', '')}")
    console.print(placement.message or "no placement yet")
    for reason in placement.reasons:
        console.print(f"  - {reason.reason}")
    table = Table("rank", "node", "leaf", "spine", "rail-0 switch")
    for rank, node in enumerate(placement.nodes):
        these = node_labels.get(node, {})
        table.add_row(
            str(rank),
            node,
            these.get(labels.LEAF, "?"),
            these.get(labels.SPINE, "?"),
            these.get(labels.rail_key(0), "?"),
        )
    console.print(table)


def _draw(
    cluster: LocalCluster,
    out: Path,
    console: Console,
    name: str,
    *,
    busy: frozenset[str],
    default: PlacementFacts,
    ours: PlacementFacts,
    placed: dict[str, tuple[str, ...]],
) -> None:
    """Write ``demo-fabric`` (every job tpfabric placed) and ``demo-placement`` (job ``name``
    both ways), each as PNG and SVG."""
    from tpfabric_cli.fabric_picture import JobMarks, Panel, draw_fabric  # noqa: PLC0415
    from tpfabric_cli.topology import Sources, discover, domain_tree  # noqa: PLC0415

    tree = domain_tree(discover(Sources(cluster=True, kubeconfig=cluster.kubeconfig)))

    def caption(facts: PlacementFacts) -> str:
        return (
            f"{facts.who}: {name} on {counted(len(facts.leaves), 'leaf domain')}, "
            f"{counted(len(facts.spines), 'spine')}, {counted(facts.max_hops, 'switch hop')}, "
            f"all-reduce {format_seconds(facts.allreduce.best_s)} (modelled)"
        )

    pictures = {
        "demo-fabric": [
            Panel(
                "tpfabric: every example job on the smallest domain that fits it",
                tuple(JobMarks(job, nodes) for job, nodes in placed.items()),
                busy,
            )
        ],
        "demo-placement": [
            Panel(caption(default), (JobMarks(name, default.nodes, default_scheduler=True),), busy),
            Panel(caption(ours), (JobMarks(name, ours.nodes),), busy),
        ],
    }
    nodes = sum(len(leaf.nodes) for leaf in tree.leaf_domains)
    shared = f"{len(busy)} of {nodes} nodes busy with other tenants' pods"
    titles = {
        "demo-fabric": f"{len(placed)} TensorParallelJobs placed by tpfabric; {shared}",
        "demo-placement": f"{name}, {len(ours.nodes)} workers, placed twice; {shared}",
    }
    out.mkdir(parents=True, exist_ok=True)
    for stem, panels in pictures.items():
        for fmt in ("png", "svg"):
            draw_fabric(tree, out / f"{stem}.{fmt}", fmt, panels, title=titles[stem])
        console.print(f"picture: {out / stem}.png (and .svg)")


def _wait_default_service_account(core: client.CoreV1Api, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        accounts = core.list_namespaced_service_account("default").items
        if any(sa.metadata.name == "default" for sa in accounts):
            return
        time.sleep(0.25)
    raise TimeoutError("the default service account was not created (kube-controller-manager)")
