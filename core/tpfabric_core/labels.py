"""The canonical node-label scheme under ``topology.tpfabric.io/`` and its value codec.

Discovery writes these labels, the placer and the extender read them. Keys:

=====================================  =========================================================
``topology.tpfabric.io/block``         block / scalable-unit group the node belongs to
``topology.tpfabric.io/spine``         spine group (set of leaves joined by the same spines)
``topology.tpfabric.io/leaf``          leaf domain: nodes one switch hop apart on every rail
``topology.tpfabric.io/rail-<i>``      the leaf switch that HCA/rail ``i`` of the node plugs into
``topology.tpfabric.io/health``        ``ok`` or ``degraded`` (a rail link or leaf over threshold)
=====================================  =========================================================

Values must be valid Kubernetes label values (<= 63 characters, alphanumeric at both ends,
``-_.`` inside). Longer or invalid names are mapped deterministically: the readable part is kept
and a short SHA-256 suffix makes it unique, so the same switch always gets the same value.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "BLOCK",
    "HEALTH",
    "LEAF",
    "PREFIX",
    "SPINE",
    "encode_label_value",
    "is_valid_label_value",
    "level_key",
    "rail_key",
]

PREFIX = "topology.tpfabric.io/"
BLOCK = PREFIX + "block"
SPINE = PREFIX + "spine"
LEAF = PREFIX + "leaf"
HEALTH = PREFIX + "health"

MAX_VALUE_LENGTH = 63
_HASH_CHARS = 10
_VALID_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INVALID_CHARS = re.compile(r"[^-A-Za-z0-9_.]+")


def rail_key(rail: int) -> str:
    """Return the label key of rail ``rail`` (0-based), e.g. ``topology.tpfabric.io/rail-3``."""
    if rail < 0:
        raise ValueError(f"rail index must be >= 0, got {rail}")
    return f"{PREFIX}rail-{rail}"


def level_key(level: str) -> str:
    """Return the label key of a topology level name such as ``leaf`` or ``block``."""
    return PREFIX + level


def is_valid_label_value(value: str) -> bool:
    """Return whether ``value`` is a valid Kubernetes label value."""
    return len(value) <= MAX_VALUE_LENGTH and bool(_VALID_VALUE.match(value))


def encode_label_value(name: str) -> str:
    """Return ``name`` as a valid label value: unchanged if already valid, else readable + hash."""
    if is_valid_label_value(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    readable = _INVALID_CHARS.sub("-", name).strip("-_.")
    readable = readable[: MAX_VALUE_LENGTH - _HASH_CHARS - 1].rstrip("-_.")
    return f"{readable}-{digest}" if readable else digest
