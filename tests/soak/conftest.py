"""The soak tier's fixtures: the local control plane of :mod:`control_plane_fixtures` (shared with
the integration tier), with tpfabric's scheduling started."""

from __future__ import annotations

from control_plane_fixtures import (
    _components_survive,
    api,
    local_cluster,
    tpfabric_scheduling,
)

__all__ = [
    "_components_survive",
    "api",
    "local_cluster",
    "tpfabric_scheduling",
]
