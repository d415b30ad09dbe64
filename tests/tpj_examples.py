"""TensorParallelJob manifests shared by the unit tests (pydantic) and the integration tests (the
real API server with the generated CRD): both must accept the valid ones and reject the invalid
ones on the same field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).parents[1] / "examples" / "jobs"


def valid_jobs() -> dict[str, dict[str, Any]]:
    """Return the example manifests by file stem."""
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))}


def base_job(name: str = "job") -> dict[str, Any]:
    """Return a small valid manifest to derive invalid ones from."""
    return {
        "apiVersion": "tpfabric.io/v1alpha1",
        "kind": "TensorParallelJob",
        "metadata": {"name": name},
        "spec": {
            "workers": 2,
            "gpusPerWorker": 8,
            "tensorParallelSize": 8,
            "template": {"spec": {"containers": [{"name": "w", "image": "busybox"}]}},
        },
    }


def _with(path: str, value: Any) -> dict[str, Any]:
    job = copy.deepcopy(base_job())
    target = job["spec"]
    *parents, last = path.split(".")
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return job


#: case -> (manifest, the field path both validators must name)
INVALID_JOBS: dict[str, tuple[dict[str, Any], str]] = {
    "negative-workers": (_with("workers", -2), "spec.workers"),
    "tp-does-not-divide-gpus": (_with("tensorParallelSize", 3), "spec.tensorParallelSize"),
    "world-not-divisible": (
        _with("pipelineParallelSize", 3),
        "spec.pipelineParallelSize",
    ),
    "invalid-level-name": (_with("topology.level", "Rack_1"), "spec.topology.level"),
    "bad-resource-name": (_with("rdma.resourceName", "rdma"), "spec.rdma.resourceName"),
    "template-without-containers": (
        _with("template", {"spec": {"containers": []}}),
        "spec.template.spec.containers",
    ),
    "unknown-gpudirect-policy": (_with("rdma.gpuDirect", "sometimes"), "spec.rdma.gpuDirect"),
    "nccl-key-not-nccl": (_with("nccl", {"LD_PRELOAD": "x"}), "spec.nccl"),
    "replace-worker-with-static-rendezvous": (
        _with("failurePolicy.restartStrategy", "ReplaceWorker"),
        "spec.failurePolicy.restartStrategy",
    ),
    "unknown-success-policy": (_with("successPolicy", "Majority"), "spec.successPolicy"),
    "unknown-failure-action": (
        _with("failurePolicy.rules", [{"action": "Retry", "onExitCodes": [1]}]),
        "spec.failurePolicy.rules[0].action",
    ),
}
