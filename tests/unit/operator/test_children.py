from __future__ import annotations

from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.children import (
    GANG_GATE,
    SCHEDULER_NAME,
    headless_service,
    worker_pod,
)


def a_job(**spec: Any) -> TensorParallelJob:
    base: dict[str, Any] = {
        "workers": 4,
        "tensorParallelSize": 8,
        "pipelineParallelSize": 2,
        "template": {
            "metadata": {"labels": {"team": "llm"}},
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": "img",
                        "env": [{"name": "MASTER_PORT", "value": "1234"}],
                        "resources": {"requests": {"cpu": "8"}},
                    }
                ]
            },
        },
    }
    base.update(spec)
    return TensorParallelJob.model_validate({"metadata": {"name": "j"}, "spec": base})


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_worker_is_gated_named_by_index_and_scheduled_by_tpfabric() -> None:
    pod = worker_pod(a_job(), "j", "ns", 2, "init:1")
    assert pod["metadata"]["name"] == "j-worker-2"
    assert pod["metadata"]["labels"] == {
        "team": "llm",
        "tpfabric.io/job-name": "j",
        "tpfabric.io/worker-index": "2",
    }
    assert pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("j-worker-2", "j-workers")


def test_rank_and_rendezvous_env_with_the_users_values_winning() -> None:
    got = env(worker_pod(a_job(), "j", "ns", 3, "init:1"))
    assert got["RANK"] == got["NODE_RANK"] == "3"
    assert got["WORLD_SIZE"] == got["NNODES"] == "4"
    assert got["NPROC_PER_NODE"] == "8"
    assert got["MASTER_ADDR"] == "j-worker-0.j-workers.ns.svc"
    assert got["MASTER_PORT"] == "1234"  # the template set it
    assert (got["TENSOR_PARALLEL_SIZE"], got["PIPELINE_PARALLEL_SIZE"]) == ("8", "2")
    assert got["NCCL_CONF_FILE"] == "/tpfabric/nccl.conf"


def test_gpus_and_rdma_devices_are_requested_and_memory_can_be_pinned() -> None:
    container = worker_pod(a_job(), "j", "ns", 0, "init:1")["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "8"}
    assert container["resources"]["requests"] == {"cpu": "8"}
    assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
    assert {"name": "tpfabric-shared", "mountPath": "/tpfabric"} in container["volumeMounts"]


def test_the_rdma_init_container_gets_the_policy_overrides_and_the_devices() -> None:
    job = a_job(nccl={"NCCL_DEBUG": "INFO"}, rdma={"gpuDirect": "required", "count": 4})
    init = worker_pod(job, "j", "ns", 0, "init:1")["spec"]["initContainers"][0]
    assert init["image"] == "init:1"
    assert "--policy=required" in init["args"]
    assert '--nccl-overrides={"NCCL_DEBUG": "INFO"}' in init["args"]
    assert init["resources"]["limits"] == {"rdma/ib": "4"}


def test_a_job_without_rdma_runs_the_init_container_with_rdma_disabled() -> None:
    pod = worker_pod(a_job(rdma={"count": 0}), "j", "ns", 0, "init:1")
    init = pod["spec"]["initContainers"][0]
    assert "--policy=disabled" in init["args"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_the_service_is_headless_and_publishes_unready_workers() -> None:
    service = headless_service("j", "ns")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"tpfabric.io/job-name": "j"}
