"""The ``tpfabric topology`` commands: discover, show, label, export, profile, levels (from a
Kueue Topology: :mod:`.kueue_levels`), and their shared flags.

Each command reads one source (:mod:`.sources`), arranges it (:mod:`.domains`, :mod:`.labelling`)
and prints it (:mod:`.rendering`); none of them computes topology itself.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.markup import escape

from tpfabric_cli.errors import user_errors
from tpfabric_cli.options import KubeconfigOpt
from tpfabric_cli.topology.domains import domain_tree
from tpfabric_cli.topology.kueue_levels import levels_command
from tpfabric_cli.topology.labelling import plan_labels, print_plan
from tpfabric_cli.topology.rendering import (
    err,
    out,
    print_table,
    print_uncropped,
    render_tree,
    summary_line,
)
from tpfabric_cli.topology.sources import Discovery, Sources, discover, fabric_from_labels
from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.conventions import PRESETS
from tpfabric_core.fabric.slurm import (
    SlurmTopology,
    format_topology_conf,
    slurm_blocks_from_fabric,
    slurm_tree_from_fabric,
)

__all__ = ["EXIT_EMPTY", "app"]

app = typer.Typer(no_args_is_help=True, help="Discover, show, label and export the fabric.")

EXIT_EMPTY = 3  # the source is well-formed but names no cluster node


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
    typer.Option(
        "--slurm-topology",
        metavar="FILE",
        help="Slurm topology.conf (tree or block) or topology.yaml (its cluster_default).",
    ),
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
        err.print(escape(summary_line(discovery)))
    elif output_format is OutputFormat.YAML:
        document["ignored_hosts"] = [asdict(h) for h in discovery.ignored_hosts]
        document["degraded_links"] = [
            {"ends": [list(end) for end in d.key], "reasons": list(d.reasons)}
            for d in discovery.degraded_links
        ]
        document["warnings"] = list(discovery.warnings)
        typer.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
    else:
        print_table(discovery)
        out.print(escape(summary_line(discovery)))
    _warn(discovery)
    if discovery.levels:
        err.print(f"plan on these labels directly: --levels {escape(discovery.levels)}")
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
    print_uncropped(render_tree(tree, show_rails=rails))
    pictures = [(path, fmt) for path, fmt in ((svg, "svg"), (png, "png")) if path is not None]
    if pictures and not discovery.labels:
        names = " and ".join(escape(str(path)) for path, _ in pictures)
        err.print(f"[yellow]warning:[/] not drawing {names}: the fabric has no cluster node")
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
    leave_health: Annotated[
        bool,
        typer.Option(
            "--leave-health",
            help="Neither set nor remove topology.tpfabric.io/health: the fabric agent "
            "(chart value fabricAgent.enabled) owns it and keeps it live.",
        ),
    ] = False,
) -> None:
    """Print the topology.tpfabric.io/ label diff of every cluster node; --apply patches them.

    Only nodes that exist in both the fabric and the cluster are touched, and only their
    topology.tpfabric.io/ labels and their rail map (the annotation
    topology.tpfabric.io/rail-ports: rail -> port GUID, from a dump): stale ones are removed,
    others kept. A second run changes nothing.
    """
    from tpfabric_cli.kube_nodes import (  # noqa: PLC0415
        node_api,
        patch_node_labels,
        read_nodes,
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
        leave = frozenset({labels.HEALTH}) if leave_health else frozenset()
        nodes = read_nodes(core)
        plan = plan_labels(
            discovery.labels,
            {node.name: node.labels for node in nodes},
            leave,
            desired_annotations=discovery.annotations,
            current_annotations={node.name: node.annotations for node in nodes},
        )
        if apply:
            for change in plan.changes:
                patch_node_labels(
                    core, change.node, change.to_set, change.to_remove, change.annotations
                )
    print_plan(plan, applied=apply)


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


# -- the fabric's contract ----------------------------------------------------------------------


@app.command("profile")
@user_errors
def profile_command(
    opensm_conf: Annotated[
        Path | None,
        typer.Option("--opensm-conf", metavar="FILE", help="OpenSM/UFM opensm.conf (InfiniBand)."),
    ] = None,
    mlnx_qos: Annotated[
        Path | None,
        typer.Option(
            "--mlnx-qos", metavar="FILE", help="Output of `mlnx_qos -i <if>` on a node (RoCE)."
        ),
    ] = None,
    dscp: Annotated[
        int | None,
        typer.Option(
            "--dscp", help="The DSCP RoCE traffic is marked with (several PFC priorities)."
        ),
    ] = None,
    ecmp_level: Annotated[
        list[str] | None,
        typer.Option(
            "--ecmp-level",
            help="A plan level whose gangs cross an ECMP tier (repeatable), e.g. spine.",
        ),
    ] = None,
) -> None:
    """Print the chart's fabric.profile values read from the fabric's own settings."""
    from tpfabric_core.fabric.profile_discovery import (  # noqa: PLC0415
        from_mlnx_qos,
        from_opensm_conf,
    )
    from tpfabric_core.fabric_profile import parse_fabric_profile  # noqa: PLC0415

    if (opensm_conf is None) == (mlnx_qos is None):
        raise InputError("--opensm-conf/--mlnx-qos", "give exactly one of them",
                         "--opensm-conf for InfiniBand, --mlnx-qos for RoCE")  # fmt: skip
    path = opensm_conf or mlnx_qos
    assert path is not None
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(str(path), f"cannot read it: {error.strerror}") from error
    found = (
        from_opensm_conf(text, str(path))
        if opensm_conf is not None
        else from_mlnx_qos(text, str(path), dscp)
    )
    if ecmp_level:
        found.profile["ecmp"] = {"levels": list(ecmp_level)}
    parse_fabric_profile(json.dumps(found.profile), "the values found")  # a profile the chart takes
    for note in found.notes:
        err.print(f"[dim]{escape(note)}[/]")
    out.print(
        yaml.safe_dump({"fabric": {"profile": found.profile}}, sort_keys=False).rstrip(),
        markup=False,
        highlight=False,
    )


app.command("levels")(levels_command)
