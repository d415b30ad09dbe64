"""A Kueue ``Topology`` (``kueue.x-k8s.io``, kind ``Topology``) as tpfabric's topology levels.

Kueue's Topology Aware Scheduling names the node labels of the fabric's levels, top first
(``spec.levels[].nodeLabel``); tpfabric's levels are the same list with a name for each
(``name=label-key,...``: the chart's ``topology.levels``, the placer's ``--levels``). So a cluster
moving from Kueue TAS keeps its node labels and its Topology says the levels:

- the lowest level ``kubernetes.io/hostname`` (which Kueue allows only last) is dropped: a node
  is always tpfabric's smallest domain, without a level of its own;
- the remaining levels are named from the bottom up ``leaf``, ``spine``, ``block`` (the names a
  TensorParallelJob's ``spec.topology.level`` and the gang annotations use, ``leaf`` being their
  default), and a fourth level and above by their label's last segment (``.../topology-zone``:
  ``zone``). Gang pods that name a level by its label key, as Kueue's
  ``kueue.x-k8s.io/podset-required-topology`` does, find it whatever its name.

Pure: the object in (as read from a file or the API server), the levels out; the result is
checked with :func:`tpfabric_core.placement.topology.parse_levels`, as the placer reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.errors import InputError
from tpfabric_core.placement.topology import parse_levels

__all__ = ["HOSTNAME", "KUEUE_GROUP", "KueueLevels", "levels_from_kueue_topology"]

KUEUE_GROUP = "kueue.x-k8s.io"
HOSTNAME = "kubernetes.io/hostname"
#: the names of the lowest levels, from the bottom up
_BOTTOM_UP = ("leaf", "spine", "block")
_FIX = (
    "give a Kueue Topology (apiVersion kueue.x-k8s.io/v1beta1 or v1beta2, kind Topology) with "
    "spec.levels: [{nodeLabel: <label key>}, ...], top level first"
)


@dataclass(frozen=True, slots=True)
class KueueLevels:
    """tpfabric's levels for one Kueue Topology."""

    topology: str
    #: (level name, node label key), top level first
    levels: tuple[tuple[str, str], ...]
    #: what was not carried over, in words (the hostname level)
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        """Return the levels as ``topology.levels`` and ``--levels`` take them."""
        return ",".join(f"{name}={key}" for name, key in self.levels)


def _segment_name(key: str) -> str:
    """Return a level name from a label key's last segment (``.../gce-topology-zone``: ``zone``)."""
    last = key.rsplit("/", 1)[-1].lower()
    last = last.rsplit("topology-", 1)[-1]
    name = re.sub(r"[^a-z0-9-]+", "-", last).strip("-")
    if not name or not name[0].isalpha():
        name = f"level-{name}" if name else "level"
    return name[:63]


def levels_from_kueue_topology(obj: Any, where: str = "the Kueue Topology") -> KueueLevels:
    """Return tpfabric's levels for the Kueue Topology ``obj``; InputError naming the field
    (under ``where``: the file, or the object read) when it is not one."""
    if not isinstance(obj, Mapping):
        raise InputError(where, "not a YAML/JSON object", _FIX)
    group = str(obj.get("apiVersion") or "").partition("/")[0]
    if group != KUEUE_GROUP or obj.get("kind") != "Topology":
        raise InputError(
            where,
            f"apiVersion {obj.get('apiVersion')!r}, kind {obj.get('kind')!r} is not a Kueue "
            "Topology",
            _FIX,
        )
    name = str((obj.get("metadata") or {}).get("name") or "")
    levels = (obj.get("spec") or {}).get("levels")
    if not isinstance(levels, list) or not levels:
        raise InputError(f"{where}: spec.levels", "missing or empty", _FIX)
    keys: list[str] = []
    for index, level in enumerate(levels):
        key = level.get("nodeLabel") if isinstance(level, Mapping) else None
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"{where}: spec.levels[{index}].nodeLabel", "missing", _FIX)
        keys.append(key.strip())
    notes: list[str] = []
    if keys[-1] == HOSTNAME:
        keys.pop()
        notes.append(
            f"the lowest level {HOSTNAME} is left out: a node is always tpfabric's smallest domain"
        )
    if not keys:
        raise InputError(
            f"{where}: spec.levels",
            f"only {HOSTNAME}: no level above the node to place gangs in",
            "add the labels of the switches or blocks above the nodes",
        )
    names: list[str] = []
    for depth, key in enumerate(reversed(keys)):
        names.append(_BOTTOM_UP[depth] if depth < len(_BOTTOM_UP) else _segment_name(key))
    names.reverse()
    seen: dict[str, int] = {}
    for index, level_name in enumerate(names):  # a fourth level named like a lower one
        if level_name in seen or level_name == "cluster":
            names[index] = f"{level_name}-{index}"
        seen[names[index]] = index
    result = KueueLevels(name, tuple(zip(names, keys, strict=True)), tuple(notes))
    parse_levels(result.text())  # the placer's own check (duplicate or invalid label keys)
    return result
