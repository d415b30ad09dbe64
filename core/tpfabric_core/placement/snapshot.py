"""Per-plan state beside the immutable topology: what each node has free and whether it is usable.

A :class:`CapacitySnapshot` is a few flat lists indexed like
:attr:`ClusterTopology.node_names <tpfabric_core.placement.topology.ClusterTopology>`; copying it
is O(n) list copies and allocating or releasing a plan is O(workers x resources). Resources are
in kube-scheduler units (:mod:`~tpfabric_core.placement.pod_fit`): GPUs and the RDMA devices of a
gang have their own lists (``free_gpus``, ``free_rdma``); every other resource (CPU millicores,
memory bytes, pod slots, extended resources) is one list per name in ``free_other``. A node
without an entry for a resource has none of it. ``alloc_gpus``/``alloc_rdma`` hold what each node
could ever offer (allocatable, ignoring current use); they never change after construction, so
the planner memoises what it derives from them in ``ever_cache``. Taints follow Kubernetes
semantics: ``NoSchedule`` and ``NoExecute`` keep a worker off unless tolerated,
``PreferNoSchedule`` is ignored. This module must never read labels, plan, or do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tpfabric_core.placement.results import GangPlan
    from tpfabric_core.placement.topology import ClusterTopology

__all__ = [
    "CapacitySnapshot",
    "Health",
    "NodeState",
    "Taint",
    "TaintEffect",
    "Toleration",
    "untolerated_taint",
]

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
Health = Literal["ok", "degraded"]
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (``key=value:effect``)."""

    key: str
    effect: TaintEffect = "NoSchedule"
    value: str = ""

    def __str__(self) -> str:
        """Return the taint the way kubectl prints it."""
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration; an empty key with ``Exists`` tolerates every taint."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Return whether this toleration tolerates ``taint`` (Kubernetes semantics)."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def untolerated_taint(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """Return the first NoSchedule/NoExecute taint no toleration tolerates, or ``None``."""
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class NodeState:
    """What a node has free now and whether a new worker may go there.

    ``free``: the free amount of every resource other than GPUs and the gang's RDMA devices, in
    kube-scheduler units (``{"cpu": 120000, "memory": ..., "pods": 105}``); a resource missing
    here counts as none. ``allocatable_gpus``/``allocatable_rdma``: what the node could ever
    offer; ``None`` means the same as free.
    """

    name: str
    free_gpus: int
    free_rdma: int
    ready: bool = True
    schedulable: bool = True
    taints: tuple[Taint, ...] = ()
    health: Health = "ok"
    free: Mapping[str, int] = field(default_factory=dict, hash=False)
    allocatable_gpus: int | None = None
    allocatable_rdma: int | None = None


class CapacitySnapshot:
    """Free capacity and usability of every node of one topology, for one planning cycle.

    Nodes of the topology missing from the states are treated as not ready (nothing is known);
    states of nodes unknown to the topology are ignored.
    """

    __slots__ = (
        "alloc_gpus",
        "alloc_rdma",
        "degraded",
        "ever_cache",
        "free_gpus",
        "free_other",
        "free_rdma",
        "ready",
        "schedulable",
        "taints",
        "topology",
        "version",
    )

    def __init__(
        self,
        topology: ClusterTopology,
        *,
        free_gpus: list[int],
        free_rdma: list[int],
        ready: list[bool],
        schedulable: list[bool],
        degraded: list[bool],
        taints: dict[int, tuple[Taint, ...]],
        free_other: dict[str, list[int]] | None = None,
        alloc_gpus: list[int] | None = None,
        alloc_rdma: list[int] | None = None,
    ) -> None:
        self.topology = topology
        self.free_gpus = free_gpus
        self.free_rdma = free_rdma
        self.ready = ready
        self.schedulable = schedulable
        self.degraded = degraded
        self.taints = taints
        self.free_other: dict[str, list[int]] = free_other if free_other is not None else {}
        self.alloc_gpus = alloc_gpus if alloc_gpus is not None else free_gpus.copy()
        self.alloc_rdma = alloc_rdma if alloc_rdma is not None else free_rdma.copy()
        #: (gpus, rdma, workers per TP group, eligible nodes) -> per depth the most workers one
        #: domain could ever hold; filled by the planner, valid while the alloc lists stand
        #: per request shape (GPUs, RDMA, TP quantum, eligible nodes, workers per node): per depth,
        #: per domain, the workers it could ever hold
        self.ever_cache: dict[
            tuple[int, int, int, frozenset[str] | None, int | None], list[list[int]]
        ] = {}
        #: bumped by every change of free capacity made through its methods (allocate, take,
        #: give back, release): what was computed on it at one version holds while it stands
        self.version = 0

    @classmethod
    def from_node_states(
        cls, topology: ClusterTopology, states: Iterable[NodeState]
    ) -> CapacitySnapshot:
        """Return the snapshot of ``states`` laid out on ``topology``'s node order."""
        n = len(topology)
        snapshot = cls(
            topology,
            free_gpus=[0] * n,
            free_rdma=[0] * n,
            ready=[False] * n,
            schedulable=[True] * n,
            degraded=[False] * n,
            taints={},
            alloc_gpus=[0] * n,
            alloc_rdma=[0] * n,
        )
        for state in states:
            snapshot.put_state(state)
        return snapshot

    def copy(self) -> CapacitySnapshot:
        """Return an independent copy (O(n x resources))."""
        return CapacitySnapshot(
            self.topology,
            free_gpus=self.free_gpus.copy(),
            free_rdma=self.free_rdma.copy(),
            ready=self.ready.copy(),
            schedulable=self.schedulable.copy(),
            degraded=self.degraded.copy(),
            taints=dict(self.taints),
            free_other={name: amounts.copy() for name, amounts in self.free_other.items()},
            alloc_gpus=self.alloc_gpus.copy(),
            alloc_rdma=self.alloc_rdma.copy(),
        )

    def put_state(self, state: NodeState) -> None:
        """Write ``state`` as its node's (skipped when the topology does not know the node)."""
        i = self.topology.index_of.get(state.name)
        if i is None:
            return
        self.version += 1
        self.free_gpus[i] = state.free_gpus
        self.free_rdma[i] = state.free_rdma
        alloc_gpus = state.free_gpus if state.allocatable_gpus is None else state.allocatable_gpus
        alloc_rdma = state.free_rdma if state.allocatable_rdma is None else state.allocatable_rdma
        if (self.alloc_gpus[i], self.alloc_rdma[i]) != (alloc_gpus, alloc_rdma):
            self.alloc_gpus[i], self.alloc_rdma[i] = alloc_gpus, alloc_rdma
            self.ever_cache.clear()
        self.ready[i] = state.ready
        self.schedulable[i] = state.schedulable
        self.degraded[i] = state.health == "degraded"
        if state.taints:
            self.taints[i] = state.taints
        else:
            self.taints.pop(i, None)
        for resource, per_node in self.free_other.items():
            if resource not in state.free:
                per_node[i] = 0
        for resource, amount in state.free.items():
            self.free_of(resource)[i] = amount

    def node_state(self, name: str) -> NodeState:
        """Return the state of node ``name`` as a :class:`NodeState`."""
        i = self.topology.index_of[name]
        return NodeState(
            name=name,
            free_gpus=self.free_gpus[i],
            free_rdma=self.free_rdma[i],
            ready=self.ready[i],
            schedulable=self.schedulable[i],
            taints=self.taints.get(i, ()),
            health="degraded" if self.degraded[i] else "ok",
            free={resource: amounts[i] for resource, amounts in self.free_other.items()},
            allocatable_gpus=self.alloc_gpus[i],
            allocatable_rdma=self.alloc_rdma[i],
        )

    def free_of(self, resource: str) -> list[int]:
        """Return the per-node free amounts of ``resource`` (created as zeros if unknown)."""
        amounts = self.free_other.get(resource)
        if amounts is None:
            amounts = self.free_other[resource] = [0] * len(self.topology)
        return amounts

    def allocate(self, plan: GangPlan) -> None:
        """Take every resource of every rank of ``plan``; ValueError on overcommit (then nothing).

        GPUs and RDMA devices come from the plan's per-worker counts, every other resource from
        ``plan.other_resources``.
        """
        index_of = self.topology.index_of
        others = [(self.free_of(name), amount) for name, amount in plan.other_resources]
        self.version += 1
        for rank, name in enumerate(plan.nodes_by_rank):
            i = index_of[name]
            self.free_gpus[i] -= plan.gpus_per_worker
            self.free_rdma[i] -= plan.rdma_per_worker
            short = self.free_gpus[i] < 0 or self.free_rdma[i] < 0
            for amounts, amount in others:
                amounts[i] -= amount
                short = short or amounts[i] < 0
            if short:
                self._give_back(plan, plan.nodes_by_rank[: rank + 1])
                raise ValueError(f"plan {plan.job!r} overcommits node {name!r}")

    def give_back(self, node: str, demand: Mapping[str, int], gpus: str) -> None:
        """Add one worker's ``demand`` (resource name -> amount; ``gpus`` names the resource
        counted in ``free_gpus``) back to ``node``. A node outside the topology, or a resource the
        snapshot does not track, is skipped."""
        self._add(node, demand, gpus, +1)

    def take(self, node: str, demand: Mapping[str, int], gpus: str) -> None:
        """Take one worker's ``demand`` on ``node`` (see :meth:`give_back`); unlike
        :meth:`allocate` it may overcommit the node, which then holds no reservation whole."""
        self._add(node, demand, gpus, -1)

    def _add(self, node: str, demand: Mapping[str, int], gpus: str, sign: int) -> None:
        i = self.topology.index_of.get(node)
        if i is None:
            return
        self.version += 1
        for resource, amount in demand.items():
            if resource == gpus:
                self.free_gpus[i] += sign * amount
            elif resource in self.free_other:
                self.free_other[resource][i] += sign * amount

    def release(self, plan: GangPlan) -> None:
        """Give back what :meth:`allocate` took for ``plan``."""
        self._give_back(plan, plan.nodes_by_rank)

    def _give_back(self, plan: GangPlan, nodes: Sequence[str]) -> None:
        """Return nothing; add one worker's resources back per entry of ``nodes``."""
        index_of = self.topology.index_of
        others = [(self.free_of(name), amount) for name, amount in plan.other_resources]
        self.version += 1
        for name in nodes:
            i = index_of[name]
            self.free_gpus[i] += plan.gpus_per_worker
            self.free_rdma[i] += plan.rdma_per_worker
            for amounts, amount in others:
                amounts[i] += amount
