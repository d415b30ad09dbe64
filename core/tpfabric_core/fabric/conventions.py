"""Node labels of other topology conventions, mapped to tpfabric's levels by configuration.

A :class:`Convention` says which label keys carry which level; nothing about any provider is coded
in functions. Two ways to say it, both declarative:

- ``levels``: a fixed ``{level: [keys...]}`` map (the first key a node has wins), e.g. topograph's
  ``network.topology.nvidia.com/leaf`` is the leaf;
- ``tiers``: keys ordered from the top of the fabric down, counted from the bottom per node: the
  lowest key a node has is its leaf, the next its spine, the next its block. This fits AWS, where
  ``topology.k8s.aws/network-node-layer-1`` is the top and instances report three or four layers.

Built-in presets: ``topograph`` (``network.topology.nvidia.com/*`` and the older ``block`` key for
the leaf), ``topograph-tiers`` (``fabric.topograph.run/tier-N``, tier 0 closest to the node, and
``accelerator.topograph.run/domain``), ``aws`` and ``gke`` (``cloud.google.com/gce-topology-block``
is the block and ``-subblock`` the leaf; ``-host`` names the physical host, no fabric level). Users
add their own keys with :meth:`Convention.model_validate` on a mapping from a config file.

Levels are tpfabric's (``block``, ``spine``, ``leaf``, ``accelerator``); values are encoded with
:func:`~tpfabric_core.labels.encode_label_value`. Pure: takes label maps, returns label maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tpfabric_core import labels

__all__ = [
    "LEVELS",
    "PRESETS",
    "Convention",
    "canonical_labels",
    "detect_convention",
    "node_levels",
]

#: The levels a convention may fill, bottom-up order for ``tiers``.
LEVELS: tuple[str, ...] = ("leaf", "spine", "block", "accelerator")
_TIER_LEVELS = ("leaf", "spine", "block")


class Convention(BaseModel):
    """Which node label keys carry which tpfabric level; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    levels: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    tiers: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _known_levels(self) -> Convention:
        unknown = sorted(set(self.levels) - set(LEVELS))
        if unknown:
            raise ValueError(f"unknown level(s) {unknown}; use {list(LEVELS)}")
        if not self.levels and not self.tiers:
            raise ValueError("a convention needs 'levels' or 'tiers'")
        return self

    @property
    def keys(self) -> frozenset[str]:
        """Return every label key this convention reads."""
        return frozenset(self.tiers).union(*self.levels.values())


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
            levels={
                "leaf": ("fabric.topograph.run/tier-0",),
                "spine": ("fabric.topograph.run/tier-1",),
                "block": ("fabric.topograph.run/tier-2",),
                "accelerator": ("accelerator.topograph.run/domain",),
            },
        ),
        "aws": Convention(name="aws", tiers=tuple(f"{_AWS}{n}" for n in range(1, 5))),
        "gke": Convention(
            name="gke", levels={"block": (_GKE + "block",), "leaf": (_GKE + "subblock",)}
        ),
    }
)


def node_levels(node_labels: Mapping[str, str], convention: Convention) -> dict[str, str]:
    """Return ``{level: raw value}`` that ``convention`` reads from one node's labels."""
    result: dict[str, str] = {}
    for level, keys in convention.levels.items():
        value = next((node_labels[k] for k in keys if node_labels.get(k)), None)
        if value is not None:
            result[level] = value
    present = [node_labels[k] for k in convention.tiers if node_labels.get(k)]
    for level, value in zip(_TIER_LEVELS, reversed(present), strict=False):
        result.setdefault(level, value)
    return result


def detect_convention(
    nodes: Mapping[str, Mapping[str, str]], candidates: Mapping[str, Convention] = PRESETS
) -> Convention | None:
    """Return the candidate whose keys the most nodes carry, None when no node carries any."""
    best: tuple[int, str] | None = None
    for name, convention in candidates.items():
        count = sum(1 for node in nodes.values() if convention.keys & node.keys())
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
