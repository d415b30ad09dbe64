"""TensorParallelJob manifests shared by the unit tests (pydantic) and the integration tests (the
real API server with the generated CRD): both must accept the valid ones and reject the invalid
ones on the same field.

The invalid ones are every validation the models make (a rule the CRD accepts and the models
refuse would fail a running job in the operator): one case per constraint a field carries
(bounds, patterns, lengths, list sizes, enums, key patterns), generated from the models' JSON
schema (:func:`constraint_cases`), and cases for the models' own validators
(:data:`INVALID_JOBS`, each validator named in :data:`VALIDATOR_CASES`, which a unit test holds
complete)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tpfabric_core.api import TensorParallelJobSpec

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
    "restart-when-it-pays-without-its-cost": (
        _with("topology.onDegradedLink", "restart-when-it-pays"),
        "spec.topology.restartCost",
    ),
    "unknown-success-policy": (_with("successPolicy", "Majority"), "spec.successPolicy"),
    "unknown-failure-action": (
        _with("failurePolicy.rules", [{"action": "Retry", "onExitCodes": [1]}]),
        "spec.failurePolicy.rules[0].action",
    ),
    "failure-rule-matches-nothing": (
        _with("failurePolicy.rules", [{"action": "FailJob"}]),
        "spec.failurePolicy.rules[0]",
    ),
    "name-too-long": (
        {**base_job(), "metadata": {"name": "x" * 51}},
        "metadata.name",
    ),
}

#: every validator of the spec's models (``Model.method``) -> the cases of INVALID_JOBS it refuses
VALIDATOR_CASES: dict[str, tuple[str, ...]] = {
    "FailureRule._matches_something": ("failure-rule-matches-nothing",),
    "PodTemplate._has_containers": ("template-without-containers",),
    "TensorParallelJobSpec._parallelism_fits": (
        "tp-does-not-divide-gpus",
        "world-not-divisible",
        "replace-worker-with-static-rendezvous",
    ),
    "TensorParallelJob._name_fits_hostnames": ("name-too-long",),
    "TopologyPolicy._restart_cost_given": ("restart-when-it-pays-without-its-cost",),
}

#: a valid item of each list of objects, to set a field of the list's first item
VALID_ITEMS: dict[str, Any] = {"FailureRule": {"action": "Restart", "onExitCodes": [1]}}
#: fields whose schema is the API server's own (the pod template): INVALID_JOBS covers them
NOT_GENERATED = ("template",)


def constraint_cases() -> dict[str, tuple[dict[str, Any], str]]:
    """Return ``case -> (manifest, field path)``: one invalid manifest per constraint that the
    models' JSON schema puts on a field of the spec."""
    schema = TensorParallelJobSpec.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})
    cases: dict[str, tuple[dict[str, Any], str]] = {}
    for path, value, what, lists in _invalid_values(schema, defs, ["spec"], {}):
        job = copy.deepcopy(base_job())
        for where, item in sorted(lists.items(), key=lambda kv: len(kv[0])):
            _set(job, list(where), [copy.deepcopy(item)])  # a list with one valid item
        _set(job, path, value)
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)[1:]
        cases[f"{field}:{what}"] = (job, field)
    return cases


Path_ = list[str | int]


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Return ``schema`` with ``$ref`` and ``Optional``'s ``anyOf`` resolved, and its model's
    name (or "")."""
    name = ""
    variants = [v for v in schema.get("anyOf", []) if v.get("type") != "null"]
    if variants:
        schema = {**variants[0], **{k: v for k, v in schema.items() if k != "anyOf"}}
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = {**defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema, name


def _invalid_values(
    schema: dict[str, Any], defs: dict[str, Any], path: Path_, lists: dict[tuple[Any, ...], Any]
) -> Iterator[tuple[Path_, Any, str, dict[tuple[Any, ...], Any]]]:
    """Yield (path, a value that breaks one constraint there, which constraint, a valid item of
    every list on the way)."""
    schema, _ = _resolve(schema, defs)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in NOT_GENERATED:
            yield from _invalid_values(sub, defs, [*path, key], lists)
    broken = []
    if "minimum" in schema:
        broken.append((schema["minimum"] - 1, "minimum"))
    if "maximum" in schema:
        broken.append((schema["maximum"] + 1, "maximum"))
    if "enum" in schema:
        broken.append(("NotAnOption", "enum"))
    if "pattern" in schema:
        assert not re.search(schema["pattern"], "Not Valid!"), schema["pattern"]
        broken.append(("Not Valid!", "pattern"))
    if "maxLength" in schema:
        broken.append(("a" * (schema["maxLength"] + 1), "maxLength"))
    key_patterns = [*(schema.get("patternProperties") or {})]
    if "pattern" in (schema.get("propertyNames") or {}):
        key_patterns.append(schema["propertyNames"]["pattern"])
    for key_pattern in key_patterns:
        assert not re.search(key_pattern, "LD_PRELOAD"), key_pattern
        broken.append(({"LD_PRELOAD": "x"}, "key pattern"))
    if schema.get("type") == "array":
        items, item_model = _resolve(schema["items"], defs)
        valid = VALID_ITEMS.get(item_model, items.get("minimum", "x"))
        if "maxItems" in schema:
            broken.append(([valid] * (schema["maxItems"] + 1), "maxItems"))
        inner = {**lists, tuple(path): valid}
        yield from _invalid_values(schema["items"], defs, [*path, 0], inner)
    for value, what in broken:
        yield path, value, what, lists


def _set(target: Any, path: Path_, value: Any) -> None:
    """Set ``value`` at ``path`` inside ``target`` (objects on the way are made)."""
    *parents, last = path
    for key in parents:
        target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
    target[last] = value
