"""What one gang asks the placement engine for: workers, GPUs, parallelism and topology policy.

The engine's own small input model, deliberately decoupled from the TensorParallelJob API models:
an adapter maps a job's spec onto a :class:`GangRequest`. Validation here raises
:class:`~tpfabric_core.errors.InputError` with the field path and the fix. This module must never
import the API models or know about Kubernetes objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tpfabric_core.errors import InputError
from tpfabric_core.placement.snapshot import Toleration

__all__ = ["DegradedPolicy", "GangRequest", "PolicyMode", "TopologyPolicy"]

PolicyMode = Literal["required", "preferred"]
DegradedPolicy = Literal["avoid", "penalize", "ignore"]


@dataclass(frozen=True, slots=True)
class TopologyPolicy:
    """Where the gang may go.

    - ``level``: a level name the topology is configured with (by default ``block``, ``spine``,
      ``leaf``; ``cluster`` is the implicit root); an unknown name is an InputError when planning.
    - ``mode="required"``: every worker inside one domain of ``level``, else wait.
    - ``mode="preferred"``: the smallest domain that fits, up to ``level``; past it, climb one
      more level per ``max_wait_seconds`` waited (like Slurm's ``--switches=N@time``), up to the
      whole cluster (spread) as a last resort. ``max_wait_seconds=None`` climbs at once.
    - ``rail_aligned``: nodes whose rail cabling disagrees with their leaf's rail leaves count as
      degraded (their rail traffic would leave the shared rail leaves).
    - ``avoid_degraded``: ``avoid`` never uses degraded nodes; ``penalize`` uses them only when
      that is cheaper in the cost model than the best healthy placement; ``ignore`` treats them
      as healthy.
    """

    mode: PolicyMode = "preferred"
    level: str = "leaf"
    rail_aligned: bool = True
    avoid_degraded: DegradedPolicy = "penalize"
    max_wait_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("required", "preferred"):
            raise InputError("topologyPolicy.mode", f"{self.mode!r} is not a mode", _MODE_FIX)
        if self.avoid_degraded not in ("avoid", "penalize", "ignore"):
            raise InputError(
                "topologyPolicy.avoidDegraded",
                f"{self.avoid_degraded!r} is not a degraded-node policy",
                "use avoid, penalize or ignore",
            )
        if self.max_wait_seconds is not None and self.max_wait_seconds < 0:
            raise InputError(
                "topologyPolicy.maxWaitSeconds",
                f"must be >= 0, got {self.max_wait_seconds}",
                "omit it to relax at once",
            )


_MODE_FIX = "use required or preferred"


@dataclass(frozen=True, slots=True)
class GangRequest:
    """One gang of ``workers`` identical workers to place all together or not at all.

    World size is ``workers * gpus_per_worker`` GPUs; it must be a multiple of
    ``tp_size * pp_size`` (the rest is data parallelism). A tensor-parallel group is either inside
    one worker (``tp_size`` divides ``gpus_per_worker``) or whole workers
    (``gpus_per_worker`` divides ``tp_size``).

    ``other_resources``: what one worker needs of every resource other than GPUs and the RDMA
    devices counted by ``rdma_per_worker`` (kube-scheduler units, e.g. ``("cpu", 16000)``,
    ``("memory", 64 * 2**30)``, ``("pods", 1)``; see
    :func:`~tpfabric_core.placement.pod_fit.pod_requests`). ``eligible_nodes``: the only nodes a
    worker may go to (what the pod's node selector and required node affinity allow, see
    :func:`~tpfabric_core.placement.pod_fit.node_matcher`); ``None`` allows every node.
    ``max_workers_per_node``: at most this many workers on one node (1: the pod asks for a host
    port, or its required pod anti-affinity keeps the gang's workers off each other's node);
    ``None``: as many as the node's resources allow. ``refused_nodes``: nodes kube-scheduler's
    own filters refused for this gang's workers lately (pod affinity, volumes, ports...): not
    planned now, but they still count for what the gang could ever use (refusals expire).
    ``previous_nodes``: the nodes the gang's last plan had (a group its owner made again, a plan
    dropped): among the domains of the smallest level that fits, the one holding most of them
    wins, and inside it those nodes are filled first, so a restarted gang returns where it ran
    (its warm caches, its neighbours) whenever that is as good as any other choice.
    """

    name: str
    workers: int
    gpus_per_worker: int = 8
    rdma_per_worker: int = 8
    tp_size: int = 8
    pp_size: int = 1
    tolerations: tuple[Toleration, ...] = ()
    policy: TopologyPolicy = field(default_factory=TopologyPolicy)
    other_resources: tuple[tuple[str, int], ...] = ()
    eligible_nodes: frozenset[str] | None = None
    max_workers_per_node: int | None = None
    refused_nodes: frozenset[str] = frozenset()
    previous_nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for where, value, low in (
            ("workers", self.workers, 1),
            ("gpusPerWorker", self.gpus_per_worker, 1),
            ("rdmaPerWorker", self.rdma_per_worker, 0),
            ("tensorParallelSize", self.tp_size, 1),
            ("pipelineParallelSize", self.pp_size, 1),
        ):
            if value < low:
                raise InputError(where, f"must be >= {low}, got {value}")
        seen: set[str] = set()
        for resource, amount in self.other_resources:
            if not resource or resource in seen:
                raise InputError("resources", f"resource name {resource!r} is empty or given twice")
            seen.add(resource)
            if amount < 0:
                raise InputError(
                    f"resources.{resource}",
                    f"must be >= 0, got {amount}",
                    "request a positive amount",
                )
        world = self.workers * self.gpus_per_worker
        if world % (self.tp_size * self.pp_size):
            raise InputError(
                "tensorParallelSize",
                f"tensorParallelSize x pipelineParallelSize = {self.tp_size * self.pp_size} does "
                f"not divide the world size workers x gpusPerWorker = {world}",
                "pick sizes whose product divides the world size",
            )
        if self.gpus_per_worker % self.tp_size and self.tp_size % self.gpus_per_worker:
            raise InputError(
                "tensorParallelSize",
                f"a tensor-parallel group of {self.tp_size} GPUs neither fits in one worker nor "
                f"spans whole workers of {self.gpus_per_worker} GPUs",
                "make one a multiple of the other",
            )

    @property
    def workers_per_tp_group(self) -> int:
        """Return how many whole workers one tensor-parallel group spans (1 when inside one)."""
        return max(1, self.tp_size // self.gpus_per_worker)

    @property
    def workers_per_stage(self) -> int:
        """Return how many workers one pipeline stage holds (ranks ``[s*k, (s+1)*k)``)."""
        return max(1, self.workers // self.pp_size)
