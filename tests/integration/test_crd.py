"""The generated TensorParallelJob CRD on the real API server: served, explained, validating."""

from __future__ import annotations

import pytest
import yaml

from conftest import apply_crd
from conftest import run_kubectl as kubectl
from tpfabric_localcluster.cluster import LocalCluster
from tpj_examples import INVALID_JOBS, base_job, valid_jobs


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
    assert spec["rdma"] == {"resourceName": "rdma/ib", "count": 8, "gpuDirect": "preferred"}


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
