"""``topology label``: the plan of label changes (pure) and how it is printed.

Only ``topology.tpfabric.io/`` labels of nodes in both the fabric and the cluster are ever
planned; cluster nodes outside the fabric are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.markup import escape

from tpfabric_cli.topology.rendering import out
from tpfabric_core.fabric.node_labels import label_diff
from tpfabric_core.hostlist import compress_hostlist
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION

__all__ = ["LabelPlan", "NodeChange", "plan_labels", "print_plan"]


@dataclass(frozen=True, slots=True)
class NodeChange:
    """The labels one node needs set and removed; ``current`` holds the values before;
    ``annotations``: tpfabric's annotations to set (None: to remove), with their values before."""

    node: str
    to_set: dict[str, str]
    to_remove: list[str]
    current: dict[str, str]
    annotations: dict[str, str | None] = field(default_factory=dict)
    current_annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LabelPlan:
    """What ``label`` changes: per node, and the nodes on only one side."""

    changes: tuple[NodeChange, ...]
    unchanged: tuple[str, ...]
    not_in_cluster: tuple[str, ...]
    not_in_fabric: tuple[str, ...]


def plan_labels(
    desired: Mapping[str, Mapping[str, str]],
    current: Mapping[str, Mapping[str, str]],
    leave: frozenset[str] = frozenset(),
    *,
    desired_annotations: Mapping[str, Mapping[str, str]] | None = None,
    current_annotations: Mapping[str, Mapping[str, str]] | None = None,
) -> LabelPlan:
    """Return the label changes that make every cluster node of the fabric carry exactly its
    ``desired`` ``topology.tpfabric.io/`` labels; cluster nodes outside the fabric are left
    alone, and so are the keys in ``leave`` (another writer's, e.g. the fabric agent's health).

    With ``current_annotations``, each node's ``topology.tpfabric.io/rail-ports`` is made what
    ``desired_annotations`` says: set where the source knows the node's port GUIDs, removed
    where it does not (a stale map would mislead the fabric agent and the pods)."""
    changes: list[NodeChange] = []
    unchanged: list[str] = []
    for node in sorted(set(desired) & set(current)):
        to_set, to_remove = label_diff(
            {k: v for k, v in current[node].items() if k not in leave},
            {k: v for k, v in desired[node].items() if k not in leave},
        )
        notes: dict[str, str | None] = {}
        before: dict[str, str] = {}
        if current_annotations is not None:
            before = dict(current_annotations.get(node, {}))
            wanted = (desired_annotations or {}).get(node, {}).get(RAIL_PORTS_ANNOTATION)
            if before.get(RAIL_PORTS_ANNOTATION) != wanted:
                notes[RAIL_PORTS_ANNOTATION] = wanted
        if to_set or to_remove or notes:
            changes.append(NodeChange(node, to_set, to_remove, dict(current[node]), notes, before))
        else:
            unchanged.append(node)
    return LabelPlan(
        changes=tuple(changes),
        unchanged=tuple(unchanged),
        not_in_cluster=tuple(sorted(set(desired) - set(current))),
        not_in_fabric=tuple(sorted(set(current) - set(desired))),
    )


def print_plan(plan: LabelPlan, applied: bool) -> None:
    for change in plan.changes:
        out.print(f"[bold]{escape(change.node)}[/]")
        for key, value in sorted(change.to_set.items()):
            was = change.current.get(key)
            note = f" [dim](was {escape(was)})[/]" if was is not None else ""
            out.print(f"  [green]+ {escape(key)}={escape(value)}[/]{note}")
        for key in change.to_remove:
            out.print(f"  [red]- {escape(key)}[/] [dim](was {escape(change.current[key])})[/]")
        for key, wanted in sorted(change.annotations.items()):
            if wanted is None:
                before = change.current_annotations.get(key, "")
                out.print(f"  [red]- annotation {escape(key)}[/] [dim](was {escape(before)})[/]")
            else:
                out.print(f"  [green]+ annotation {escape(key)}={escape(wanted)}[/]")
    total = len(plan.changes) + len(plan.unchanged)
    if not plan.changes:
        out.print(f"no changes: {total} node(s) already carry their labels")
    elif applied:
        out.print(f"patched {len(plan.changes)} of {total} node(s)")
    else:
        out.print(
            f"dry run: {len(plan.changes)} of {total} node(s) would change; --apply patches them"
        )
    if plan.not_in_cluster:
        out.print(
            f"[yellow]not in the cluster ({len(plan.not_in_cluster)}):[/] "
            f"{escape(compress_hostlist(list(plan.not_in_cluster)))}"
        )
    if plan.not_in_fabric:
        out.print(
            f"[yellow]not in the fabric, left alone ({len(plan.not_in_fabric)}):[/] "
            f"{escape(compress_hostlist(list(plan.not_in_fabric)))}"
        )
