"""``tpfabric_build_info``: which build of which component a scrape came from, as Kubernetes
components export ``kubernetes_build_info``: a gauge of 1 whose labels say it (the component,
tpfabric's version, the Python it runs on). Join it to any other series of the same target to
tell a rollout's old and new replicas apart.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

__all__ = ["BUILD_INFO_NAME", "build_info", "tpfabric_version"]

BUILD_INFO_NAME = "tpfabric_build_info"


def tpfabric_version() -> str:
    """Return the installed tpfabric's version ("unknown" when it is not installed)."""
    try:
        return metadata.version("tpfabric")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_info(component: str, registry: CollectorRegistry = REGISTRY) -> Gauge:
    """Register ``tpfabric_build_info{component,version,python_version} 1`` in ``registry``
    (default: the process's, which every component serves); return the gauge."""
    gauge = Gauge(
        BUILD_INFO_NAME,
        "A metric with a constant value of 1 labelled by the component, tpfabric's version and "
        "the Python version it runs on.",
        ["component", "version", "python_version"],
        registry=registry,
    )
    gauge.labels(component, tpfabric_version(), platform.python_version()).set(1)
    return gauge
