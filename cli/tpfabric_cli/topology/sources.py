"""Where ``tpfabric topology`` reads a fabric from: exactly one source per command.

Each source (an ibnetdiscover dump, a Slurm ``topology.conf``, another convention's node labels, a
fabric description, or the live cluster's labels) becomes one :class:`Discovery`: the canonical
labels of every node, plus what the source reported (cabling anomalies, unassigned HCAs, ignored
hosts, degraded links, warnings). This module reads and converts; it never prints, and it reads the
cluster only through :mod:`tpfabric_cli.kube_nodes`.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from tpfabric_cli.topology.node_health import NodeHealth, node_health
from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.builder import FabricBuilder, fabric_from_description
from tpfabric_core.fabric.conventions import (
    PRESETS,
    Convention,
    canonical_labels,
    detect_convention,
    levels_flag,
    tiers_above_block,
)
from tpfabric_core.fabric.ibnetdiscover import (
    IbnetdiscoverOptions,
    IbnetdiscoverReport,
    IgnoredHost,
    UnassignedHca,
    parse_guid_map,
    parse_ibnetdiscover,
)
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    suspect_rail_switches,
)
from tpfabric_core.fabric.link_snapshot_judge import (
    DegradedLink,
    apply_link_health,
    parse_counters_json,
)
from tpfabric_core.fabric.model import Fabric, HcaRole
from tpfabric_core.fabric.node_labels import fabric_node_labels
from tpfabric_core.fabric.rails import CablingAnomaly, analyze_rails
from tpfabric_core.fabric.slurm import fabric_from_slurm, parse_slurm_topology
from tpfabric_core.fabric_description import parse_fabric_description, pydantic_error_path
from tpfabric_core.hostlist import compress_hostlist
from tpfabric_core.input_limits import check_yaml_text
from tpfabric_core.rail_ports import RAIL_PORTS_ANNOTATION, rail_ports_of
from tpfabric_fabric_agent.link_read import read_sysfs_counters

if TYPE_CHECKING:
    from tpfabric_cli.kube_nodes import NodeState

__all__ = [
    "Discovery",
    "Sources",
    "discover",
    "fabric_from_labels",
    "load_mapping",
    "nodes_discovery",
]

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
    name: str = ""
    """The source's short name for titles: a file's name without its folders."""
    health: Mapping[str, NodeHealth] = field(default_factory=dict)
    """The unhealthy nodes the live cluster reports (``--cluster`` only), by node."""
    suspect_switches: frozenset[str] = frozenset()
    """Rail leaf switches (label values) that several nodes' sick rails point at."""
    levels: str = ""
    """The scheduler's ``--levels`` that plans on the source's own label keys (label sources)."""

    @property
    def title(self) -> str:
        """Return the short name of the source (its full name when it has none)."""
        return self.name or self.source

    @property
    def annotations(self) -> dict[str, dict[str, str]]:
        """Return the annotations of every node whose rails' port GUIDs the source knows (its
        ``topology.tpfabric.io/rail-ports``, from a dump)."""
        fabric = self.fabric
        if fabric is None:
            return {}
        known = set(fabric.nodes)
        return {
            node: {RAIL_PORTS_ANNOTATION: value}
            for node in sorted(self.labels)
            if node in known and (value := rail_ports_of(fabric, node)) is not None
        }

    def document(self) -> dict[str, Any]:
        """Return the ``discover --format json`` document: nodes (their labels, and their rail
        map where the source knows one), anomalies, unassigned HCAs."""
        annotations = self.annotations
        return {
            "nodes": {
                node: {"labels": dict(lbl)}
                | ({"annotations": annotations[node]} if node in annotations else {})
                for node, lbl in sorted(self.labels.items())
            },
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
        topology = parse_slurm_topology(_read_text(path, "Slurm topology"), str(path))
        imported = fabric_from_slurm(topology)
        return _from_fabric(str(path), imported.fabric, sources, imported.warnings)
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
    # Cables the source itself marks degraded (an ibnetdiscover cable whose ends report different
    # rates); --counters, when given, decides every cable's health instead.
    degraded = tuple(
        DegradedLink(link.key, ("marked degraded by the source",)) for link in fabric.degraded_links
    )
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
        name=Path(source).name,
    )


def load_mapping(path: Path, what: str) -> Any:
    """Return the YAML/JSON document in ``path``; InputError with the line when malformed."""
    text = _read_text(path, what)
    try:
        check_yaml_text(text, str(path))
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InputError(where, f"not valid YAML or JSON: {error.problem}") from error
    except yaml.YAMLError as error:
        raise InputError(str(path), f"not valid YAML or JSON: {error}") from error


_LABEL_SHAPES = (
    "{node: {label key: value}}, `kubectl get nodes -o json`, or AWS's "
    '{"Nodes": [{"Name": node, "Topology": {label key: value}}]}'
)


def _shape(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({str(value)[:40]!r})"


def _node_label_maps(data: Any, source: str) -> dict[str, dict[str, str]]:
    """Return ``{node: labels}`` from ``{node: {key: value}}``, a Kubernetes NodeList, or the
    shape AWS documents for EKS topology labels (aws/aws-ofi-nccl ``doc/topology-aware.md``)."""
    if isinstance(data, dict) and isinstance(data.get("Nodes"), list):
        nodes = data["Nodes"]
        if not all(isinstance(n, dict) and isinstance(n.get("Name"), str) for n in nodes):
            raise InputError(
                f"{source}: Nodes",
                f"every item needs a 'Name' and a 'Topology'; expected {_LABEL_SHAPES}",
            )
        data = {n["Name"]: n.get("Topology") or {} for n in nodes}
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = {
            (item.get("metadata") or {}).get("name"): (item.get("metadata") or {}).get("labels")
            or {}
            for item in data["items"]
            if isinstance(item, dict)
        }
    if not isinstance(data, dict):
        raise InputError(source, f"expected {_LABEL_SHAPES}, found {_shape(data)}")
    result: dict[str, dict[str, str]] = {}
    for node, node_labels in data.items():
        if not isinstance(node, str) or not isinstance(node_labels, dict):
            raise InputError(
                f"{source}: {node}",
                f"a node's labels must be a mapping of label keys to values, found "
                f"{_shape(node_labels)}; the file should be {_LABEL_SHAPES}",
            )
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
    data = load_mapping(path, "convention")
    try:
        return Convention.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = f"{path}: {pydantic_error_path(first['loc'])}"
        raise InputError(where, first["msg"].removeprefix("Value error, ")) from error


def _from_labels(path: Path, convention_name: str) -> Discovery:
    nodes = _node_label_maps(load_mapping(path, "node labels"), str(path))
    convention = _convention(convention_name, nodes, str(path))
    canonical = canonical_labels(nodes, convention)
    warnings = []
    if missing := sorted(set(nodes) - set(canonical)):
        warnings.append(
            f"{len(missing)} node(s) carry none of the {convention.name} keys: "
            f"{compress_hostlist(missing)}"
        )
    above = {node: tiers_above_block(lbl, convention) for node, lbl in nodes.items()}
    if high := sorted(node for node, keys in above.items() if keys):
        keys = sorted({key for node in high for key in above[node]})
        warnings.append(
            f"{len(high)} node(s) carry tiers above block ({', '.join(keys)}): the "
            "topology.tpfabric.io/ labels stop at block; the --levels printed last keeps the "
            "tiers every node has"
        )
    return Discovery(
        f"{path} ({convention.name})", canonical, warnings=tuple(warnings),
        name=f"{path.name} ({convention.name})", levels=levels_flag(nodes, convention) or "",
    )  # fmt: skip


def _from_cluster(kubeconfig: Path | None) -> Discovery:
    from tpfabric_cli.kube_nodes import node_api, read_nodes  # noqa: PLC0415

    with node_api(kubeconfig) as core:
        return nodes_discovery(read_nodes(core))


def nodes_discovery(nodes: Sequence[NodeState]) -> Discovery:
    """Return the discovery of the tpfabric labels and fabric health of ``nodes`` (read from
    the cluster: every node, or those of one job)."""
    ours = {
        node.name: {k: v for k, v in node.labels.items() if k.startswith(labels.PREFIX)}
        for node in nodes
    }
    labelled = {node: lbl for node, lbl in ours.items() if lbl}
    health: dict[str, NodeHealth] = {}
    for node in nodes:
        condition = node.conditions.get(CONDITION_TYPE)
        found = node_health(node.labels, condition, node.annotations.get(DETAIL_ANNOTATION))
        if found is not None and node.name in labelled:
            health[node.name] = found
    suspects = suspect_rail_switches(
        {name: (labelled[name], found.rails) for name, found in health.items()}
    )
    warnings = [suspect.message for suspect in suspects]
    if unlabelled := sorted(set(ours) - set(labelled)):
        warnings.append(
            f"{len(unlabelled)} node(s) carry no {labels.PREFIX} label: "
            f"{compress_hostlist(unlabelled)}"
        )
    return Discovery(
        "the cluster's node labels", labelled, warnings=tuple(warnings), health=health,
        suspect_switches=frozenset(suspect.switch for suspect in suspects),
    )  # fmt: skip


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
