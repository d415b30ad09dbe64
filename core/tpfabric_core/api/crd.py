"""Generate the TensorParallelJob CustomResourceDefinition from the pydantic models.

One generator, golden-tested (``crds/`` must equal its output). The pydantic JSON schema is made
structural the way Kubernetes wants it: ``$ref`` inlined, titles dropped, ``Optional`` as
``nullable``, free-form maps as ``x-kubernetes-preserve-unknown-fields``, key patterns and
cross-field rules as CEL ``x-kubernetes-validations``. Pure: returns data, writes nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from tpfabric_core.api.gang import GANG_KIND, GANG_PLURAL, GangSpec, GangStatus
from tpfabric_core.api.models import (
    API_VERSION,
    CEL_IMMUTABLE_SHAPE,
    CEL_NAME_FITS,
    CEL_REPLACE_NEEDS_ELASTIC,
    CEL_RESTART_COST_GIVEN,
    CEL_RULE_MATCHES_SOMETHING,
    CEL_SUSPENDED,
    CEL_TP_FITS_NODES,
    CEL_WORLD_DIVISIBLE,
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    MUTABLE_WHILE_SUSPENDED,
    NCCL_KEY_PATTERN,
    PLURAL,
    VERSION,
    TensorParallelJobSpec,
    TensorParallelJobStatus,
)

__all__ = [
    "CRD_FILE_HEADER",
    "crd_files",
    "crd_name",
    "gang_crd",
    "render_crd_yaml",
    "tensor_parallel_job_crd",
]

CRD_FILE_HEADER = (
    "# Generated from core/tpfabric_core/api/models.py by `tpfabric crds generate`; do not edit.\n"
)

Schema = dict[str, Any]


def crd_name() -> str:
    """Return the CRD's metadata.name, ``tensorparalleljobs.tpfabric.io``."""
    return f"{PLURAL}.{GROUP}"


def _inline(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """Return ``schema`` with every ``$ref`` replaced by its definition, recursively."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in schema.items() if k != "$ref"}}
        return _inline(merged, defs)
    out: Schema = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        elif key in {"items", "additionalProperties", "propertyNames"} and isinstance(value, dict):
            out[key] = _inline(value, defs)
        elif key in {"anyOf", "allOf", "oneOf"}:
            out[key] = [_inline(sub, defs) for sub in value]
        else:
            out[key] = value
    return out


def _structural(schema: Schema) -> Schema:
    """Return ``schema`` made structural for the API server (see the module docstring)."""
    schema = dict(schema)
    schema.pop("title", None)
    if "description" in schema:  # docstrings wrap lines; kubectl explain re-wraps them itself
        schema["description"] = " ".join(schema["description"].split())
    variants = schema.pop("anyOf", None)
    if variants is not None:
        non_null = [v for v in variants if v.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express anyOf {variants} structurally")
        nullable = len(non_null) < len(variants)
        schema = {**_structural(non_null[0]), **schema}
        if nullable:
            schema["nullable"] = True
        if schema.get("default", "") is None:
            del schema["default"]
    patterned = schema.pop("patternProperties", None)
    if patterned:  # key patterns become CEL rules; the value schema stays
        (value_schema,) = patterned.values()
        schema["additionalProperties"] = value_schema
    if "properties" in schema:
        schema["properties"] = {k: _structural(v) for k, v in schema["properties"].items()}
        schema.pop("additionalProperties", None)
    elif schema.get("type") == "object":
        extra = schema.pop("additionalProperties", True)
        if isinstance(extra, dict) and extra.get("type") == "string":
            schema["additionalProperties"] = {"type": "string"}
        else:
            schema["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in schema:
        schema["items"] = _structural(schema["items"])
    schema.pop("propertyNames", None)
    return schema


def _spec_schema() -> Schema:
    raw = TensorParallelJobSpec.model_json_schema(by_alias=True)
    spec = _structural(_inline(raw, raw.pop("$defs", {})))
    props = spec["properties"]
    for nested in ("topology", "rdma", "failurePolicy", "launcher"):
        props[nested]["default"] = {}  # so that the nested defaults apply
    props["nccl"]["x-kubernetes-validations"] = [
        {
            "rule": f"self.all(k, k.matches('{NCCL_KEY_PATTERN}'))",
            "message": "keys must be NCCL environment variables such as NCCL_DEBUG",
        }
    ]
    props["failurePolicy"]["properties"]["rules"]["items"]["x-kubernetes-validations"] = [
        {
            "rule": CEL_RULE_MATCHES_SOMETHING,
            "message": "a rule needs onExitCodes, onPodConditions or onReasons (a rule without "
            "any would match every failure)",
            "reason": "FieldValueRequired",
        }
    ]
    props["topology"]["x-kubernetes-validations"] = [
        {
            "rule": CEL_RESTART_COST_GIVEN,
            "message": "onDegradedLink restart-when-it-pays needs restartCost.interNodeCommShare "
            "(the share of a step spent in collectives across nodes) to weigh a restart",
            "fieldPath": ".restartCost",
            "reason": "FieldValueRequired",
        }
    ]
    template = props["template"]
    template["x-kubernetes-preserve-unknown-fields"] = True
    template["properties"]["spec"] = {
        "type": "object",
        "description": template["properties"]["spec"]["description"],
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["containers"],
        "properties": {
            "containers": {
                "type": "array",
                "minItems": 1,
                "description": "Containers of every worker pod (at least one).",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }
        },
    }
    spec["x-kubernetes-validations"] = [
        {
            "rule": CEL_TP_FITS_NODES,
            "message": "tensorParallelSize must divide gpusPerWorker or be a multiple of it "
            "(a tensor-parallel group fills whole nodes or part of one)",
            "fieldPath": ".tensorParallelSize",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": CEL_WORLD_DIVISIBLE,
            "message": "tensorParallelSize x pipelineParallelSize must divide workers x "
            "gpusPerWorker (the rest is data parallelism)",
            "fieldPath": ".pipelineParallelSize",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": CEL_REPLACE_NEEDS_ELASTIC,
            "message": "failurePolicy.restartStrategy ReplaceWorker needs launcher.rendezvous "
            "c10d: with a static rendezvous the surviving workers cannot take a new one in",
            "fieldPath": ".failurePolicy.restartStrategy",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": CEL_IMMUTABLE_SHAPE,
            "message": "workers, gpusPerWorker, tensorParallelSize and pipelineParallelSize "
            "cannot change; delete and re-create the job",
            "reason": "FieldValueForbidden",
        },
        *(
            {
                "rule": f"{CEL_SUSPENDED} || self.{field} == oldSelf.{field}",
                "message": f"spec.{field} cannot change while the job is not suspended (a "
                "replaced worker would run it beside the others); set spec.suspend to true "
                "first (its pods stop), or delete and re-create the job",
                "fieldPath": f".{field}",
                "reason": "FieldValueForbidden",
            }
            for field in MUTABLE_WHILE_SUSPENDED
        ),
    ]
    return spec


def _status_schema(model: type[BaseModel] = TensorParallelJobStatus) -> Schema:
    raw = model.model_json_schema(by_alias=True)
    status = _structural(_inline(raw, raw.pop("$defs", {})))
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["items"]["required"] = ["type", "status"]
    return status


def tensor_parallel_job_crd() -> dict[str, Any]:
    """Return the TensorParallelJob CRD (apiextensions.k8s.io/v1) as a plain dict."""
    spec = _spec_schema()
    spec.pop("default", None)
    status = _status_schema()
    status.pop("default", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(), "labels": {"app.kubernetes.io/part-of": "tpfabric"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["tpj"],
                "categories": ["all", "tpfabric"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
                        {"name": "Level", "type": "string", "jsonPath": ".status.placement.level"},
                        {
                            "name": "Domain",
                            "type": "string",
                            "jsonPath": ".status.placement.domain",
                        },
                        {"name": "Hops", "type": "integer", "jsonPath": ".status.placement.hops"},
                        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
                        {
                            "name": "Suspended",
                            "type": "boolean",
                            "jsonPath": ".spec.suspend",
                            "priority": 1,
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A tensor-parallel job: a gang of GPU worker pods that tpfabric "
                                f"places together in the InfiniBand fabric ({API_VERSION})."
                            ),
                            "required": ["spec"],
                            "x-kubernetes-validations": [
                                {
                                    "rule": CEL_NAME_FITS,
                                    "message": f"metadata.name must have at most "
                                    f"{MAX_NAME_LENGTH} characters so that worker hostnames "
                                    "(<name>-worker-<index>) fit in 63",
                                    "reason": "FieldValueInvalid",
                                }
                            ],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """Return the CRD file's text: the header line, then the CRD as YAML."""
    return CRD_FILE_HEADER + yaml.safe_dump(tensor_parallel_job_crd(), sort_keys=False, width=100)


def gang_crd() -> dict[str, Any]:
    """Return the Gang CRD (apiextensions.k8s.io/v1): the record of a gang another controller
    made, with the columns of ``kubectl get tpj``."""
    raw = GangSpec.model_json_schema(by_alias=True)
    spec = _structural(_inline(raw, raw.pop("$defs", {})))
    spec.pop("default", None)
    for nested in ("topology", "rdma"):
        spec["properties"][nested]["default"] = {}
    status = _status_schema(GangStatus)
    status.pop("default", None)
    columns = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
        {"name": "Level", "type": "string", "jsonPath": ".status.placement.level"},
        {"name": "Domain", "type": "string", "jsonPath": ".status.placement.domain"},
        {"name": "Hops", "type": "integer", "jsonPath": ".status.placement.hops"},
        {"name": "Owner", "type": "string", "jsonPath": ".spec.owner.kind", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{GANG_PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "tpfabric"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": GANG_KIND,
                "listKind": f"{GANG_KIND}List",
                "plural": GANG_PLURAL,
                "singular": GANG_KIND.lower(),
                "categories": ["all", "tpfabric"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A gang of pods another controller made (a LeaderWorkerSet "
                                "group, a JobSet, a labelled pod group), placed together in the "
                                f"InfiniBand fabric by tpfabric ({API_VERSION})."
                            ),
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_files() -> dict[str, str]:
    """Return every generated CRD file: its name and its text (the header line, then YAML)."""
    gang = CRD_FILE_HEADER + yaml.safe_dump(gang_crd(), sort_keys=False, width=100)
    return {f"{crd_name()}.yaml": render_crd_yaml(), f"{GANG_PLURAL}.{GROUP}.yaml": gang}
