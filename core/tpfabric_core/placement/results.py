"""What the placement engine answers: a whole plan, or exactly why there is none yet.

Plain frozen data, ready to be persisted in a job's status by an adapter. A plan is always whole
(every rank has a node); there is no partial answer. This module must never compute placements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CollectiveCost",
    "DomainShortfall",
    "GangPlan",
    "PlacementResult",
    "ReplacementOption",
    "ReplacementOptions",
    "ShortfallKind",
    "ShortfallReason",
    "Unschedulable",
]


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    """A *modelled* all-reduce time for one placement (scoring and explanation, not measured)."""

    ring_s: float
    tree_s: float
    message_bytes: int

    @property
    def best_s(self) -> float:
        """Return the faster of the two algorithms' modelled times (NCCL picks per size)."""
        return min(self.ring_s, self.tree_s)

    @property
    def algorithm(self) -> str:
        """Return ``ring`` or ``tree``, whichever the model finds faster."""
        return "ring" if self.ring_s <= self.tree_s else "tree"


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Where every rank of a gang goes.

    ``level``/``domain`` name the smallest domain holding every rank (``domain_path`` from the
    top level down; ``domain_labels`` the (label key, value) of every level from the top down to
    ``level``, empty for a cluster-wide plan: select on all of them to hit exactly this domain,
    since names repeat under different parents; a node outside the labelled fabric may carry
    the upper of these labels but lacks some level's label, so a selector that must exclude it
    also requires every configured level key to exist). ``hops`` is the most switch hops between two
    ranks on the same rail: 0 on one node (NVLink), 1 under one rail leaf, 3 across a spine,
    ``2*depth+1`` in general. ``other_resources`` is what each worker takes besides GPUs and RDMA
    devices (what :meth:`CapacitySnapshot.allocate` subtracts).
    """

    job: str
    policy: str
    level: str
    domain: str
    domain_path: tuple[str, ...]
    nodes_by_rank: tuple[str, ...]
    gpus_per_worker: int
    rdma_per_worker: int
    hops: int
    leaves_spanned: int
    cost: CollectiveCost
    degraded_nodes: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    domain_labels: tuple[tuple[str, str], ...] = ()
    other_resources: tuple[tuple[str, int], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """Return the distinct nodes of the plan, in rank order of first use."""
        return tuple(dict.fromkeys(self.nodes_by_rank))

    def explain(self) -> str:
        """Return the plan and its reasons as readable lines."""
        head = (
            f"{self.job}: {len(self.nodes_by_rank)} workers in {self.level} {self.domain!r}, "
            f"{self.hops} hops, {self.leaves_spanned} leaf domain(s), modelled all-reduce "
            f"{self.cost.best_s * 1e3:.3f} ms ({self.cost.algorithm})"
        )
        return "\n".join([head, *(f"  - {reason}" for reason in self.reasons)])


ShortfallKind = Literal[
    "capacity",
    "health",
    "rail",
    "taint",
    "selector",
    "refused",
    "not_ready",
    "cordoned",
    "wait",
    "level",
]
"""Why nodes add nothing to a domain: ``selector`` = the pod's nodeSelector/affinity excludes
them, ``refused`` = kube-scheduler's own filters refused them for this gang lately,
``capacity`` = some demanded resource is short (the detail names which)."""


@dataclass(frozen=True, slots=True)
class ShortfallReason:
    """One cause of a domain's shortfall: ``nodes`` nodes excluded or short, and how."""

    kind: ShortfallKind
    nodes: int
    detail: str

    def __str__(self) -> str:
        """Return the reason as ``<nodes> <detail>``."""
        return f"{self.nodes} {self.detail}" if self.nodes else self.detail


@dataclass(frozen=True, slots=True)
class DomainShortfall:
    """A candidate domain that cannot hold the gang: how many workers fit, and why not more."""

    level: str
    domain: str
    workers_fit: int
    workers_needed: int
    reasons: tuple[ShortfallReason, ...]
    #: how many workers the domain could ever hold (allocatable capacity of the nodes the pod
    #: may use, current use ignored); None when not known
    workers_ever: int | None = None
    #: the domain's path from the top level down (names repeat under different parents)
    path: tuple[str, ...] = ()

    @property
    def could_ever_fit(self) -> bool:
        """Return whether the domain could hold the gang once running work ends."""
        return self.workers_ever is not None and self.workers_ever >= self.workers_needed

    def __str__(self) -> str:
        """Return one line such as ``leaf 'l1': 6/8 workers fit (2 nodes cordoned)``."""
        why = "; ".join(str(r) for r in self.reasons) or "no free capacity"
        return (
            f"{self.level} {self.domain!r}: {self.workers_fit}/{self.workers_needed} "
            f"workers fit ({why})"
        )


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No whole plan exists now; ``candidates`` say per domain what is missing, best first.

    ``summary`` depends only on the inputs, never on the clock between two relaxation steps, so
    an adapter can write it only when it changes. ``relax_after_seconds``: after this many
    seconds of waiting in total (counted from when the gang started waiting) the policy opens
    the next level, so re-plan then; ``None`` when no relaxation is pending. ``outside_nodes``:
    nodes left out because they are outside the labelled fabric (0 at the cluster level, where
    they count).
    """

    job: str
    policy: str
    level: str
    candidates: tuple[DomainShortfall, ...]
    summary: str
    relax_after_seconds: float | None = None
    outside_nodes: int = 0
    #: no domain the policy will ever allow can hold the gang (more workers than the cluster,
    #: a required level none of whose domains is big enough, a selector that matches too few
    #: nodes): waiting changes nothing, and such a gang holds no domain for itself
    never: bool = False

    def top_candidates(self, n: int) -> tuple[tuple[DomainShortfall, ...], int]:
        """Return the ``n`` best candidate domains and how many more there are."""
        shown = self.candidates[: max(0, n)]
        return shown, len(self.candidates) - len(shown)

    def explain(self, limit: int = 10) -> str:
        """Return the summary and one line per candidate domain (at most ``limit``)."""
        shown, more = self.top_candidates(limit)
        lines = [self.summary, *(f"  - {c}" for c in shown)]
        if more:
            lines.append(f"  - and {more} more domain(s)")
        return "\n".join(lines)


PlacementResult = GangPlan | Unschedulable


@dataclass(frozen=True, slots=True)
class ReplacementOption:
    """A node one failed worker could move to, and what the gang would look like then."""

    node: str
    level: str
    domain: str
    hops: int
    modelled_s: float
    within_required_level: bool


@dataclass(frozen=True, slots=True)
class ReplacementOptions:
    """No node in the plan's domain can take the failed rank; these are the nearest elsewhere."""

    job: str
    rank: int
    failed_node: str
    level: str
    domain: str
    options: tuple[ReplacementOption, ...]
    summary: str
