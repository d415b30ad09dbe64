"""Per-plan state beside the immutable topology: what each node has free and whether it is usable.

A :class:`CapacitySnapshot` is a few flat lists indexed like
:attr:`ClusterTopology.node_names <tpfabric_core.placement.topology.ClusterTopology>`; copying it
is O(n) list copies and allocating or releasing a plan is O(workers). Taints follow Kubernetes
semantics: ``NoSchedule`` and ``NoExecute`` keep a worker off unless tolerated,
``PreferNoSchedule`` is ignored. This module must never read labels, plan, or do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    """What a node has free now and whether a new worker may go there."""

    name: str
    free_gpus: int
    free_rdma: int
    ready: bool = True
    schedulable: bool = True
    taints: tuple[Taint, ...] = ()
    health: Health = "ok"


class CapacitySnapshot:
    """Free capacity and usability of every node of one topology, for one planning cycle.

    Nodes of the topology missing from the states are treated as not ready (nothing is known);
    states of nodes unknown to the topology are ignored.
    """

    __slots__ = (
        "degraded",
        "free_gpus",
        "free_rdma",
        "ready",
        "schedulable",
        "taints",
        "topology",
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
    ) -> None:
        self.topology = topology
        self.free_gpus = free_gpus
        self.free_rdma = free_rdma
        self.ready = ready
        self.schedulable = schedulable
        self.degraded = degraded
        self.taints = taints

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
        )
        index_of = topology.index_of
        for state in states:
            i = index_of.get(state.name)
            if i is None:
                continue
            snapshot.free_gpus[i] = state.free_gpus
            snapshot.free_rdma[i] = state.free_rdma
            snapshot.ready[i] = state.ready
            snapshot.schedulable[i] = state.schedulable
            snapshot.degraded[i] = state.health == "degraded"
            if state.taints:
                snapshot.taints[i] = state.taints
        return snapshot

    def copy(self) -> CapacitySnapshot:
        """Return an independent copy (O(n))."""
        return CapacitySnapshot(
            self.topology,
            free_gpus=self.free_gpus.copy(),
            free_rdma=self.free_rdma.copy(),
            ready=self.ready.copy(),
            schedulable=self.schedulable.copy(),
            degraded=self.degraded.copy(),
            taints=dict(self.taints),
        )

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
        )

    def allocate(self, plan: GangPlan) -> None:
        """Take the GPUs and RDMA devices of every rank of ``plan``; ValueError on overcommit."""
        index_of = self.topology.index_of
        for rank, name in enumerate(plan.nodes_by_rank):
            i = index_of[name]
            self.free_gpus[i] -= plan.gpus_per_worker
            self.free_rdma[i] -= plan.rdma_per_worker
            if self.free_gpus[i] < 0 or self.free_rdma[i] < 0:
                self._give_back(plan, plan.nodes_by_rank[: rank + 1])
                raise ValueError(f"plan {plan.job!r} overcommits node {name!r}")

    def release(self, plan: GangPlan) -> None:
        """Give back what :meth:`allocate` took for ``plan``."""
        self._give_back(plan, plan.nodes_by_rank)

    def _give_back(self, plan: GangPlan, nodes: Sequence[str]) -> None:
        """Return nothing; add one worker's GPUs and RDMA devices back per entry of ``nodes``."""
        index_of = self.topology.index_of
        for name in nodes:
            i = index_of[name]
            self.free_gpus[i] += plan.gpus_per_worker
            self.free_rdma[i] += plan.rdma_per_worker
