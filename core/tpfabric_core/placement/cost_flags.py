"""The fabric's own figures for the cost model, as the placer's flags give them.

The cost model (:mod:`.cost`) prices a path by the highest level it crosses: the uplink's
oversubscription there (down-port over up-port bandwidth, ``2`` for 2:1) and the share of it
other jobs are assumed to take. Its defaults are a generic fabric (non-blocking under a spine,
2:1 at the block, 4:1 above); a cluster's own are written per level name, the names of the
placer's ``--levels`` above the lowest, or ``cluster`` for a path between top-level domains:

- ``--oversubscription spine=1,block=3,cluster=7``: each at least 1 (1 is non-blocking);
- ``--background-load spine=0,block=0.25``: each from 0 up to, not including, 1.

A mapping given replaces the default one whole: a level it leaves out is non-blocking and idle.
Pure: text in, a :class:`~tpfabric_core.placement.cost.CostModelConfig` out, or an
:class:`~tpfabric_core.errors.InputError` naming the flag, the entry and the fix.
"""

from __future__ import annotations

import math

from tpfabric_core.errors import InputError
from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig
from tpfabric_core.placement.topology import CLUSTER_LEVEL, LevelSpec

__all__ = ["cost_model", "level_figures"]


def level_figures(
    text: str, where: str, levels: tuple[LevelSpec, ...], *, low: float, high: float | None
) -> dict[str, float]:
    """Return ``name=value,...`` as a mapping; every name a level a path can cross (see the
    module), every value from ``low`` up to ``high`` (excluded; None: no bound)."""
    crossable = [spec.name for spec in levels[:-1]] + [CLUSTER_LEVEL]
    bounds = (
        f"from {low:g} up to, not including, {high:g}" if high is not None else f"at least {low:g}"
    )
    sample = 2 if high is None else 0.25
    example = f"e.g. {crossable[-2] if len(crossable) > 1 else CLUSTER_LEVEL}={sample:g}"
    pairs = f"write name=value pairs, {example}"
    figures: dict[str, float] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            raise InputError(where, f"empty entry in {text!r}", pairs)
        name, sep, value = (part.strip() for part in entry.partition("="))
        if not sep:
            raise InputError(where, f"{entry!r} has no '='", pairs)
        if name not in crossable:
            raise InputError(
                where,
                f"{name!r} is not a level a path crosses",
                f"use one of {', '.join(crossable)} (the --levels above the lowest, or cluster)",
            )
        if name in figures:
            raise InputError(where, f"{name!r} is given twice", "give each level once")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (number >= low and (high is None or number < high)) or math.isinf(number):
            raise InputError(where, f"{entry!r}: the value must be a number {bounds}", example)
        figures[name] = number
    return figures


def cost_model(
    levels: tuple[LevelSpec, ...],
    *,
    oversubscription: str | None = None,
    background_load: str | None = None,
    base: CostModelConfig = DEFAULT_COST,
) -> CostModelConfig:
    """Return ``base`` with the fabric's figures given (None: the default's kept)."""
    update: dict[str, dict[str, float]] = {}
    if oversubscription is not None:
        update["oversubscription"] = level_figures(
            oversubscription, "--oversubscription", levels, low=1.0, high=None
        )
    if background_load is not None:
        update["background_load"] = level_figures(
            background_load, "--background-load", levels, low=0.0, high=1.0
        )
    return base.model_copy(update=update) if update else base
