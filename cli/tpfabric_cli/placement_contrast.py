"""The demo's contrast, computed without a cluster: who is busy before the jobs arrive, and what a
placement costs the job.

- :func:`background_load` picks a seeded share of busy nodes, as on any shared cluster, such that
  the demo's jobs still fit somewhere (the same seed gives the same nodes on every run);
- :func:`placement_facts` says what a placement spans (leaf and spine domains), its worst switch
  hop count on the ring and its modelled all-reduce time, from ``tpfabric_core``'s cost *model*
  (never a measurement);
- :func:`verdict` says in one sentence what tpfabric changed, and says so plainly when the default
  scheduler happened to do as well.

Pure: node labels and node names in, data out; :mod:`tpfabric_cli.demo` runs the cluster.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tpfabric_core.placement.cost import edge_hops, modelled_allreduce
from tpfabric_core.placement.results import CollectiveCost
from tpfabric_core.placement.topology import ClusterTopology

__all__ = [
    "PlacementFacts",
    "background_load",
    "counted",
    "format_seconds",
    "placement_facts",
    "verdict",
]

#: Within this factor of tpfabric's modelled time, the default scheduler "did as well".
_AS_WELL = 1.05


@dataclass(frozen=True, slots=True)
class PlacementFacts:
    """Where one job's workers run (rank order) and what that costs it, by the cost model."""

    who: str
    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    """Leaf domains spanned, in rank order of first use."""
    spines: tuple[str, ...]
    max_hops: int
    """Switch hops of the worst ring edge (1: one leaf, 3: across a spine, 5: across a block)."""
    allreduce: CollectiveCost


def placement_facts(
    who: str, nodes: Sequence[str], topology: ClusterTopology, gpus_per_worker: int
) -> PlacementFacts:
    """Return what the placement of workers on ``nodes`` (rank order) spans and costs."""
    index = [topology.index_of[node] for node in nodes]
    ring = zip(index, index[1:] + index[:1], strict=True)
    leaves = [topology.leaf_of(node) for node in nodes]
    spines = [topology.domain_of(node, "spine") for node in nodes]
    return PlacementFacts(
        who=who,
        nodes=tuple(nodes),
        leaves=tuple(dict.fromkeys(leaf.name for leaf in leaves)),
        spines=tuple(dict.fromkeys(spine.name for spine in spines)),
        max_hops=max((edge_hops(topology, a, b) for a, b in ring), default=0),
        allreduce=modelled_allreduce(topology, list(nodes), gpus_per_worker),
    )


def background_load(
    topology: ClusterTopology,
    *,
    share: float,
    seed: int,
    free_in_a_leaf: int,
    free_in_a_spine: int,
    tries: int = 1000,
) -> frozenset[str]:
    """Return ``share`` of the nodes as busy, drawn with ``seed``; drawn again (same random
    stream) until some leaf domain keeps ``free_in_a_leaf`` free nodes and some spine domain
    ``free_in_a_spine``, so that the demo's jobs fit. ValueError if no draw in ``tries`` does."""
    rng = random.Random(seed)  # noqa: S311 - a repeatable demo, not a secret
    names = sorted(topology.node_names)
    count = round(share * len(names))
    for _ in range(tries):
        busy = frozenset(rng.sample(names, count))
        free = [name for name in names if name not in busy]
        per_leaf = Counter(topology.leaf_of(name).path for name in free)
        per_spine = Counter(topology.domain_of(name, "spine").path for name in free)
        if (
            max(per_leaf.values(), default=0) >= free_in_a_leaf
            and max(per_spine.values(), default=0) >= free_in_a_spine
        ):
            return busy
    raise ValueError(
        f"no draw of {count} busy nodes out of {len(names)} leaves {free_in_a_leaf} free in a "
        f"leaf and {free_in_a_spine} in a spine: lower the share"
    )


def counted(count: int, noun: str) -> str:
    """Return e.g. ``1 spine`` or ``2 spines``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def format_seconds(seconds: float) -> str:
    """Return ``seconds`` in µs below a millisecond, else in ms (three significant digits)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    return f"{seconds * 1e3:.3g} ms"


def verdict(default: PlacementFacts, ours: PlacementFacts) -> tuple[bool, str]:
    """Return (whether the default scheduler did as well, one sentence saying what changed)."""
    slower = default.allreduce.best_s / ours.allreduce.best_s
    workers = len(default.nodes)
    if len(default.leaves) == 1 or slower <= _AS_WELL:
        where = "one leaf domain" if len(default.leaves) == 1 else "an equally good spread"
        return True, (
            f"The default scheduler happened to do well this time: its {workers} pods landed on "
            f"{where} by chance (it does not read the fabric; with other tenants' load it "
            "rarely does — try another --seed)."
        )
    return False, (
        f"Under the default scheduler the same {workers} workers span "
        f"{len(default.leaves)} leaf domains over {counted(len(default.spines), 'spine')}: ring "
        "edges of "
        f"{default.max_hops} switch hops instead of {ours.max_hops}, and an all-reduce modelled "
        f"{slower:.1f}x slower ({format_seconds(default.allreduce.best_s)} vs "
        f"{format_seconds(ours.allreduce.best_s)} per {default.allreduce.message_bytes // 2**20} "
        "MiB per GPU)."
    )
