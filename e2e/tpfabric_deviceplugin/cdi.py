"""CDI output of the shared mode: the spec file a CDI-enabled runtime reads, and the annotation.

As ``k8s-rdma-shared-dev-plugin --use-cdi`` does: one CDI device per selected HCA, named by its
PCI address, whose container edits are the HCA's ``/dev/infiniband`` nodes; the kind is
``<resource prefix>/<resource name>``; Allocate answers with the annotation
``cdi.k8s.io/<prefix>_<name>: <kind>=<pci>,...`` instead of DeviceSpecs. This module only renders
and writes the spec below ``cdi_dir``; it must never touch the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CDI_VERSION", "annotation", "cdi_kind", "spec", "write_spec"]

CDI_VERSION = "0.6.0"


def cdi_kind(resource_name: str) -> str:
    """Return the CDI kind of a resource (``rdma/hca_shared_devices_a`` is already one)."""
    return resource_name if "/" in resource_name else f"rdma/{resource_name}"


def spec(resource_name: str, devices: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """Return the CDI spec: one device per PCI address with its (container, host) nodes."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(resource_name),
        "devices": [
            {
                "name": name,
                "containerEdits": {
                    "deviceNodes": [
                        {"path": path, "hostPath": host, "permissions": "rw"}
                        for path, host in nodes
                    ]
                },
            }
            for name, nodes in devices.items()
        ],
    }


def write_spec(cdi_dir: Path, data: dict[str, Any]) -> Path:
    """Return the spec file written (atomically) to ``<cdi_dir>/<vendor>_<class>.json``."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path: Path = cdi_dir / (str(data["kind"]).replace("/", "_") + ".json")
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def annotation(resource_name: str, names: list[str]) -> dict[str, str]:
    """Return the container annotation that asks the runtime for the CDI devices ``names``."""
    kind = cdi_kind(resource_name)
    return {f"cdi.k8s.io/{kind.replace('/', '_')}": ",".join(f"{kind}={n}" for n in names)}
