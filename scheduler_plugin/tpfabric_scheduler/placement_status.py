"""What the placer writes in a job's ``status.placement``: plans, waits, re-plans, bad specs.

The builders and the write rules are :mod:`tpfabric_core.api.placement`'s (the one owner of
``status.placement``); this module gives the placer their names while it is carved onto them.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from tpfabric_core.api.placement import (
    MAX_REASONS,
    meaning_changed,
    read_placement,
)
from tpfabric_core.api.placement import invalid as invalid_placement
from tpfabric_core.api.placement import partner_waiting as partner_waiting_placement
from tpfabric_core.api.placement import planned as planned_placement
from tpfabric_core.api.placement import replanning as replanning_placement
from tpfabric_core.api.placement import waiting as waiting_placement
from tpfabric_core.timestamps import parse_rfc3339, rfc3339

__all__ = [
    "MAX_REASONS",
    "changed",
    "invalid_placement",
    "parse_rfc3339",
    "partner_waiting_placement",
    "planned_placement",
    "replanning_placement",
    "rfc3339",
    "waiting_placement",
]


def changed(previous: dict[str, Any], placement: dict[str, Any]) -> bool:
    """Return whether writing ``placement`` would change what the stored one means."""
    return meaning_changed(read_placement(previous), placement)
