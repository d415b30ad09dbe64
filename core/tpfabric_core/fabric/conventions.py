"""Node labels of other topology conventions, mapped to tpfabric's levels by configuration.

A :class:`Convention` says which label keys carry which level; nothing about any provider is coded
in functions. Three ways to say it, all declarative:

- ``levels``: a fixed ``{level: [keys...]}`` map (the first key a node has wins), e.g. topograph's
  ``network.topology.nvidia.com/leaf`` is the leaf;
- ``tiers``: keys ordered from the top of the fabric down, counted from the bottom per node: the
  lowest key a node has is its leaf, the next its spine, the next its block;
- ``tier_key``: numbered tiers of any depth, ``{n}`` standing for the number, and
  ``numbered_from`` saying where 0 or 1 is: ``top`` (AWS's ``network-node-layer-1`` is the top of
  the hierarchy) or ``node`` (topograph's ``tier-0`` is the switch nearest the node). Counted from
  the node as ``tiers`` are.

Tiers above the third from the node have no canonical label (the fabric model stops at block, as
it does for a cabled fabric); :func:`tiers_above_block` names them, and :func:`levels_flag` gives
the scheduler's ``--levels`` that plans on the convention's own keys at the depth every node has,
tiers above block included, so a cluster needs no relabelling at all.

Built-in presets, with where their keys are documented:

- ``topograph``: ``network.topology.nvidia.com/{accelerator,leaf,spine,core}`` (the older
  ``block`` and ``datacenter`` keys too): topograph before its tier labels, NVIDIA/topograph
  ``docs/engines/k8s.md`` v0.1.0 and later;
- ``topograph-tiers``: ``fabric.topograph.run/tier-N`` and ``accelerator.topograph.run/domain``:
  NVIDIA/topograph ``docs/reference/node-labels.md`` (commit e2b6250): "Tier 0 is the switch
  closest to the node ... There is no fixed maximum depth";
- ``aws``: ``topology.k8s.aws/network-node-layer-N``: EKS user guide, "Place distributed AI/ML
  workloads with network topology labels" (docs.aws.amazon.com/eks/latest/userguide/
  ml-workload-topology.html): layer-1 "the top of the network hierarchy", layer-3 the bottom for
  most instance types, layer-4 "present only on instance types whose topology has four layers"
  (then the bottom);
- ``gke``: ``cloud.google.com/gce-topology-block`` is the block and ``-subblock`` the leaf: GKE's
  "Schedule GKE workloads with Topology Aware Scheduling" (cloud.google.com/ai-hypercomputer/docs/
  workloads/schedule-gke-workloads-tas: "the reserved block", "the sub-block"); ``-host`` ("the
  host on which the VM is located") is no fabric level: an 8-GPU VM is the whole host.

Users add their own keys with :meth:`Convention.model_validate` on a mapping from a config file.
Levels are tpfabric's (``block``, ``spine``, ``leaf``, ``accelerator``); values are encoded with
:func:`~tpfabric_core.labels.encode_label_value`. Pure: takes label maps, returns label maps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tpfabric_core import labels

__all__ = [
    "LEVELS",
    "PRESETS",
    "Convention",
    "canonical_labels",
    "detect_convention",
    "fabric_tiers",
    "levels_flag",
    "node_levels",
    "tiers_above_block",
]

#: The levels a convention may fill, bottom-up order for ``tiers``.
LEVELS: tuple[str, ...] = ("leaf", "spine", "block", "accelerator")
_TIER_LEVELS = ("leaf", "spine", "block")
_NUMBER = "{n}"


class Convention(BaseModel):
    """Which node label keys carry which tpfabric level; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    levels: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    tiers: tuple[str, ...] = ()
    tier_key: str = ""
    numbered_from: Literal["top", "node"] = "top"

    @model_validator(mode="after")
    def _known_levels(self) -> Convention:
        unknown = sorted(set(self.levels) - set(LEVELS))
        if unknown:
            raise ValueError(f"unknown level(s) {unknown}; use {list(LEVELS)}")
        if not self.levels and not self.tiers and not self.tier_key:
            raise ValueError("a convention needs 'levels', 'tiers' or 'tier_key'")
        if self.tier_key and (self.tier_key.count(_NUMBER) != 1 or self.tiers):
            raise ValueError(
                "tier_key holds '{n}' once (e.g. example.com/tier-{n}) and excludes 'tiers'"
            )
        return self

    def reads(self, key: str) -> bool:
        """Return whether this convention reads label ``key``."""
        if key in self.tiers or any(key in keys for keys in self.levels.values()):
            return True
        return bool(self.tier_key) and _tier_pattern(self.tier_key).match(key) is not None


@lru_cache(maxsize=32)
def _tier_pattern(tier_key: str) -> re.Pattern[str]:
    prefix, _, suffix = tier_key.partition(_NUMBER)
    return re.compile(f"^{re.escape(prefix)}([0-9]+){re.escape(suffix)}$")


_NV = "network.topology.nvidia.com/"
_AWS = "topology.k8s.aws/network-node-layer-"
_GKE = "cloud.google.com/gce-topology-"

PRESETS: Mapping[str, Convention] = MappingProxyType(
    {
        "topograph": Convention(
            name="topograph",
            levels={
                "leaf": (_NV + "leaf", _NV + "block"),
                "spine": (_NV + "spine",),
                "block": (_NV + "core", _NV + "datacenter"),
                "accelerator": (_NV + "accelerator",),
            },
        ),
        "topograph-tiers": Convention(
            name="topograph-tiers",
            levels={"accelerator": ("accelerator.topograph.run/domain",)},
            tier_key="fabric.topograph.run/tier-{n}",
            numbered_from="node",
        ),
        "aws": Convention(name="aws", tier_key=_AWS + "{n}", numbered_from="top"),
        "gke": Convention(
            name="gke", levels={"block": (_GKE + "block",), "leaf": (_GKE + "subblock",)}
        ),
    }
)


def fabric_tiers(node_labels: Mapping[str, str], convention: Convention) -> list[tuple[str, str]]:
    """Return the ``(key, value)`` tiers of one node, from the node outward (``tiers`` and
    ``tier_key`` only; empty values do not count)."""
    if convention.tier_key:
        pattern = _tier_pattern(convention.tier_key)
        numbered = sorted(
            (int(match.group(1)), key, value)
            for key, value in node_labels.items()
            if value and (match := pattern.match(key))
        )
        if convention.numbered_from == "top":
            numbered.reverse()
        return [(key, value) for _, key, value in numbered]
    return [(k, node_labels[k]) for k in reversed(convention.tiers) if node_labels.get(k)]


def node_levels(node_labels: Mapping[str, str], convention: Convention) -> dict[str, str]:
    """Return ``{level: raw value}`` that ``convention`` reads from one node's labels."""
    result: dict[str, str] = {}
    for level, keys in convention.levels.items():
        value = next((node_labels[k] for k in keys if node_labels.get(k)), None)
        if value is not None:
            result[level] = value
    for level, (_, value) in zip(_TIER_LEVELS, fabric_tiers(node_labels, convention), strict=False):
        result.setdefault(level, value)
    return result


def tiers_above_block(node_labels: Mapping[str, str], convention: Convention) -> tuple[str, ...]:
    """Return the keys of the node's tiers above its block (no canonical label holds them)."""
    return tuple(key for key, _ in fabric_tiers(node_labels, convention)[len(_TIER_LEVELS) :])


def _common_key(keys: Sequence[str], nodes: Sequence[Mapping[str, str]]) -> str | None:
    return next((k for k in keys if all(node.get(k) for node in nodes)), None)


def levels_flag(nodes: Mapping[str, Mapping[str, str]], convention: Convention) -> str | None:
    """Return the scheduler's ``--levels`` (top level first) that plans on ``convention``'s own
    keys, None when the nodes share no leaf key.

    Only keys every node with a level carries are used (a node without one of them would be
    outside the labelled fabric): the leaf, spine and block, tiers above the block as
    ``tier-<N>`` (N counted from the leaf, 0), and the accelerator key as ``nvlink``, below the
    leaf, which keeps tensor-parallel groups inside one NVLink domain.
    """
    labelled = [lbl for lbl in nodes.values() if node_levels(lbl, convention)]
    if not labelled:
        return None
    per_node = [[key for key, _ in fabric_tiers(lbl, convention)] for lbl in labelled]
    common = set(per_node[0]).intersection(*per_node[1:])
    outward = [key for key in per_node[0] if key in common]
    names = [*_TIER_LEVELS, *(f"tier-{n}" for n in range(len(_TIER_LEVELS), len(outward)))]
    chosen: list[tuple[str, str]] = []
    for index, name in enumerate(names):
        key = _common_key(convention.levels.get(name, ()), labelled)
        if key is None and index < len(outward):
            key = outward[index]
        if key is not None and all(key != k for _, k in chosen):
            chosen.append((name, key))
    if not chosen or chosen[0][0] != "leaf":
        return None
    accelerator = _common_key(convention.levels.get("accelerator", ()), labelled)
    specs = [*reversed(chosen), *([("nvlink", accelerator)] if accelerator else [])]
    return ",".join(f"{name}={key}" for name, key in specs)


def detect_convention(
    nodes: Mapping[str, Mapping[str, str]], candidates: Mapping[str, Convention] = PRESETS
) -> Convention | None:
    """Return the candidate whose keys the most nodes carry, None when no node carries any."""
    best: tuple[int, str] | None = None
    for name, convention in candidates.items():
        count = sum(1 for node in nodes.values() if any(convention.reads(k) for k in node))
        if count and (best is None or count > best[0]):
            best = (count, name)
    return candidates[best[1]] if best else None


def canonical_labels(
    nodes: Mapping[str, Mapping[str, str]], convention: Convention
) -> dict[str, dict[str, str]]:
    """Return ``{node: {topology.tpfabric.io/<level>: value}}`` for every node with a level.

    Values are kept as they are (encoded only where not a valid label value): the other
    conventions name switches or domains with ids already unique across the fabric.
    """
    result: dict[str, dict[str, str]] = {}
    for node, node_labels in nodes.items():
        levels = node_levels(node_labels, convention)
        if levels:
            result[node] = {
                labels.level_key(level): labels.encode_label_value(value)
                for level, value in sorted(levels.items())
            }
    return result
