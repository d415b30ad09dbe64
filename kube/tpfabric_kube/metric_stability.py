"""The stability of tpfabric's metrics, declared as Kubernetes declares its own (KEP-1209, the
metric stability framework), and shown where Kubernetes shows it: at the start of each metric's
HELP text (``# HELP tpfabric_placer_leader [ALPHA] 1 while ...``) and in the generated reference
(``docs/metrics.md``).

- ``ALPHA``: may be renamed, relabelled or removed in any release. Every metric starts here.
- ``BETA``: its name and labels change only after a deprecation announced one minor release
  ahead (the HELP text then starts ``[BETA] (Deprecated since X.Y)``).
- ``STABLE``: its name and labels never change within an API version; none is yet.

A metric is ``ALPHA`` unless :data:`STABILITY` says otherwise. Metrics that are not tpfabric's
(prometheus_client's ``process_*`` and ``python_*``) carry no stability: they are the library's.
:class:`WithStability` marks a registry's HELP texts at exposition, so that no metric definition
repeats its stability in its own words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Literal

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["PREFIX", "STABILITY", "Stability", "WithStability", "stability_of"]

Stability = Literal["ALPHA", "BETA", "STABLE"]
#: the prefix of every metric of tpfabric's own
PREFIX = "tpfabric_"
#: metric name (as declared, without ``_total``) -> its stability, where it is not ALPHA
STABILITY: Mapping[str, Stability] = MappingProxyType({})


def stability_of(name: str) -> Stability | None:
    """Return the stability of the metric family ``name`` (None: not tpfabric's metric)."""
    if not name.startswith(PREFIX):
        return None
    return STABILITY.get(name.removesuffix("_total"), "ALPHA")


class WithStability(Collector):
    """A collector that yields what ``collector`` yields, each tpfabric family's HELP text
    starting with its stability (``[ALPHA] ``), as Kubernetes components expose theirs."""

    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    def collect(self) -> Iterable[Metric]:
        """Yield the wrapped collector's families, marked (each collect builds them anew)."""
        for family in self._collector.collect():
            stability = stability_of(family.name)
            if stability is not None and not family.documentation.startswith("["):
                family.documentation = f"[{stability}] {family.documentation}"
            yield family
