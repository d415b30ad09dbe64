from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tpfabric_core.api import Placement, TensorParallelJob
from tpfabric_core.api.crd import crd_files, crd_name, render_crd_yaml, tensor_parallel_job_crd
from tpfabric_core.fabric_description import pydantic_error_path
from tpj_examples import INVALID_JOBS, VALIDATOR_CASES, constraint_cases, valid_jobs

CRD_FILE = Path(__file__).parents[3] / "crds" / f"{crd_name()}.yaml"


@pytest.mark.parametrize("name", sorted(valid_jobs()))
def test_the_examples_are_valid_jobs(name: str) -> None:
    job = TensorParallelJob.model_validate(valid_jobs()[name])
    assert job.spec.workers >= 1


def test_defaults_fill_the_policy() -> None:
    job = TensorParallelJob.model_validate(valid_jobs()["llama-405b-tp16x4"])
    assert job.spec.gpus_per_worker == 8
    assert job.spec.topology.rail_aligned is True
    # unset: the cluster's RDMA resource, and what the nodes offer (the operator decides)
    assert (job.spec.rdma.resource_name, job.spec.rdma.count) == (None, None)
    assert job.spec.topology.max_wait_seconds == 20


@pytest.mark.parametrize("case", sorted(INVALID_JOBS))
def test_invalid_jobs_are_rejected_naming_the_field(case: str) -> None:
    manifest, field = INVALID_JOBS[case]
    with pytest.raises(ValidationError) as caught:
        TensorParallelJob.model_validate(manifest)
    paths = [pydantic_error_path(e["loc"]) for e in caught.value.errors()]
    # cross-field rules are reported on the spec by pydantic, on the field by CEL; the name's
    # rule on the whole object, in words that name the field
    named = any(field.startswith(p) or p.startswith(field) for p in paths)
    assert named or all(field in e["msg"] for e in caught.value.errors()), paths


@pytest.mark.parametrize("case", sorted(constraint_cases()))
def test_every_constraint_of_a_field_refuses_its_case_naming_the_field(case: str) -> None:
    # the same cases go to the real API server (tests/integration/test_crd.py)
    manifest, field = constraint_cases()[case]
    with pytest.raises(ValidationError) as caught:
        TensorParallelJob.model_validate(manifest)
    paths = [pydantic_error_path(e["loc"]) for e in caught.value.errors()]
    assert any(p.startswith(field) for p in paths), paths


def _spec_models() -> list[type[Any]]:
    from tpfabric_core.api import models  # noqa: PLC0415

    schema = models.TensorParallelJobSpec.model_json_schema()
    names = ["TensorParallelJob", "TensorParallelJobSpec", *schema.get("$defs", {})]
    return [getattr(models, name) for name in names]


def test_every_validator_of_the_models_has_cases_the_api_server_must_refuse_too() -> None:
    # a validator without a CRD twin lets the API server accept what the
    # operator then refuses; every validator names its cases in tpj_examples.VALIDATOR_CASES
    found = {
        f"{model.__name__}.{name}"
        for model in _spec_models()
        for kind in ("model_validators", "field_validators")
        for name in getattr(model.__pydantic_decorators__, kind)
    }
    assert found == set(VALIDATOR_CASES)
    for cases in VALIDATOR_CASES.values():
        assert cases
        assert set(cases) <= set(INVALID_JOBS)


def test_the_crd_file_is_the_generators_output() -> None:
    assert CRD_FILE.read_text() == render_crd_yaml(), "run `tpfabric crds generate`"


def test_every_crd_file_is_the_generators_output() -> None:
    files = crd_files()
    assert set(files) == {"tensorparalleljobs.tpfabric.io.yaml", "gangs.tpfabric.io.yaml"}
    for name, text in files.items():
        assert (CRD_FILE.parent / name).read_text() == text, f"{name}: run `tpfabric crds generate`"


def _walk(schema: dict[str, Any], path: str = "") -> list[str]:
    forbidden = ("$ref", "anyOf", "title", "propertyNames", "patternProperties")
    problems = [f"{path}: {key}" for key in forbidden if key in schema]
    if schema.get("type") == "object" and not (
        "properties" in schema
        or "additionalProperties" in schema
        or schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        problems.append(f"{path}: object without properties")
    for name, sub in schema.get("properties", {}).items():
        problems += _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += _walk(schema["items"], f"{path}[]")
    return problems


def test_the_schema_is_structural_and_every_spec_field_is_described() -> None:
    version = tensor_parallel_job_crd()["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    assert _walk(root["properties"]["spec"]) == []
    assert _walk(root["properties"]["status"]) == []
    undocumented = [
        name
        for name, sub in root["properties"]["spec"]["properties"].items()
        if not sub.get("description")
    ]
    assert undocumented == []


def test_printer_columns_show_phase_ready_domain_hops_and_restarts() -> None:
    version = tensor_parallel_job_crd()["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Phase", "Ready", "Level", "Domain", "Hops", "Restarts", "Suspended", "Age"]
    wide_only = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide_only == ["Suspended"]


def test_a_job_name_must_leave_room_for_worker_hostnames() -> None:
    schema = tensor_parallel_job_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    (rule,) = schema["x-kubernetes-validations"]
    assert rule["rule"] == "size(self.metadata.name) <= 50"
    assert len("x" * 50 + "-worker-1023") <= 63


def test_the_field_reference_is_the_generators_output() -> None:
    from tpfabric_core.api.reference import render_reference  # noqa: PLC0415

    reference = CRD_FILE.parents[1] / "docs" / "crd-reference.md"
    assert reference.read_text() == render_reference(), "run `tpfabric crds generate`"
    assert "| `spec.topology.level` |" in reference.read_text()


def test_the_gang_reference_is_the_generators_output() -> None:
    from tpfabric_core.api.reference import render_gang_reference  # noqa: PLC0415

    reference = CRD_FILE.parents[1] / "docs" / "gang-reference.md"
    assert reference.read_text() == render_gang_reference(), "run `tpfabric crds generate`"
    assert "| `status.placement.state` |" in reference.read_text()


@pytest.mark.parametrize("level", ["leaf", "nvlink", "zone", "gce-subblock", "cluster"])
def test_any_configured_level_name_is_a_valid_policy_level(level: str) -> None:
    manifest = valid_jobs()["llama-405b-tp16x4"]
    manifest["spec"].setdefault("topology", {})["level"] = level
    assert TensorParallelJob.model_validate(manifest).spec.topology.level == level


@pytest.mark.parametrize("level", ["Leaf", "rack_1", "", "1leaf", "a" * 64])
def test_a_level_that_is_not_a_level_name_is_rejected(level: str) -> None:
    manifest = valid_jobs()["llama-405b-tp16x4"]
    manifest["spec"].setdefault("topology", {})["level"] = level
    with pytest.raises(ValidationError):
        TensorParallelJob.model_validate(manifest)


def test_the_crd_checks_the_level_name_pattern_not_a_fixed_list() -> None:
    version = tensor_parallel_job_crd()["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    level = spec["properties"]["topology"]["properties"]["level"]
    assert level["pattern"] == "^[a-z][a-z0-9-]{0,62}$"
    assert "enum" not in level


def test_a_placement_carries_the_labels_of_its_domain() -> None:
    placement = Placement.model_validate(
        {
            "state": "Planned",
            "level": "leaf",
            "domain": "rack-1",
            "domainLabels": {
                "topology.tpfabric.io/spine": "s2",
                "topology.tpfabric.io/leaf": "rack-1",
            },
        }
    )
    assert placement.domain_labels["topology.tpfabric.io/spine"] == "s2"
    assert Placement().domain_labels == {}
    assert placement.model_dump(by_alias=True)["domainLabels"] == placement.domain_labels
