"""The scheduler plugin's one adapter to the API server: list+watch feeds of the store
(:mod:`.informers`, cutting each object down first: :mod:`.slim`) and the few writes the placer
makes (:mod:`.writer`: job status, pod affinity, gate removal, deletions, Events).

Nothing here decides anything.
"""

from __future__ import annotations

from tpfabric_scheduler.kube.informers import (
    LIST_PAGE_SIZE,
    POD_PAGE_SIZE,
    Informer,
    InformerKind,
    informer_kinds,
    list_pages,
    start_informers,
)
from tpfabric_scheduler.kube.slim import slim_job, slim_node, slim_pod
from tpfabric_scheduler.kube.writer import KubeWriter

__all__ = [
    "LIST_PAGE_SIZE",
    "POD_PAGE_SIZE",
    "Informer",
    "InformerKind",
    "KubeWriter",
    "informer_kinds",
    "list_pages",
    "slim_job",
    "slim_node",
    "slim_pod",
    "start_informers",
]
