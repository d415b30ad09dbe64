"""Re-evaluate only what a change can help: freed capacity plans a waiting gang again only where
it could let the gang fit.

A waiting gang is planned again when its own pods changed, its wait crossed a level (the next
topology level opens, it reaches the head of the line), a hold was in its way or is its own
(:mod:`.waiting`, :mod:`.holds`), or capacity was freed that could matter to it: on a node it
may use, with at least one worker's GPUs free there now, in a domain of the highest level it may
use now whose free GPUs could hold all its workers. The store logs the nodes each free names
(:mod:`tpfabric_scheduler.freed`); a change that may free anywhere (a node came, went or was
relabelled, a relist) plans every waiting gang again. Free GPUs are an upper bound of what fits
(other resources, reservations in a view, cordons only take away), so a gang that could fit is
never left waiting; on a busy fabric a single finished worker no longer re-plans the whole queue.
Pure: reads a view or the cycle's snapshot, writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import Attempt, PlacementWork

__all__ = ["PLAN_AGAIN", "Freed"]


class Freed:
    """The capacity freed up to one ``generation`` of the store, and the GPUs free now (per node
    index of ``topology``), to tell whether it could help a waiting gang (memoised per domain:
    one object per cycle phase)."""

    def __init__(
        self,
        generation: int,
        since: Callable[[int], frozenset[str] | None],
        topology: ClusterTopology | None = None,
        free_gpus: Callable[[int], int] = lambda i: 0,
        version: Callable[[], int] = lambda: 0,
    ) -> None:
        #: the store's ``freed_generation`` this object reads up to (recorded by an attempt)
        self.generation = generation
        self._since = since
        self._topology = topology
        self._free_gpus = free_gpus
        #: the version of the free GPUs read (what is remembered holds while it stands)
        self._version = version
        self._rooms: dict[tuple[object, ...], int] = {}
        self._answers: dict[tuple[object, ...], bool] = {}

    @classmethod
    def anywhere(cls, generation: int) -> Freed:
        """Return a generation whose every earlier free may have been anywhere (what a gang
        that has not waited since, or a caller without the log, reads)."""
        return cls(generation, lambda since: frozenset() if since >= generation else None)

    @classmethod
    def of_view(cls, view: ClusterStore, topology: ClusterTopology) -> Freed:
        """Return what ``view`` says was freed, with its nodes' GPUs not used by bound pods
        (reservations not taken off: an upper bound, read before the cycle's snapshot)."""
        names, nodes, used = topology.node_names, view.nodes, view.used

        def free_gpus(i: int) -> int:
            node = nodes.get(names[i])
            if node is None:
                return 0
            return node.allocatable.get(GPU_RESOURCE, 0) - used.get(names[i], {}).get(
                GPU_RESOURCE, 0
            )

        return cls(view.freed_generation, view.freed.view().since, topology, free_gpus)

    def on(self, snapshot: CapacitySnapshot) -> Freed:
        """Return the same frees read against ``snapshot``'s free GPUs (the cycle's, which
        loses what each plan of the cycle takes)."""
        free = snapshot.free_gpus
        return Freed(
            self.generation,
            self._since,
            snapshot.topology,
            free.__getitem__,
            lambda: snapshot.version,
        )

    def could_help(self, attempt: Attempt, item: PlacementWork) -> bool:
        """Return whether capacity freed since ``attempt`` could let ``item``'s gang fit now
        (remembered per shape of gang and attempt: a deep queue asks it for many alike)."""
        key = (
            self._version(),
            attempt.freed_generation,
            attempt.depth,
            attempt.workers,
            attempt.gpus_per_worker,
            item.eligible,
            item.refused,
        )
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = self._could_help(attempt, item)
        return answer

    def _could_help(self, attempt: Attempt, item: PlacementWork) -> bool:
        nodes = self._since(attempt.freed_generation)
        if nodes is None:
            return True
        topology = self._topology
        if not nodes:
            return False
        if topology is None or attempt.depth is None or attempt.depth >= len(topology.domains):
            return True  # nothing to weigh the frees with: plan it again
        gpus = attempt.gpus_per_worker
        for node in nodes:
            i = topology.index_of.get(node)
            if i is None or not _usable(node, item.eligible, item.refused):
                continue
            if gpus <= 0:
                return True
            if self._free_gpus(i) < gpus:
                continue  # not one worker's GPUs here
            domain = topology.node_domain[attempt.depth][i]
            if self._room(attempt.depth, domain, gpus, item) >= attempt.workers:
                return True
        return False

    def _room(self, depth: int, domain: int, gpus: int, item: PlacementWork) -> int:
        """Return how many workers of ``gpus`` GPUs the free GPUs of ``domain`` could hold."""
        key = (self._version(), depth, domain, gpus, item.eligible, item.refused)
        room = self._rooms.get(key)
        if room is None:
            assert self._topology is not None
            span = self._topology.domains[depth][domain]
            names = self._topology.node_names
            room = sum(
                max(0, self._free_gpus(i)) // gpus
                for i in range(span.start, span.end)
                if _usable(names[i], item.eligible, item.refused)
            )
            self._rooms[key] = room
        return room


#: capacity that may have been freed anywhere since any attempt: plan the gang whatever its last
#: attempt saw
PLAN_AGAIN = Freed(-1, lambda since: None)


def _usable(node: str, eligible: frozenset[str] | None, refused: Container[str]) -> bool:
    return (eligible is None or node in eligible) and node not in refused
