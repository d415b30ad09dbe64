"""``tpfabric topology levels``: the topology levels tpfabric needs for a cluster that has a Kueue
``Topology``, read from a file or from the cluster (:mod:`tpfabric_core.kueue_topology` decides
them; this module reads and prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape

from tpfabric_cli.errors import user_errors
from tpfabric_cli.options import KubeconfigOpt
from tpfabric_cli.topology.rendering import err, out
from tpfabric_cli.topology.sources import load_mapping
from tpfabric_core.errors import InputError
from tpfabric_core.kueue_topology import KUEUE_GROUP, KueueLevels, levels_from_kueue_topology

__all__ = ["levels_command", "read_kueue_topology"]

_TIMEOUT_S = 30.0
#: the Topology API's versions, newest first (v1beta1 is deprecated since Kueue v0.15)
_VERSIONS = ("v1beta2", "v1beta1")


def read_kueue_topology(name: str, kubeconfig: Path | None) -> dict[str, Any]:
    """Return the Kueue Topology ``name`` from the cluster (its newest served version)."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415

    where = f"Topology {name}"
    with node_api(kubeconfig) as core:
        custom = client.CustomObjectsApi(core.api_client)
        for version in _VERSIONS:
            try:
                found: dict[str, Any] = custom.get_cluster_custom_object(
                    KUEUE_GROUP, version, "topologies", name, _request_timeout=_TIMEOUT_S
                )
            except ApiException as error:
                if error.status == 404:
                    continue
                if error.status == 403:
                    raise InputError(
                        where, "reading it is forbidden", "ask for get on topologies.kueue.x-k8s.io"
                    ) from error
                raise
            else:
                return found
    raise InputError(
        where,
        f"not found in {KUEUE_GROUP} {' or '.join(_VERSIONS)}",
        "check `kubectl get topologies.kueue.x-k8s.io`, or pass --kueue-topology FILE",
    )


def _print(levels: KueueLevels, output: str) -> None:
    if output == "levels":
        out.print(levels.text(), markup=False, highlight=False, soft_wrap=True)
        return
    if output == "values":
        text = yaml.safe_dump({"topology": {"levels": levels.text()}}, sort_keys=False)
        out.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)
        return
    out.print(f"Kueue Topology {escape(levels.topology or '(no name)')}, top level first:")
    for name, key in levels.levels:
        out.print(f"  {name:<8} {escape(key)}", highlight=False)
    for note in levels.notes:
        out.print(f"  ({escape(note)})", highlight=False)
    out.print(
        f"chart: --set topology.levels={escape(levels.text())}", highlight=False, soft_wrap=True
    )


@user_errors
def levels_command(
    *,
    kueue_topology: Annotated[
        Path | None,
        typer.Option(
            "--kueue-topology",
            metavar="FILE",
            help="A Kueue Topology object, YAML or JSON ('-': stdin).",
        ),
    ] = None,
    kueue_topology_name: Annotated[
        str | None,
        typer.Option(
            "--kueue-topology-name",
            metavar="NAME",
            help="Read the Kueue Topology NAME from the cluster instead.",
        ),
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="text (the levels, for people), levels (the topology.levels string), or values "
            "(a values file for the chart).",
        ),
    ] = "text",
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Print tpfabric's topology levels (the chart's topology.levels) for a Kueue Topology: the
    same node labels, top level first, named leaf, spine, block from the bottom."""
    if output not in ("text", "levels", "values"):
        raise InputError("--output", f"unknown format {output!r}", "use text, levels or values")
    if (kueue_topology is None) == (kueue_topology_name is None):
        raise InputError(
            "source",
            "give one Kueue Topology",
            "pass --kueue-topology FILE or --kueue-topology-name",
        )
    if kueue_topology is not None:
        where = str(kueue_topology)
        obj = load_mapping(kueue_topology, "Kueue Topology")
    else:
        assert kueue_topology_name is not None
        where = f"Topology {kueue_topology_name}"
        obj = read_kueue_topology(kueue_topology_name, kubeconfig)
    levels = levels_from_kueue_topology(obj, where)
    for note in levels.notes if output != "text" else ():  # the text says them itself
        err.print(f"[dim]{escape(note)}[/]")
    _print(levels, output)
