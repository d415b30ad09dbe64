"""The generated TensorParallelJob CRD on the real API server: served, explained, validating."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import apply_crd
from control_plane_fixtures import run_kubectl as kubectl
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_localcluster.cluster import LocalCluster
from tpj_examples import INVALID_JOBS, base_job, constraint_cases, valid_jobs


@pytest.fixture(scope="module")
def crd(local_cluster: LocalCluster) -> None:
    apply_crd(local_cluster)


@pytest.mark.usefixtures("crd")
@pytest.mark.parametrize("name", sorted(valid_jobs()))
def test_the_example_jobs_are_accepted(
    local_cluster: LocalCluster, namespace: str, name: str
) -> None:
    done = kubectl(
        local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(valid_jobs()[name])
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.usefixtures("crd")
def test_the_api_server_applies_the_defaults(local_cluster: LocalCluster, namespace: str) -> None:
    kubectl(local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(base_job()))
    got = yaml.safe_load(
        kubectl(local_cluster, "get", "tpj", "job", "-n", namespace, "-o", "yaml").stdout
    )
    spec = got["spec"]
    assert spec["pipelineParallelSize"] == 1
    assert spec["topology"] == {
        "mode": "preferred",
        "level": "leaf",
        "railAligned": True,
        "avoidDegraded": "avoid",
        "onDegradedLink": "report",
    }
    # resourceName and count stay unset: the cluster's RDMA resource, as many as the nodes offer
    assert spec["rdma"] == {"gpuDirect": "preferred"}


@pytest.mark.usefixtures("crd")
def test_a_gang_record_gets_no_rdma_devices_by_default(
    local_cluster: LocalCluster, namespace: str
) -> None:
    """A Gang record's pods name their RDMA devices themselves: the API server must not fill in
    a count the placer would add to pods that ask only for GPUs (an older CRD filled in 8)."""
    record = {
        "apiVersion": "tpfabric.io/v1alpha1",
        "kind": "Gang",
        "metadata": {"name": "g"},
        "spec": {"owner": {"kind": "PodGroup", "name": "g"}, "workers": 2},
    }
    done = kubectl(local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(record))
    assert done.returncode == 0, done.stderr
    got = yaml.safe_load(
        kubectl(local_cluster, "get", "gang", "g", "-n", namespace, "-o", "yaml").stdout
    )
    assert got["spec"]["rdma"] == {"gpuDirect": "preferred"}


@pytest.mark.usefixtures("crd")
@pytest.mark.parametrize("case", sorted(INVALID_JOBS))
def test_invalid_jobs_are_rejected_at_admission_with_the_field_path(
    local_cluster: LocalCluster, namespace: str, case: str
) -> None:
    manifest, field = INVALID_JOBS[case]
    done = kubectl(
        local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(manifest)
    )
    assert done.returncode != 0
    assert "is invalid" in done.stderr
    assert field in done.stderr, done.stderr


@pytest.mark.usefixtures("crd")
def test_every_constraint_the_models_make_is_refused_at_admission_naming_the_field(
    api: client.ApiClient, namespace: str
) -> None:
    """Each constraint of a field of the models (tpj_examples builds one case
    per constraint from their JSON schema; the unit tests hold pydantic to the same cases) is
    refused by the API server, naming the field. One job per case, through the API client."""
    custom = client.CustomObjectsApi(api)
    accepted, unnamed = [], []
    for case, (manifest, field) in sorted(constraint_cases().items()):
        refusal = _refusal(
            lambda m=manifest: custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, m
            )
        )
        if not refusal:
            accepted.append(case)
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "job")
        elif field not in refusal:
            unnamed.append((case, refusal))
    assert accepted == [], "the API server accepted what the models refuse"
    assert unnamed == [], "refused without naming the field"


def _refusal(call: Callable[[], Any]) -> str:
    """Return the API server's words when ``call`` is refused as invalid (422), else ""."""
    try:
        call()
    except ApiException as err:
        if err.status != 422:
            raise
        return str(err.body)
    return ""


def _edit(api: client.ApiClient, namespace: str, spec: dict[str, Any]) -> str:
    """Merge ``spec`` into job ``job``; return the API server's refusal ("" when accepted)."""
    return _refusal(
        lambda: client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "job", {"spec": spec}
        )
    )


@pytest.mark.usefixtures("crd")
def test_what_a_worker_runs_cannot_change_unless_the_job_is_suspended(
    api: client.ApiClient, namespace: str
) -> None:
    """What a worker runs cannot change while the job has pods: a replacement would run the new
    template, RDMA or launcher beside workers of the old one; a suspended job keeps no pods, so
    it may change (Kueue injects node selectors into a suspended job's template)."""
    job = base_job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, job
    )
    template = copy.deepcopy(job["spec"]["template"])
    template["spec"]["containers"][0]["env"] = [{"name": "A", "value": "2"}]  # deep inside
    edits = {
        "template": {"template": template},
        "rdma": {"rdma": {"count": 4}},
        "launcher": {"launcher": {"rendezvous": "c10d"}},
    }
    for field, edit in edits.items():
        refusal = _edit(api, namespace, edit)
        assert f"spec.{field}: Forbidden: spec.{field} cannot change while the job" in refusal, (
            field,
            refusal,
        )
        assert "set spec.suspend to true first" in refusal
    assert _edit(api, namespace, {"template": job["spec"]["template"]}) == ""  # unchanged: fine
    # suspended (in the same edit, or before), it may change
    assert _edit(api, namespace, {**edits["rdma"], "suspend": True}) == ""
    assert _edit(api, namespace, {**edits["template"], **edits["launcher"]}) == ""
    node_selector = copy.deepcopy(template)
    node_selector["spec"]["nodeSelector"] = {"pool": "a"}  # what Kueue does on admission
    assert _edit(api, namespace, {"template": node_selector, "suspend": False}) == ""
    got = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "job"
    )
    assert got["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    assert (got["spec"]["rdma"]["count"], got["spec"]["launcher"]["rendezvous"]) == (4, "c10d")
    assert "cannot change" in _edit(api, namespace, {"rdma": {"count": 2}})  # running again


@pytest.mark.usefixtures("crd")
def test_the_shape_of_a_job_cannot_change(local_cluster: LocalCluster, namespace: str) -> None:
    kubectl(local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(base_job()))
    bigger = base_job()
    bigger["spec"]["workers"] = 4
    done = kubectl(local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(bigger))
    assert done.returncode != 0
    assert "cannot change; delete and re-create the job" in done.stderr


@pytest.mark.usefixtures("crd")
def test_kubectl_explain_describes_the_fields(local_cluster: LocalCluster) -> None:
    done = kubectl(local_cluster, "explain", "tpj.spec.topology.level")
    assert done.returncode == 0, done.stderr
    assert "Topology level of the domain" in done.stdout


@pytest.mark.usefixtures("crd")
def test_kubectl_get_shows_the_printer_columns(local_cluster: LocalCluster, namespace: str) -> None:
    kubectl(local_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(base_job()))
    done = kubectl(local_cluster, "get", "tpj", "-n", namespace)
    assert done.returncode == 0, done.stderr
    header = ["NAME", "PHASE", "READY", "LEVEL", "DOMAIN", "HOPS", "RESTARTS", "AGE"]
    assert done.stdout.split()[:8] == header
