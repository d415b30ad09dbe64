"""The integration tier's fixtures: those of :mod:`control_plane_fixtures` (one local control
plane per session, a namespace per test, fake GPU nodes), which the soak tier shares."""

from __future__ import annotations

from control_plane_fixtures import (
    _components_survive,
    api,
    chart_identities,
    fabric_nodes,
    fake_nodes,
    local_cluster,
    namespace,
    oldest_cluster,
    scheduling,
    tpfabric_scheduling,
)

__all__ = [
    "_components_survive",
    "api",
    "chart_identities",
    "fabric_nodes",
    "fake_nodes",
    "local_cluster",
    "namespace",
    "oldest_cluster",
    "scheduling",
    "tpfabric_scheduling",
]
