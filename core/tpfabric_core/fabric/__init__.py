"""The fabric model, its importers and exporters, and the node labels derived from it.

Everything here is pure: text in, data out. Nothing in this package may read a file, talk to
Kubernetes, start a process or open a socket; the CLI, the fabric agent and the operator are the
adapters that do.

Modules, by concern:

- :mod:`.model`: the immutable :class:`~.model.Fabric` (a frozen networkx graph plus maps
  precomputed at build time);
- :mod:`.builder`: :class:`~.builder.FabricBuilder` and the fabric of a description file;
- :mod:`.ibnetdiscover`, :mod:`.slurm` (with :mod:`.slurm_yaml`), :mod:`.conventions`: importers;
- :mod:`.link_snapshot_judge`: a fabric-wide port-counter snapshot judged into degraded cables;
- :mod:`.rails`: rail detection and cabling anomalies;
- :mod:`.node_labels`: the canonical ``topology.tpfabric.io/`` labels and the label diff;
- :mod:`.link_samples` -> :mod:`.link_judge` -> :mod:`.link_publish`: live link health of one
  node, read -> judge -> publish (what the fabric agent reads from sysfs, in
  :mod:`tpfabric_fabric_agent.link_read`; counter series judged with hysteresis; the published
  condition/label/annotation and the suspect rail switches they point at);
- :mod:`.generator`: synthetic fabrics for tests and benchmarks, and their writers.
"""

from __future__ import annotations

from tpfabric_core.fabric.builder import FabricBuilder, fabric_from_description
from tpfabric_core.fabric.model import Fabric, Hca, HcaRole, Link, Switch

__all__ = [
    "Fabric",
    "FabricBuilder",
    "Hca",
    "HcaRole",
    "Link",
    "Switch",
    "fabric_from_description",
]
