"""The gang webhook's view of the nodes: what each offers a pod, kept by a list+watch.

The webhook gives a gang pod that names no RDMA devices what the nodes that could hold it offer
(:mod:`tpfabric_core.rdma_default`). It answers in milliseconds and never lists the cluster per
admission: a thread keeps every node's :class:`~tpfabric_core.rdma_default.NodeOffer` (its labels
and allocatable extended resources) from one list and a watch, as the operator's pod cache does
(:class:`tpfabric_operator.pod_watch.PodWatch`). A node's status changes often (heartbeats,
conditions) while what it offers rarely does: the view's ``generation`` moves only when an offer
changes, and :meth:`NodeOffers.remember` keeps a decision per generation, so a burst of pods of one
shape costs one pass over the nodes.

A node object that cannot be read is left out (and logged once), never fatal to the watch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes import client

from tpfabric_core.rdma_default import NodeOffer
from tpfabric_operator.pod_watch import PodWatch

__all__ = ["NodeOffers"]

log = logging.getLogger("tpfabric.webhook")
T = TypeVar("T")
#: decisions kept per generation of the view (pod shapes: GPUs x node selector x affinity)
MEMO_LIMIT = 256


class NodeOffers(PodWatch):
    """What every node offers, current within a watch event; start it, then wait on
    :attr:`synced` before the first admission."""

    def __init__(self, core: client.CoreV1Api) -> None:
        super().__init__(core, "", "node-offers")
        self._lock = threading.Lock()
        self._offers: dict[str, NodeOffer] = {}
        self._snapshot: tuple[NodeOffer, ...] = ()
        self._memo: dict[Any, Any] = {}
        self.generation = 0

    def offers(self) -> tuple[NodeOffer, ...]:
        """Return every node's offer (a snapshot: the same tuple until an offer changes)."""
        with self._lock:
            return self._snapshot

    def remember(self, key: Any, compute: Callable[[tuple[NodeOffer, ...]], T]) -> T:
        """Return ``compute(offers)`` for ``key``, computed once per generation of the view."""
        with self._lock:
            generation, snapshot = self.generation, self._snapshot
            if key in self._memo:
                value: T = self._memo[key]
                return value
        value = compute(snapshot)
        with self._lock:
            if self.generation == generation:
                if len(self._memo) >= MEMO_LIMIT:
                    self._memo.clear()
                self._memo[key] = value
        return value

    # -- keeping it current -----------------------------------------------------------------------

    def _call(self, **kwargs: Any) -> Any:
        return self.core.list_node(**kwargs)

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, NodeOffer | None]:
        offer = NodeOffer.from_node(obj)
        if offer is None:
            log.warning("a node object without a name is left out of the webhook's view")
            return "", None
        return offer.name, offer

    def _changed(self) -> None:
        """Take a new snapshot and forget the decisions of the old one (lock held)."""
        self._snapshot = tuple(self._offers.values())
        self._memo = {}
        self.generation += 1

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        with self._lock:
            self._offers = {name: offer for name, offer in entries if offer is not None}
            self._changed()

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        name = str(((obj or {}).get("metadata") or {}).get("name") or key.rsplit("/", 1)[-1])
        offer = NodeOffer.from_node(obj) if obj is not None else None
        with self._lock:
            if self._offers.get(name) == offer:
                return  # a heartbeat, a condition: nothing a pod is offered changed
            if offer is None:
                self._offers.pop(name, None)
            else:
                self._offers[name] = offer
            self._changed()
