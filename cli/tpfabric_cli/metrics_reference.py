"""The metrics reference (``docs/metrics.md``), generated from the components' own metric
definitions: each component's registries are made as the component makes them, and every
family they hold is listed with its type, stability, labels and HELP text. ``tpfabric metrics
reference`` writes the page; a unit test fails when the page and the code differ.

Reading a registry's label names uses two attributes of prometheus_client's that it does not
document (``CollectorRegistry._collector_to_names``, a metric's ``_labelnames``): pinned by
requirements/constraints.txt, and the test above fails should they change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from tpfabric_kube.build_info import build_info
from tpfabric_kube.malformed import MALFORMED_OBJECTS
from tpfabric_kube.metric_stability import stability_of

__all__ = [
    "COMPONENTS",
    "FOREIGN_PREFIXES",
    "MetricRow",
    "component_rows",
    "convention_problems",
    "render_reference",
]


@dataclass(frozen=True)
class MetricRow:
    """One metric family as a scrape shows it."""

    name: str  # as exposed: a counter's with its _total
    kind: str  # counter, gauge, histogram
    stability: str
    labels: tuple[str, ...]
    help: str


def _shared() -> list[Collector]:
    registry = CollectorRegistry()
    build_info("<component>", registry)
    registry.register(MALFORMED_OBJECTS)
    return [registry]


def _scheduler() -> list[Collector]:
    from tpfabric_scheduler.metrics import Metrics  # noqa: PLC0415
    from tpfabric_scheduler.store import ClusterStore  # noqa: PLC0415
    from tpfabric_scheduler.store_metrics import StoreMetrics  # noqa: PLC0415

    return [Metrics().registry, StoreMetrics(ClusterStore())]


def _operator() -> list[Collector]:
    from tpfabric_operator.jobs.metrics import REGISTRY  # noqa: PLC0415

    return [REGISTRY]


def _webhook() -> list[Collector]:
    from tpfabric_operator.webhook.server import WebhookMetrics  # noqa: PLC0415

    return [WebhookMetrics().registry]


def _agent() -> list[Collector]:
    from tpfabric_fabric_agent.metrics import AgentMetrics  # noqa: PLC0415

    return [AgentMetrics().registry]


#: section title -> the collectors of that component, made as the component makes them
COMPONENTS: dict[str, Callable[[], list[Collector]]] = {
    "Every component": _shared,
    "Extender and placer (`tpfabric-scheduler`)": _scheduler,
    "Operator (`tpfabric-operator`)": _operator,
    "Gang webhook (`tpfabric-gang-webhook`)": _webhook,
    "Fabric agent (`tpfabric-fabric-agent`)": _agent,
}


def _families(collector: Collector) -> Iterable[tuple[str, str, str, tuple[str, ...]]]:
    """Yield (name, type, HELP, label names) of every family ``collector`` holds."""
    if isinstance(collector, CollectorRegistry):
        for member in list(collector._collector_to_names):
            yield from _families(member)
        return
    names = tuple(getattr(collector, "_labelnames", ()))
    kind = getattr(collector, "_type", None)
    if isinstance(kind, str):  # one of prometheus_client's metrics
        yield str(collector._name), kind, str(collector._documentation), names  # type: ignore[attr-defined]
        return
    describe = getattr(collector, "describe", None)  # a custom collector describes itself
    for family in describe() if describe is not None else ():
        yield family.name, family.type, family.documentation, tuple(family._labelnames)


def component_rows(collectors: Iterable[Collector]) -> list[MetricRow]:
    """Return the rows of every family of ``collectors``, by name."""
    rows = []
    for collector in collectors:
        for name, kind, text, labels in _families(collector):
            exposed = f"{name}_total" if kind == "counter" else name
            rows.append(
                MetricRow(
                    exposed, kind, stability_of(name) or "", tuple(labels), " ".join(text.split())
                )
            )
    return sorted(rows, key=lambda row: row.name)


_NAME = re.compile(r"^tpfabric_[a-z][a-z0-9_]*[a-z0-9]$")
#: names another exporter owns, kept as it names them so that what is built on them works
#: unchanged (the fabric agent's raw InfiniBand counters, under node_exporter's names): neither
#: tpfabric's prefix nor a stability of tpfabric's is asked of them
FOREIGN_PREFIXES = ("node_infiniband_",)
_UNITS = ("_seconds", "_bytes", "_gbps", "_lanes", "_minute", "_ratio")


def convention_problems(row: MetricRow) -> list[str]:
    """Return how ``row`` breaks Prometheus' naming conventions ([] when it keeps them)."""
    problems = []
    foreign = row.name.startswith(FOREIGN_PREFIXES)
    if not foreign and not _NAME.match(row.name):
        problems.append("not a tpfabric_ snake_case name")
    if row.kind == "counter" and not row.name.endswith("_total"):
        problems.append("a counter's name ends in _total")
    if row.kind != "counter" and row.name.endswith("_total"):
        problems.append("only a counter's name ends in _total")
    if row.kind == "histogram" and not row.name.endswith(_UNITS):
        problems.append(f"a histogram's name ends in its unit ({', '.join(_UNITS)})")
    if (
        re.search(r"_(milli|micro)?(second|sec|ms|us)s?(_|$)", row.name)
        and "_seconds" not in row.name
    ):
        problems.append("time is in seconds, named _seconds")
    if not row.help or not (row.help[0].isupper() or row.help[0].isdigit()):
        problems.append("HELP is a sentence")
    if not row.stability and not foreign:
        problems.append("no stability")
    return problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_INTRO = """\
# Metrics reference

<!-- generated by `tpfabric metrics reference` from the components' metric definitions;
     edit the code, not this page (tests/unit/test_metrics_reference.py) -->

Every tpfabric component serves Prometheus metrics on its own HTTPS metrics port, to a
caller the API server authenticates and authorizes (see [Monitoring](monitoring.md)). Names
follow Prometheus' conventions (base units in the name, `_total` on counters) and every
metric of tpfabric's carries its stability, as Kubernetes components declare theirs
(KEP-1209), at the start of its HELP text (`[ALPHA] ...`):

- **ALPHA**: may be renamed, relabelled or removed in any release. Every metric starts here.
- **BETA**: its name and labels change only after a deprecation announced one minor release
  ahead.
- **STABLE**: its name and labels never change within an API version (none yet).

Each port also serves prometheus_client's process and runtime metrics: `process_*` (CPU
seconds, resident and virtual memory, open and maximum file descriptors, start time) and
`python_*` (garbage collections, `python_info`); they are the library's, without a
stability of tpfabric's. The fabric agent's raw InfiniBand counters keep node_exporter's names
and labels (`node_infiniband_*`, `device`, `port`), so that what is built for node_exporter reads
them unchanged; they carry no stability of tpfabric's either (`-` below).
"""


def render_reference() -> str:
    """Return docs/metrics.md."""
    lines = [_INTRO]
    for title, make in COMPONENTS.items():
        lines += [
            f"## {title}",
            "",
            "| metric | type | stability | labels | description |",
            "|---|---|---|---|---|",
        ]
        for row in component_rows(make()):
            labels = ", ".join(f"`{label}`" for label in row.labels) or "-"
            lines.append(
                f"| `{row.name}` | {row.kind} | {row.stability or '-'} | {labels} | "
                f"{_cell(row.help)} |"
            )
        lines.append("")
    return "\n".join(lines)
