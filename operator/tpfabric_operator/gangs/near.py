"""Gangs placed near another: what each record's plan says of being near the gang it names.

A Gang asks to be near another (``spec.near.target``, :mod:`tpfabric_core.gangs`); once the
placer has planned it, its placement says where, in words (``status.placement.near``). The
target's record names the gangs placed near it (``status.nearBy``), so a person looking at a
gang sees what leans on it. :class:`NearBy` keeps those words per target as the records' events
bring them, and says which targets must be synced again when they change. No I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from tpfabric_core.api.placement import placement_of_status

__all__ = ["NearBy", "near_line"]


def near_line(name: str, body: Mapping[str, Any] | None) -> tuple[str, str]:
    """Return the gang record ``name`` asks to be near ("" for none) and the line the target's
    record shows of it ("" while it has no plan that says where)."""
    near = ((body or {}).get("spec") or {}).get("near") or {}
    target = str(near.get("target") or "")
    placement = placement_of_status((body or {}).get("status"))
    words = (placement.near or "") if placement.planned else ""
    return target, f"{name}: {words}" if words else ""


class NearBy:
    """Per (namespace, target): record name -> the line its plan shows of being near the target."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._from: dict[tuple[str, str], dict[str, str]] = {}

    def note(self, key: tuple[str, str], body: Mapping[str, Any] | None) -> set[str]:
        """Keep what record ``key`` (namespace, name) says of the gang it asks to be near
        (``body`` None: the record is gone); return the targets whose lines changed."""
        namespace, name = key
        target, line = near_line(name, body)
        touched: set[str] = set()
        with self._lock:
            for (ns, other), entries in list(self._from.items()):
                if ns == namespace and name in entries and other != target:
                    del entries[name]
                    touched.add(other)
            if target:
                entries = self._from.setdefault((namespace, target), {})
                if entries.get(name, "") != line:
                    touched.add(target)
                if line:
                    entries[name] = line
                else:
                    entries.pop(name, None)
        return touched

    def lines(self, namespace: str, owner: str, gang: str) -> list[str]:
        """Return the lines of the gangs placed near this one (by its owner's or its record's
        name), sorted."""
        with self._lock:
            lines = {
                line
                for target in (owner, gang)
                for line in (self._from.get((namespace, target)) or {}).values()
            }
        return sorted(lines)
