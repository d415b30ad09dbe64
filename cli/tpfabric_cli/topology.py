"""``tpfabric topology``: discover, show, label and export the fabric.

Every command reads the fabric from exactly one source:

- ``--ibnetdiscover FILE`` (``-`` for stdin), with an optional ``--node-map FILE`` (GUID -> node)
  and ``--node-pattern REGEX`` (only matching hosts are cluster nodes);
- ``--slurm-topology FILE``: a Slurm tree ``topology.conf``;
- ``--labels-from FILE --convention NAME|FILE``: existing node labels of another convention, as
  ``{node: {key: value}}`` or a ``kubectl get nodes -o json`` list;
- ``--fabric FILE``: a fabric description (the local cluster's YAML);
- ``--cluster``: the live nodes' ``topology.tpfabric.io/`` labels (``show`` and ``export`` only);

plus ``--counters FILE|DIR`` (port counters, JSON or a sysfs tree) to mark degraded links.

Exit codes: 0 ok; 1 the API server or the environment failed; 2 bad input (one line that names
the file and line, or the flag); 3 the source is well-formed but names no cluster node, e.g. an
ibnetdiscover dump taken from a lone HCA (the empty result is still printed, with a warning on
stderr), so scripts never label a cluster from nothing.

The topology itself is computed by ``tpfabric_core.fabric``; this module only chooses the source,
arranges results for display and prints them. It must never talk to the API server except through
:mod:`tpfabric_cli.kube_nodes`, and never write labels outside ``topology.tpfabric.io/``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.tree import Tree

from tpfabric_cli.errors import user_errors
from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder, fabric_from_description
from tpfabric_core.fabric.conventions import (
    PRESETS,
    Convention,
    canonical_labels,
    detect_convention,
)
from tpfabric_core.fabric.health import (
    DegradedLink,
    apply_link_health,
    parse_counters_json,
    read_sysfs_counters,
)
from tpfabric_core.fabric.ibnetdiscover import (
    IbnetdiscoverOptions,
    IbnetdiscoverReport,
    IgnoredHost,
    UnassignedHca,
    parse_guid_map,
    parse_ibnetdiscover,
)
from tpfabric_core.fabric.model import Fabric, HcaRole
from tpfabric_core.fabric.node_labels import fabric_node_labels, label_diff
from tpfabric_core.fabric.rails import CablingAnomaly, analyze_rails
from tpfabric_core.fabric.slurm import (
    SlurmTopology,
    fabric_from_slurm_tree,
    format_topology_conf,
    parse_topology_conf,
    slurm_blocks_from_fabric,
    slurm_tree_from_fabric,
)
from tpfabric_core.fabric_description import parse_fabric_description, pydantic_error_path
from tpfabric_core.hostlist import compress_hostlist

__all__ = [
    "EXIT_EMPTY",
    "BlockView",
    "Discovery",
    "DomainTree",
    "LabelPlan",
    "LeafDomainView",
    "NodeChange",
    "SpineView",
    "app",
    "domain_tree",
    "fabric_from_labels",
    "plan_labels",
]

app = typer.Typer(no_args_is_help=True, help="Discover, show, label and export the fabric.")

EXIT_EMPTY = 3  # the source is well-formed but names no cluster node

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

_RAIL_KEY = re.compile(rf"^{re.escape(labels.PREFIX)}rail-(\d+)$")
_UNKNOWN = "(none)"
_MEASURE_WIDTH = 10_000


# -- what a source yields ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Discovery:
    """The canonical labels of every node a source names, and what the source reports."""

    source: str
    labels: dict[str, dict[str, str]]
    fabric: Fabric | None = None
    anomalies: tuple[CablingAnomaly, ...] = ()
    unassigned_hcas: tuple[UnassignedHca, ...] = ()
    ignored_hosts: tuple[IgnoredHost, ...] = ()
    degraded_links: tuple[DegradedLink, ...] = ()
    warnings: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """Return the ``discover --format json`` document: nodes, anomalies, unassigned HCAs."""
        return {
            "nodes": {node: {"labels": dict(lbl)} for node, lbl in sorted(self.labels.items())},
            "anomalies": [asdict(a) for a in self.anomalies],
            "unassigned_hcas": [asdict(h) for h in self.unassigned_hcas],
        }


@dataclass(frozen=True, slots=True)
class Sources:
    """The source flags of one command, before they are read."""

    ibnetdiscover: Path | None = None
    node_map: Path | None = None
    node_pattern: str | None = None
    slurm_topology: Path | None = None
    labels_from: Path | None = None
    convention: str = "auto"
    fabric: Path | None = None
    counters: Path | None = None
    cluster: bool = False
    kubeconfig: Path | None = None


def _read_text(path: Path, what: str) -> str:
    """Return the text of ``path`` (stdin for ``-``); InputError naming the file otherwise."""
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise InputError(str(path), f"cannot read {what}: {reason}") from error


def discover(sources: Sources) -> Discovery:
    """Return what the one source in ``sources`` says about the fabric (``--counters`` applied)."""
    given = {
        "--ibnetdiscover": sources.ibnetdiscover,
        "--slurm-topology": sources.slurm_topology,
        "--labels-from": sources.labels_from,
        "--fabric": sources.fabric,
        "--cluster": sources.cluster or None,
    }
    chosen = [flag for flag, value in given.items() if value is not None]
    if len(chosen) != 1:
        names = ", ".join(chosen) if chosen else "none"
        raise InputError(
            "source",
            f"give exactly one fabric source (given: {names})",
            "use --ibnetdiscover FILE, --slurm-topology FILE, --labels-from FILE, --fabric FILE "
            "or, where offered, --cluster",
        )
    if sources.node_map is not None and sources.ibnetdiscover is None:
        raise InputError("--node-map", "only applies to --ibnetdiscover")
    if sources.node_pattern is not None and sources.ibnetdiscover is None:
        raise InputError("--node-pattern", "only applies to --ibnetdiscover")
    if sources.counters is not None and (sources.labels_from or sources.cluster):
        raise InputError(
            "--counters", "needs a cabled fabric (--ibnetdiscover, --slurm-topology or --fabric)"
        )
    if sources.ibnetdiscover is not None:
        fabric, report = _from_ibnetdiscover(sources, sources.ibnetdiscover)
        return _from_fabric(
            str(sources.ibnetdiscover), fabric, sources, report.warnings,
            unassigned=report.unassigned_hcas, ignored=report.ignored_hosts,
        )  # fmt: skip
    if sources.slurm_topology is not None:
        path = sources.slurm_topology
        topology = parse_topology_conf(_read_text(path, "topology.conf"), str(path))
        if not topology.switches:
            raise InputError(
                str(path),
                "has no SwitchName lines: a block topology names no switches to build a fabric of",
                "give a tree topology (topology/tree)",
            )
        return _from_fabric(str(path), fabric_from_slurm_tree(topology), sources, ())
    if sources.fabric is not None:
        path = sources.fabric
        description = parse_fabric_description(_read_text(path, "fabric file"), str(path))
        return _from_fabric(str(path), fabric_from_description(description), sources, ())
    if sources.labels_from is not None:
        return _from_labels(sources.labels_from, sources.convention)
    return _from_cluster(sources.kubeconfig)


def _from_ibnetdiscover(sources: Sources, path: Path) -> tuple[Fabric, IbnetdiscoverReport]:
    options = IbnetdiscoverOptions()
    if sources.node_pattern is not None:
        try:
            re.compile(sources.node_pattern)
        except re.error as error:
            raise InputError("--node-pattern", f"not a regular expression: {error}") from error
        options = IbnetdiscoverOptions(node_pattern=sources.node_pattern)
    guid_map = None
    if sources.node_map is not None:
        guid_map = parse_guid_map(_read_text(sources.node_map, "node map"), str(sources.node_map))
    text = _read_text(path, "ibnetdiscover dump")
    source = "<stdin>" if str(path) == "-" else str(path)
    return parse_ibnetdiscover(text, source, guid_map=guid_map, options=options)


def _from_fabric(
    source: str,
    fabric: Fabric,
    sources: Sources,
    warnings: tuple[str, ...],
    *,
    unassigned: tuple[UnassignedHca, ...] = (),
    ignored: tuple[IgnoredHost, ...] = (),
) -> Discovery:
    """Return the discovery of a cabled fabric: counters applied, rails analysed, labels made."""
    notes = list(warnings)
    degraded: tuple[DegradedLink, ...] = ()
    if sources.counters is not None:
        path = sources.counters
        if path.is_dir():
            counters = read_sysfs_counters(path)
        else:
            counters = parse_counters_json(_read_text(path, "counters"), str(path))
        fabric, health = apply_link_health(fabric, counters)
        degraded = health.degraded
        if health.unmatched:
            sample = ", ".join(health.unmatched[:3])
            more = f" and {len(health.unmatched) - 3} more" if len(health.unmatched) > 3 else ""
            notes.append(f"{path}: {len(health.unmatched)} entries match no cable: {sample}{more}")
    rails = analyze_rails(fabric)
    return Discovery(
        source=source,
        labels=fabric_node_labels(fabric),
        fabric=fabric,
        anomalies=rails.anomalies,
        unassigned_hcas=unassigned,
        ignored_hosts=ignored,
        degraded_links=degraded,
        warnings=tuple(notes),
    )


def _load_mapping(path: Path, what: str) -> Any:
    """Return the YAML/JSON document in ``path``; InputError with the line when malformed."""
    text = _read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InputError(where, f"not valid YAML or JSON: {error.problem}") from error
    except yaml.YAMLError as error:
        raise InputError(str(path), f"not valid YAML or JSON: {error}") from error


def _node_label_maps(data: Any, source: str) -> dict[str, dict[str, str]]:
    """Return ``{node: labels}`` from ``{node: {key: value}}`` or a Kubernetes NodeList."""
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = {
            (item.get("metadata") or {}).get("name"): (item.get("metadata") or {}).get("labels")
            or {}
            for item in data["items"]
            if isinstance(item, dict)
        }
    if not isinstance(data, dict):
        raise InputError(
            source, "expected a mapping {node: {label key: value}} or a `kubectl get nodes -o json`"
        )
    result: dict[str, dict[str, str]] = {}
    for node, node_labels in data.items():
        if not isinstance(node, str) or not isinstance(node_labels, dict):
            raise InputError(f"{source}: {node}", "expected a mapping of label keys to values")
        result[node] = {str(k): str(v) for k, v in node_labels.items() if v is not None}
    return result


def _convention(name: str, nodes: Mapping[str, Mapping[str, str]], source: str) -> Convention:
    """Return the convention ``--convention`` names: a preset, ``auto``, or a YAML file."""
    if name in PRESETS:
        return PRESETS[name]
    if name == "auto":
        found = detect_convention(nodes)
        if found is None:
            raise InputError(
                source,
                "no node carries the label keys of a known convention "
                f"({', '.join(sorted(PRESETS))})",
                "pass --convention FILE naming your keys (see --help)",
            )
        return found
    path = Path(name)
    if not path.is_file():
        raise InputError(
            "--convention",
            f"{name!r} is neither a preset ({', '.join(['auto', *sorted(PRESETS)])}) nor a file",
        )
    data = _load_mapping(path, "convention")
    try:
        return Convention.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = f"{path}: {pydantic_error_path(first['loc'])}"
        raise InputError(where, first["msg"].removeprefix("Value error, ")) from error


def _from_labels(path: Path, convention_name: str) -> Discovery:
    nodes = _node_label_maps(_load_mapping(path, "node labels"), str(path))
    convention = _convention(convention_name, nodes, str(path))
    canonical = canonical_labels(nodes, convention)
    warnings = []
    if missing := sorted(set(nodes) - set(canonical)):
        warnings.append(
            f"{len(missing)} node(s) carry none of the {convention.name} keys: "
            f"{compress_hostlist(missing)}"
        )
    return Discovery(f"{path} ({convention.name})", canonical, warnings=tuple(warnings))


def _from_cluster(kubeconfig: Path | None) -> Discovery:
    from tpfabric_cli.kube_nodes import node_api, read_node_labels  # noqa: PLC0415

    with node_api(kubeconfig) as core:
        nodes = read_node_labels(core)
    ours = {
        node: {k: v for k, v in lbl.items() if k.startswith(labels.PREFIX)}
        for node, lbl in nodes.items()
    }
    labelled = {node: lbl for node, lbl in ours.items() if lbl}
    warnings = []
    if unlabelled := sorted(set(nodes) - set(labelled)):
        warnings.append(
            f"{len(unlabelled)} node(s) carry no {labels.PREFIX} label: "
            f"{compress_hostlist(unlabelled)}"
        )
    return Discovery("the cluster's node labels", labelled, warnings=tuple(warnings))


# -- the domain tree that `show` prints and draws ------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeafDomainView:
    """A leaf domain: its nodes, the leaf switch of each rail, and what is off."""

    name: str
    nodes: tuple[str, ...]
    rails: tuple[tuple[int, str], ...]
    """(rail, leaf switch most of the domain's nodes use on it)."""
    odd_rails: tuple[tuple[str, int, str], ...] = ()
    """(node, rail, leaf switch) where a node departs from its domain."""
    degraded_nodes: tuple[str, ...] = ()
    degraded_switches: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SpineView:
    """A spine domain, its leaf domains and, when the cabling is known, its switch count."""

    name: str
    leaves: tuple[LeafDomainView, ...]
    switches: int | None = None

    @property
    def node_count(self) -> int:
        """Return the number of nodes under this spine domain."""
        return sum(len(leaf.nodes) for leaf in self.leaves)


@dataclass(frozen=True, slots=True)
class BlockView:
    """A block (core-tier domain) and its spine domains."""

    name: str
    spines: tuple[SpineView, ...]

    @property
    def node_count(self) -> int:
        """Return the number of nodes in this block."""
        return sum(spine.node_count for spine in self.spines)


@dataclass(frozen=True, slots=True)
class DomainTree:
    """Blocks -> spine domains -> leaf domains -> nodes, plus what the source reported."""

    title: str
    blocks: tuple[BlockView, ...]
    anomalies: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def leaf_domains(self) -> tuple[LeafDomainView, ...]:
        """Return every leaf domain, in display order."""
        return tuple(leaf for b in self.blocks for s in b.spines for leaf in s.leaves)

    @property
    def flat_blocks(self) -> bool:
        """Return whether every block is a single spine domain of the same name (no core tier)."""
        return all(len(b.spines) == 1 and b.spines[0].name == b.name for b in self.blocks)


def _rails_of(node_labels: Mapping[str, str]) -> dict[int, str]:
    """Return ``{rail: leaf switch}`` from a node's ``rail-<i>`` labels."""
    return {
        int(match[1]): value
        for key, value in node_labels.items()
        if (match := _RAIL_KEY.match(key)) is not None
    }


def _leaf_view(
    name: str,
    nodes: list[str],
    all_labels: Mapping[str, Mapping[str, str]],
    degraded: frozenset[str],
) -> LeafDomainView:
    """Return the view of one leaf domain: each rail's majority leaf and who departs from it."""
    per_rail: dict[int, Counter[str]] = defaultdict(Counter)
    node_rails = {node: _rails_of(all_labels[node]) for node in nodes}
    for rails in node_rails.values():
        for rail, switch in rails.items():
            per_rail[rail][switch] += 1
    main = {rail: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for rail, c in per_rail.items()}
    odd = tuple(
        (node, rail, switch)
        for node in nodes
        for rail, switch in sorted(node_rails[node].items())
        if switch != main[rail]
    )
    used = set(main.values()) | {switch for _, _, switch in odd}
    return LeafDomainView(
        name=name,
        nodes=tuple(nodes),
        rails=tuple(sorted(main.items())),
        odd_rails=odd,
        degraded_nodes=tuple(n for n in nodes if all_labels[n].get(labels.HEALTH) == "degraded"),
        degraded_switches=frozenset(used & degraded),
    )


def _spine_switch_counts(fabric: Fabric) -> dict[str, int]:
    """Return the number of spine switches above each spine domain's leaves."""
    spines: dict[str, set[str]] = defaultdict(set)
    seen: set[str] = set()
    for node in fabric.nodes:
        domain = fabric.spine_domain_of(node)
        for leaf in fabric.leaves_of(node):
            if leaf in seen:
                continue
            seen.add(leaf)
            spines[domain].update(link.other(leaf) for link in fabric.uplinks(leaf))
    return {domain: len(switches) for domain, switches in spines.items()}


def domain_tree(discovery: Discovery) -> DomainTree:
    """Return the blocks -> spines -> leaf domains -> nodes tree of a discovery, ordered by the
    first node name of each domain (ids are often hashes; host names read better)."""
    all_labels = discovery.labels
    grouped: dict[str, dict[str, dict[str, list[str]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for node in sorted(all_labels):
        lbl = all_labels[node]
        block = lbl.get(labels.BLOCK, _UNKNOWN)
        spine = lbl.get(labels.SPINE, _UNKNOWN)
        grouped[block][spine][lbl.get(labels.LEAF, _UNKNOWN)].append(node)
    fabric = discovery.fabric
    degraded = frozenset(
        labels.encode_label_value(leaf) for leaf in (fabric.degraded_leaves if fabric else ())
    )
    switch_counts = _spine_switch_counts(fabric) if fabric is not None else {}
    blocks = []
    for block, spines in grouped.items():
        spine_views = []
        for spine, leaves in spines.items():
            leaf_views = sorted(
                (_leaf_view(name, nodes, all_labels, degraded) for name, nodes in leaves.items()),
                key=lambda view: view.nodes[0],
            )
            spine_views.append(SpineView(spine, tuple(leaf_views), switch_counts.get(spine)))
        spine_views.sort(key=lambda view: view.leaves[0].nodes[0])
        blocks.append(BlockView(block, tuple(spine_views)))
    blocks.sort(key=lambda view: view.spines[0].leaves[0].nodes[0])

    leaves_count = sum(len(s.leaves) for b in blocks for s in b.spines)
    rails = sorted({r for lbl in all_labels.values() for r in _rails_of(lbl)})
    facts = [f"{len(all_labels)} nodes", f"{leaves_count} leaf domains"]
    if rails:
        facts.append(f"rails {compress_hostlist([str(r) for r in rails]).strip('[]')}")
    if fabric is not None:
        facts.append("rail-optimized" if any(len(fabric.leaves_of(n)) > 1 for n in fabric.nodes)
                     else "one leaf per node")  # fmt: skip
    notes = list(discovery.warnings)
    if discovery.unassigned_hcas:
        switches = {h.switch for h in discovery.unassigned_hcas if h.switch}
        notes.append(
            f"{len(discovery.unassigned_hcas)} unassigned HCAs (no host name) on "
            f"{len(switches)} switches: add them with --node-map"
        )
    notes.extend(
        f"ignored {h.host} ({h.reason}, {len(h.guids)} HCAs)" for h in discovery.ignored_hosts
    )
    return DomainTree(
        title=f"{discovery.source}: {', '.join(facts)}",
        blocks=tuple(blocks),
        anomalies=tuple(a.detail for a in discovery.anomalies),
        notes=tuple(notes),
    )


def _leaf_branch(parent: Tree, leaf: LeafDomainView, show_rails: bool) -> None:
    bad = f" · [red]{len(leaf.degraded_nodes)} degraded[/]" if leaf.degraded_nodes else ""
    branch = parent.add(f"[bold]leaf domain[/] {escape(leaf.name)} · {len(leaf.nodes)} nodes{bad}")
    branch.add(f"[cyan]{escape(compress_hostlist(list(leaf.nodes)))}[/]")
    if leaf.degraded_nodes:
        branch.add(f"[red]degraded: {escape(compress_hostlist(list(leaf.degraded_nodes)))}[/]")
    if not show_rails:
        return
    odd: dict[int, list[str]] = defaultdict(list)
    for node, rail, switch in leaf.odd_rails:
        mark = " [red]✗[/]" if switch in leaf.degraded_switches else ""
        odd[rail].append(f"{escape(node)} → {escape(switch)}{mark}")
    for rail, switch in leaf.rails:
        mark = " [red]✗ degraded[/]" if switch in leaf.degraded_switches else ""
        extra = f" [yellow](but {'; '.join(odd[rail])})[/]" if odd.get(rail) else ""
        branch.add(f"rail {rail} → {escape(switch)}{mark}{extra}")


def render_tree(tree: DomainTree, show_rails: bool = True) -> Tree:
    """Return the rich Tree of ``tree``: blocks, spine domains, leaf domains, rails, nodes."""
    root = Tree(f"[bold]{escape(tree.title)}[/]")
    for block in tree.blocks:
        parent = root
        if not tree.flat_blocks:
            parent = root.add(f"[bold]block[/] {escape(block.name)} · {block.node_count} nodes")
        for spine in block.spines:
            count = f" · {spine.switches} spine switches" if spine.switches else ""
            branch = parent.add(
                f"[bold]spine[/] {escape(spine.name)}{count} · {spine.node_count} nodes"
            )
            for leaf in spine.leaves:
                _leaf_branch(branch, leaf, show_rails)
    if tree.anomalies:
        branch = root.add(f"[yellow]cabling anomalies ({len(tree.anomalies)})[/]")
        for detail in tree.anomalies:
            branch.add(f"[yellow]{escape(detail)}[/]")
    for note in tree.notes:
        root.add(f"[dim]{escape(note)}[/]")
    return root


def _print_uncropped(renderable: Tree | Table) -> None:
    """Print a tree or table to stdout at least as wide as its widest line: rich crops at the
    console width (80 when piped), and a cropped switch id is worse than a long line."""
    measure = Console(width=_MEASURE_WIDTH)
    needed = Measurement.get(measure, measure.options, renderable).maximum
    Console(highlight=False, soft_wrap=True, width=max(out.width, needed)).print(renderable)


# -- labels from labels (for --cluster and --labels-from where a cabled fabric is needed) --------


def fabric_from_labels(node_labels: Mapping[str, Mapping[str, str]]) -> Fabric:
    """Return a fabric shaped like the labels: a switch per leaf domain, spine and block, one HCA
    per node on its leaf domain; domain ids are the label values. Nodes without a leaf label are
    left out."""
    builder = FabricBuilder()
    ports: Counter[str] = Counter()
    cabled: set[tuple[str, str]] = set()

    def switch(level: str, name: str) -> str:
        vertex = f"{level}/{name}"
        builder.add_switch(vertex, group=name)
        return vertex

    def cable(a: str, b: str) -> None:
        if (a, b) in cabled:
            return
        cabled.add((a, b))
        ports[a] += 1
        ports[b] += 1
        builder.add_link(a, ports[a], b, ports[b])

    for index, (node, lbl) in enumerate(sorted(node_labels.items()), 1):
        if labels.LEAF not in lbl:
            continue
        leaf = switch("leaf", lbl[labels.LEAF])
        if labels.SPINE in lbl:
            spine = switch("spine", lbl[labels.SPINE])
            cable(leaf, spine)
            if labels.BLOCK in lbl:
                cable(spine, switch("block", lbl[labels.BLOCK]))
        guid = f"{index:016x}"
        builder.add_hca(guid, f"{node} HCA-1", node, 0, HcaRole.NODE)
        ports[leaf] += 1
        builder.add_link(f"H-{guid}", 1, leaf, ports[leaf])
    return builder.build()


# -- label plans --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeChange:
    """The labels one node needs set and removed; ``current`` holds the values before."""

    node: str
    to_set: dict[str, str]
    to_remove: list[str]
    current: dict[str, str]


@dataclass(frozen=True, slots=True)
class LabelPlan:
    """What ``label`` changes: per node, and the nodes on only one side."""

    changes: tuple[NodeChange, ...]
    unchanged: tuple[str, ...]
    not_in_cluster: tuple[str, ...]
    not_in_fabric: tuple[str, ...]


def plan_labels(
    desired: Mapping[str, Mapping[str, str]], current: Mapping[str, Mapping[str, str]]
) -> LabelPlan:
    """Return the label changes that make every cluster node of the fabric carry exactly its
    ``desired`` ``topology.tpfabric.io/`` labels; cluster nodes outside the fabric are left
    alone."""
    changes: list[NodeChange] = []
    unchanged: list[str] = []
    for node in sorted(set(desired) & set(current)):
        to_set, to_remove = label_diff(current[node], desired[node])
        if to_set or to_remove:
            changes.append(NodeChange(node, to_set, to_remove, dict(current[node])))
        else:
            unchanged.append(node)
    return LabelPlan(
        changes=tuple(changes),
        unchanged=tuple(unchanged),
        not_in_cluster=tuple(sorted(set(desired) - set(current))),
        not_in_fabric=tuple(sorted(set(current) - set(desired))),
    )


def _print_plan(plan: LabelPlan, applied: bool) -> None:
    for change in plan.changes:
        out.print(f"[bold]{escape(change.node)}[/]")
        for key, value in sorted(change.to_set.items()):
            was = change.current.get(key)
            note = f" [dim](was {escape(was)})[/]" if was is not None else ""
            out.print(f"  [green]+ {escape(key)}={escape(value)}[/]{note}")
        for key in change.to_remove:
            out.print(f"  [red]- {escape(key)}[/] [dim](was {escape(change.current[key])})[/]")
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


# -- shared flags -------------------------------------------------------------------------------

IbnetdiscoverOpt = Annotated[
    Path | None,
    typer.Option("--ibnetdiscover", metavar="FILE", help="ibnetdiscover output ('-': stdin)."),
]
NodeMapOpt = Annotated[
    Path | None,
    typer.Option(
        "--node-map", metavar="FILE",
        help="GUID -> node map for HCAs without a host name: 'guid node' or 'guid node rail' "
        "lines, or YAML.",
    ),
]  # fmt: skip
NodePatternOpt = Annotated[
    str | None,
    typer.Option("--node-pattern", metavar="REGEX", help="Only matching hosts are cluster nodes."),
]
SlurmOpt = Annotated[
    Path | None,
    typer.Option("--slurm-topology", metavar="FILE", help="Slurm topology.conf (tree plugin)."),
]
LabelsFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--labels-from", metavar="FILE",
        help="Existing node labels of another convention: {node: {key: value}} (YAML/JSON) or "
        "`kubectl get nodes -o json`.",
    ),
]  # fmt: skip
ConventionOpt = Annotated[
    str,
    typer.Option(
        "--convention", metavar="NAME|FILE",
        help=f"Convention of --labels-from: auto, {', '.join(sorted(PRESETS))}, or a YAML file "
        "naming levels (name, levels: leaf/spine/block -> keys) or tiers (top key first).",
    ),
]  # fmt: skip
FabricOpt = Annotated[
    Path | None,
    typer.Option("--fabric", metavar="FILE", help="Fabric description YAML (examples/fabrics/)."),
]
CountersOpt = Annotated[
    Path | None,
    typer.Option(
        "--counters", metavar="FILE|DIR",
        help="Port counters (JSON snapshot, or a sysfs-style tree) marking degraded links.",
    ),
]  # fmt: skip
ClusterOpt = Annotated[
    bool, typer.Option("--cluster", help="Read the live nodes' topology.tpfabric.io/ labels.")
]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig", metavar="FILE",
        help="Kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).",
    ),
]  # fmt: skip


class OutputFormat(StrEnum):
    """Output formats of ``discover``."""

    JSON = "json"
    YAML = "yaml"
    TABLE = "table"


def _warn(discovery: Discovery) -> None:
    for warning in discovery.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")


def _exit_if_empty(discovery: Discovery) -> None:
    if not discovery.labels:
        err.print(
            f"[yellow]warning:[/] no cluster node found in {escape(discovery.source)} "
            f"(exit {EXIT_EMPTY})"
        )
        raise typer.Exit(EXIT_EMPTY)


def _summary(discovery: Discovery) -> str:
    parts = [f"{len(discovery.labels)} nodes", f"{len(discovery.anomalies)} cabling anomalies"]
    if discovery.fabric is not None:
        parts.append(f"{len(discovery.unassigned_hcas)} unassigned HCAs")
        parts.append(f"{len(discovery.degraded_links)} degraded links")
    if discovery.ignored_hosts:
        hosts = ", ".join(f"{h.host} ({h.reason})" for h in discovery.ignored_hosts)
        parts.append(f"ignored hosts: {hosts}")
    return f"{discovery.source}: " + "; ".join(parts)


def _print_table(discovery: Discovery) -> None:
    tree = domain_tree(discovery)
    table = Table("leaf domain", "nodes", "#", "spine", "block", "health", title=tree.title)
    for block in tree.blocks:
        for spine in block.spines:
            for leaf in spine.leaves:
                health = (f"[red]{len(leaf.degraded_nodes)} degraded[/]" if leaf.degraded_nodes
                          else "ok")  # fmt: skip
                table.add_row(
                    escape(leaf.name), escape(compress_hostlist(list(leaf.nodes))),
                    str(len(leaf.nodes)), escape(spine.name), escape(block.name), health,
                )  # fmt: skip
    _print_uncropped(table)
    if discovery.anomalies:
        anomalies = Table("kind", "node", "rail", "switch", "detail", title="cabling anomalies")
        for a in discovery.anomalies:
            anomalies.add_row(
                a.kind, a.node or "", "" if a.rail is None else str(a.rail), a.switch or "",
                escape(a.detail),
            )  # fmt: skip
        _print_uncropped(anomalies)
    if discovery.unassigned_hcas:
        by_switch = Counter(h.switch or "(not cabled)" for h in discovery.unassigned_hcas)
        unassigned = Table("switch", "HCAs", title="unassigned HCAs (map them with --node-map)")
        for switch, count in sorted(by_switch.items()):
            unassigned.add_row(switch, str(count))
        _print_uncropped(unassigned)
    if discovery.ignored_hosts:
        ignored = Table("host", "reason", "HCAs", title="hosts kept out of the node set")
        for host in discovery.ignored_hosts:
            ignored.add_row(escape(host.host), host.reason, str(len(host.guids)))
        _print_uncropped(ignored)


# -- commands -----------------------------------------------------------------------------------


@app.command("discover")
@user_errors
def discover_command(
    *,
    ibnetdiscover: IbnetdiscoverOpt = None,
    node_map: NodeMapOpt = None,
    node_pattern: NodePatternOpt = None,
    slurm_topology: SlurmOpt = None,
    labels_from: LabelsFromOpt = None,
    convention: ConventionOpt = "auto",
    fabric: FabricOpt = None,
    counters: CountersOpt = None,
    output_format: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help="json: the documented shape; yaml adds "
            "ignored hosts and warnings; table: a summary.",
        ),
    ] = OutputFormat.JSON,
) -> None:
    """Print the canonical labels of every node, the cabling anomalies and unassigned HCAs.

    JSON: {"nodes": {NODE: {"labels": {KEY: VALUE}}}, "anomalies": [...], "unassigned_hcas":
    [...]}; warnings and ignored hosts go to stderr. Exit 3 when the source names no node.
    """
    discovery = discover(
        Sources(
            ibnetdiscover=ibnetdiscover, node_map=node_map, node_pattern=node_pattern,
            slurm_topology=slurm_topology, labels_from=labels_from, convention=convention,
            fabric=fabric, counters=counters,
        )
    )  # fmt: skip
    document = discovery.document()
    if output_format is OutputFormat.JSON:
        typer.echo(json.dumps(document, indent=2))
        err.print(escape(_summary(discovery)))
    elif output_format is OutputFormat.YAML:
        document["ignored_hosts"] = [asdict(h) for h in discovery.ignored_hosts]
        document["degraded_links"] = [
            {"ends": [list(end) for end in d.key], "reasons": list(d.reasons)}
            for d in discovery.degraded_links
        ]
        document["warnings"] = list(discovery.warnings)
        typer.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
    else:
        _print_table(discovery)
        out.print(escape(_summary(discovery)))
    _warn(discovery)
    _exit_if_empty(discovery)


@app.command("show")
@user_errors
def show_command(
    *,
    ibnetdiscover: IbnetdiscoverOpt = None,
    node_map: NodeMapOpt = None,
    node_pattern: NodePatternOpt = None,
    slurm_topology: SlurmOpt = None,
    labels_from: LabelsFromOpt = None,
    convention: ConventionOpt = "auto",
    fabric: FabricOpt = None,
    counters: CountersOpt = None,
    cluster: ClusterOpt = False,
    kubeconfig: KubeconfigOpt = None,
    svg: Annotated[
        Path | None, typer.Option("--svg", metavar="OUT", help="Also draw the fabric as SVG.")
    ] = None,
    png: Annotated[
        Path | None, typer.Option("--png", metavar="OUT", help="Also draw the fabric as PNG.")
    ] = None,
    rails: Annotated[bool, typer.Option(help="List the leaf switch of every rail.")] = True,
) -> None:
    """Print the fabric as a tree (blocks, spines, leaf domains, rails, nodes); draw it too."""
    discovery = discover(
        Sources(
            ibnetdiscover=ibnetdiscover, node_map=node_map, node_pattern=node_pattern,
            slurm_topology=slurm_topology, labels_from=labels_from, convention=convention,
            fabric=fabric, counters=counters, cluster=cluster, kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    tree = domain_tree(discovery)
    _print_uncropped(render_tree(tree, show_rails=rails))
    pictures = [(path, fmt) for path, fmt in ((svg, "svg"), (png, "png")) if path is not None]
    if pictures and discovery.labels:
        from tpfabric_cli.fabric_picture import draw_fabric  # noqa: PLC0415

        for path, fmt in pictures:
            draw_fabric(tree, path, fmt)
            err.print(f"wrote {escape(str(path))}")
    _exit_if_empty(discovery)


@app.command("label")
@user_errors
def label_command(
    *,
    ibnetdiscover: IbnetdiscoverOpt = None,
    node_map: NodeMapOpt = None,
    node_pattern: NodePatternOpt = None,
    slurm_topology: SlurmOpt = None,
    labels_from: LabelsFromOpt = None,
    convention: ConventionOpt = "auto",
    fabric: FabricOpt = None,
    counters: CountersOpt = None,
    kubeconfig: KubeconfigOpt = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Patch the nodes (default: only print the diff).")
    ] = False,
) -> None:
    """Print the topology.tpfabric.io/ label diff of every cluster node; --apply patches them.

    Only nodes that exist in both the fabric and the cluster are touched, and only their
    topology.tpfabric.io/ labels: stale ones are removed, others kept. A second run changes nothing.
    """
    from tpfabric_cli.kube_nodes import (  # noqa: PLC0415
        node_api,
        patch_node_labels,
        read_node_labels,
    )

    discovery = discover(
        Sources(
            ibnetdiscover=ibnetdiscover, node_map=node_map, node_pattern=node_pattern,
            slurm_topology=slurm_topology, labels_from=labels_from, convention=convention,
            fabric=fabric, counters=counters,
        )
    )  # fmt: skip
    _warn(discovery)
    _exit_if_empty(discovery)
    with node_api(kubeconfig) as core:
        plan = plan_labels(discovery.labels, read_node_labels(core))
        if apply:
            for change in plan.changes:
                patch_node_labels(core, change.node, change.to_set, change.to_remove)
    _print_plan(plan, applied=apply)


def _block_sizes(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or any(size < 1 for size in sizes):
        raise InputError("--block-sizes", f"expected positive integers such as 16,32, got {text!r}")
    return sizes


@app.command("export")
@user_errors
def export_command(
    *,
    slurm: Annotated[bool, typer.Option("--slurm", help="Write Slurm topology.conf.")] = False,
    block: Annotated[
        bool, typer.Option("--block", help="topology/block (a block per leaf domain), not tree.")
    ] = False,
    block_sizes: Annotated[
        str | None,
        typer.Option("--block-sizes", metavar="N,M", help="BlockSizes= of the block plugin."),
    ] = None,
    ibnetdiscover: IbnetdiscoverOpt = None,
    node_map: NodeMapOpt = None,
    node_pattern: NodePatternOpt = None,
    slurm_topology: SlurmOpt = None,
    labels_from: LabelsFromOpt = None,
    convention: ConventionOpt = "auto",
    fabric: FabricOpt = None,
    cluster: ClusterOpt = False,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Print the fabric in another scheduler's format (today: Slurm topology.conf)."""
    if not slurm:
        raise InputError("format", "choose an export format", "pass --slurm (topology.conf)")
    sizes = _block_sizes(block_sizes)
    discovery = discover(
        Sources(
            ibnetdiscover=ibnetdiscover, node_map=node_map, node_pattern=node_pattern,
            slurm_topology=slurm_topology, labels_from=labels_from, convention=convention,
            fabric=fabric, cluster=cluster, kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    _warn(discovery)
    _exit_if_empty(discovery)
    shaped = discovery.fabric or fabric_from_labels(discovery.labels)
    topology: SlurmTopology = (
        slurm_blocks_from_fabric(shaped, sizes)
        if block or sizes
        else slurm_tree_from_fabric(shaped)
    )
    typer.echo(format_topology_conf(topology), nl=False)
