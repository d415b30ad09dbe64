"""``tpfabric topology``: discover, show, label and export the fabric.

Every command reads the fabric from exactly one source:

- ``--ibnetdiscover FILE`` (``-`` for stdin), with an optional ``--node-map FILE`` (GUID -> node)
  and ``--node-pattern REGEX`` (only matching hosts are cluster nodes);
- ``--slurm-topology FILE``: a Slurm ``topology.conf`` (tree or block) or ``topology.yaml``;
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

The package by concern: :mod:`.sources` (reading), :mod:`.node_health` (the live cluster's
fabric health), :mod:`.domains` (the tree to show), :mod:`.rendering` (printing),
:mod:`.labelling` (label plans), :mod:`.commands` (the CLI).
"""

from __future__ import annotations

from tpfabric_cli.topology.commands import EXIT_EMPTY, app
from tpfabric_cli.topology.domains import (
    BlockView,
    DomainTree,
    LeafDomainView,
    SpineView,
    domain_tree,
)
from tpfabric_cli.topology.labelling import LabelPlan, NodeChange, plan_labels
from tpfabric_cli.topology.sources import Discovery, Sources, discover, fabric_from_labels

__all__ = [
    "EXIT_EMPTY",
    "BlockView",
    "Discovery",
    "DomainTree",
    "LabelPlan",
    "LeafDomainView",
    "NodeChange",
    "Sources",
    "SpineView",
    "app",
    "discover",
    "domain_tree",
    "fabric_from_labels",
    "plan_labels",
]
