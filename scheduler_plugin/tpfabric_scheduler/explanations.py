"""Explanations that cost once: why a gang waits is worked out once per shape of request and
state of capacity, and shared by every gang of that shape.

Most of a waiting gang's plan attempt is its explanation (per candidate domain, what is missing:
on a fabric of thousands of leaves, thousands of domains), and a deep queue holds many gangs of
one shape (the same workers, GPUs, level, selectors). The engine's answer depends only on the
request, the snapshot and how long the gang waited in steps of its policy's ``maxWaitSeconds``;
so an ``Unschedulable`` is kept under (the request without its name, that step, the snapshot's
``version``) for as long as the store's ``capacity_generation`` stands (every change of free
capacity, reservations, plans or nodes moves it; a snapshot built at one generation is the same
at the next cycle), and handed to the next gang of that shape with its own name: the same words.
Not shared: a gang near another (its partner's domains), and any gang while a head-of-line hold
or a returning gang keeps nodes from some gangs and not others. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot

__all__ = ["Explanations"]

#: explanations kept per capacity generation (a bound on memory; shapes are few)
_MOST_KEPT = 1024


class Explanations:
    """The ``Unschedulable`` answers of one capacity generation, by request shape."""

    def __init__(self) -> None:
        self._generation = -1
        self._kept: dict[tuple[Any, ...], Unschedulable] = {}
        #: answers computed and answers handed on (for tests and the benchmark's reading)
        self.built = 0
        self.shared = 0

    def at(self, generation: int) -> Explanations:
        """Return this cache for the store's ``capacity_generation`` ``generation`` (forgetting
        what an earlier one kept)."""
        if generation != self._generation:
            self._generation, self._kept = generation, {}
        return self

    def key(
        self, snapshot: CapacitySnapshot, request: GangRequest, waited: float
    ) -> tuple[Any, ...] | None:
        """Return what the engine's answer for ``request`` depends on (None: not hashable)."""
        step = request.policy.max_wait_seconds
        shape = replace(request, name="")
        try:
            hash(shape)
        except TypeError:
            return None
        return (shape, int(waited // step) if step else 0, snapshot.version)

    def known(self, key: tuple[Any, ...] | None, name: str) -> Unschedulable | None:
        """Return the answer kept under ``key`` in ``name``'s words (None: none kept)."""
        if key is None:
            return None
        kept = self._kept.get(key)
        if kept is None:
            return None
        self.shared += 1
        summary = kept.summary
        if summary.startswith(f"{kept.job}:"):
            summary = f"{name}{summary[len(kept.job) :]}"
        return replace(kept, job=name, summary=summary)

    def keep(self, key: tuple[Any, ...] | None, result: Unschedulable) -> None:
        """Keep ``result`` under ``key``."""
        self.built += 1
        if key is None:
            return
        if len(self._kept) >= _MOST_KEPT:
            self._kept.clear()
        self._kept[key] = result
