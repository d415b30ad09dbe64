from __future__ import annotations

import json
from typing import Any

from tpfabric_core import labels
from tpfabric_core.api import TensorParallelJob
from tpfabric_core.rdma_default import RDMA_ANNOTATION, NodeOffer, parse_decision
from tpfabric_operator.jobs.children import (
    GANG_GATE,
    SCHEDULER_NAME,
    headless_service,
    worker_pod,
    worker_rdma,
)

#: DGX-class GPU nodes in the labelled fabric, each with 8 GPUs and 8 RDMA devices
DGX = [
    NodeOffer(f"n{i}", {labels.LEAF: "leaf1"}, {"nvidia.com/gpu": 8, "rdma/ib": 8})
    for i in range(4)
]


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
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_a_worker_is_gated_named_by_index_and_scheduled_by_tpfabric() -> None:
    pod = worker_pod(a_job(), "j", "ns", 2, "init:1")
    assert pod["metadata"]["name"] == "j-worker-2"
    assert pod["metadata"]["labels"] == {
        "team": "llm",
        "tpfabric.io/job-name": "j",
        "tpfabric.io/worker-index": "2",
        "tpfabric.io/attempt": "0",
    }
    assert pod["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("j-worker-2", "j-workers")


def test_a_restarted_worker_has_a_new_name_and_the_same_hostname() -> None:
    pod = worker_pod(a_job(), "j", "ns", 2, "init:1", attempt=3)
    assert pod["metadata"]["name"] == "j-worker-2-a3"
    assert pod["metadata"]["labels"]["tpfabric.io/attempt"] == "3"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("j-worker-2", "j-workers")


def test_rank_and_rendezvous_env_with_the_users_values_winning() -> None:
    got = env(worker_pod(a_job(), "j", "ns", 3, "init:1"))
    assert "RANK" not in got  # a process rank: torchrun sets it per process
    assert got["NODE_RANK"] == "3"
    assert got["NNODES"] == "4"
    assert got["WORLD_SIZE"] == "32"  # processes: 4 workers x 8 GPUs
    assert got["NPROC_PER_NODE"] == "8"
    assert got["MASTER_ADDR"] == "j-worker-0.j-workers.ns.svc"
    assert got["MASTER_PORT"] == "1234"  # the template set it
    assert (got["TENSOR_PARALLEL_SIZE"], got["PIPELINE_PARALLEL_SIZE"]) == ("8", "2")
    assert got["NCCL_CONF_FILE"] == "/tpfabric/nccl.conf"


def test_torchrun_reads_its_flags_from_pet_variables() -> None:
    got = env(worker_pod(a_job(), "j", "ns", 3, "init:1"))
    assert (got["PET_NNODES"], got["PET_NPROC_PER_NODE"], got["PET_NODE_RANK"]) == ("4", "8", "3")
    assert got["PET_MASTER_ADDR"] == "j-worker-0.j-workers.ns.svc"
    assert got["PET_MASTER_PORT"] == "29500"
    assert "PET_RDZV_BACKEND" not in got


def test_an_elastic_rendezvous_names_the_c10d_endpoint_and_no_node_rank() -> None:
    job = a_job(launcher={"rendezvous": "c10d"})
    got = env(worker_pod(job, "j", "ns", 1, "init:1"))
    assert got["PET_RDZV_BACKEND"] == "c10d"
    assert got["PET_RDZV_ENDPOINT"] == "j-worker-0.j-workers.ns.svc:29500"
    assert got["PET_RDZV_ID"] == "ns-j-a0"
    assert "PET_NODE_RANK" not in got  # c10d assigns node ranks itself


def test_each_attempt_has_a_rendezvous_of_its_own_and_a_replacement_joins_the_running_one() -> None:
    # a new attempt must never join the rendezvous of an older one whose
    # containers may still run; a ReplaceWorker replacement must join the running workers'
    job = a_job(launcher={"rendezvous": "c10d"})
    job.metadata["uid"] = "0123456789abcdef"

    def rendezvous(job: TensorParallelJob, attempt: int) -> str:
        return env(worker_pod(job, "j", "ns", 1, "init:1", attempt=attempt))["PET_RDZV_ID"]

    assert rendezvous(job, 0) == "ns-j-01234567-a0"
    assert rendezvous(job, 1) == "ns-j-01234567-a1"
    replacing = a_job(
        launcher={"rendezvous": "c10d"}, failurePolicy={"restartStrategy": "ReplaceWorker"}
    )
    replacing.metadata["uid"] = "0123456789abcdef"
    assert rendezvous(replacing, 0) == rendezvous(replacing, 3) == "ns-j-01234567"


def test_launcher_none_sets_no_pet_variables() -> None:
    got = env(worker_pod(a_job(launcher={"kind": "none"}), "j", "ns", 1, "init:1"))
    assert not [k for k in got if k.startswith("PET_")]
    assert got["NODE_RANK"] == "1"


def test_gpus_and_rdma_devices_are_requested_and_no_capability_is_added() -> None:
    job = a_job()
    rdma = worker_rdma(job, DGX)
    container = worker_pod(job, "j", "ns", 0, "init:1", rdma=rdma)["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "8"}
    assert container["resources"]["requests"] == {"cpu": "8"}
    # IPC_LOCK is the template's to ask for: Pod Security baseline refuses it
    assert "securityContext" not in container
    assert {"name": "tpfabric-shared", "mountPath": "/tpfabric"} in container["volumeMounts"]


def test_the_templates_own_security_context_and_ipc_lock_stay_as_they_are() -> None:
    security = {"runAsUser": 0, "capabilities": {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]}}
    template = {"spec": {"containers": [{"name": "t", "image": "i", "securityContext": security}]}}
    pod = worker_pod(a_job(template=template), "j", "ns", 0, "init:1")
    assert pod["spec"]["containers"][0]["securityContext"] == security
    assert main_facts(pod)["capabilitiesAdd"] == ["IPC_LOCK"]


def test_the_rdma_init_container_gets_the_policy_overrides_and_the_devices() -> None:
    job = a_job(nccl={"NCCL_DEBUG": "INFO"}, rdma={"gpuDirect": "required", "count": 4})
    init = worker_pod(job, "j", "ns", 0, "init:1")["spec"]["initContainers"][0]
    assert init["image"] == "init:1"
    assert "--policy=required" in init["args"]
    assert '--nccl-overrides={"NCCL_DEBUG": "INFO"}' in init["args"]
    assert init["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "4"}
    assert "--nccl-library=image" in init["args"]


def test_the_init_container_requests_the_pods_devices_and_runs_restricted() -> None:
    pod = worker_pod(a_job(gpusPerWorker=4, tensorParallelSize=4), "j", "ns", 0, "init:1")
    init, main = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
    # the kubelet reuses init-container devices for app containers: same request, same devices
    assert init["resources"]["limits"] == main["resources"]["limits"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # Pod Security "restricted": a numeric non-root user, no escalation, no capability, seccomp
    assert init["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_the_init_containers_termination_message_is_its_pairing_file() -> None:
    init = worker_pod(a_job(), "j", "ns", 0, "init:1")["spec"]["initContainers"][0]
    # rdma-init writes its GPU -> HCA pairing there; File, never a log tail in its place
    assert (init["terminationMessagePath"], init["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )


def main_facts(pod: dict[str, Any]) -> dict[str, Any]:
    env = {e["name"]: e["value"] for e in pod["spec"]["initContainers"][0]["env"]}
    facts: dict[str, Any] = json.loads(env["TPFABRIC_MAIN_CONTAINER"])
    return facts


def test_the_init_container_learns_the_main_containers_user_capabilities_and_cuda() -> None:
    template = {
        "metadata": {"annotations": {"tpfabric.io/cuda-major": "13"}},
        "spec": {
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
            "containers": [{"name": "trainer", "image": "img"}],
        },
    }
    facts = main_facts(worker_pod(a_job(template=template), "j", "ns", 0, "init:1"))
    assert facts == {
        "container": "trainer",
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "privileged": False,
        "capabilitiesAdd": [],
        "cudaMajor": 13,
    }


def test_cuda_major_falls_back_to_the_containers_cuda_version() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "t", "image": "i", "env": [{"name": "CUDA_VERSION", "value": "12.4.1"}]}
            ]
        }
    }
    assert main_facts(worker_pod(a_job(template=template), "j", "ns", 0, "i"))["cudaMajor"] == 12


def test_nccl_reads_the_config_without_covering_the_images_etc_nccl_conf() -> None:
    # NCCL >= 2.23.4 reads NCCL_CONF_FILE, older ones ~/.nccl.conf; both read /etc/nccl.conf
    # after it for the keys still unset, so a cloud image's own settings (net plugin) stay.
    container = worker_pod(a_job(), "j", "ns", 0, "init:1")["spec"]["containers"][0]
    assert not any(m["mountPath"] == "/etc/nccl.conf" for m in container["volumeMounts"])
    assert {
        "name": "tpfabric-shared",
        "mountPath": "/root/.nccl.conf",
        "subPath": "nccl.conf",
        "readOnly": True,
    } in container["volumeMounts"]
    variables = env({"spec": {"containers": [container]}})
    assert variables["NCCL_CONF_FILE"] == "/tpfabric/nccl.conf"
    assert "LD_LIBRARY_PATH" not in variables


def test_the_init_container_learns_the_templates_net_plugin_env() -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "image": "i",
                    "env": [
                        {"name": "NCCL_NET", "value": "AWS Libfabric"},
                        {"name": "NCCL_DEBUG", "value": "INFO"},
                    ],
                }
            ]
        }
    }
    facts = main_facts(worker_pod(a_job(template=template), "j", "ns", 0, "i"))
    assert facts["ncclEnv"] == {"NCCL_NET": "AWS Libfabric"}
    assert "ncclEnv" not in main_facts(worker_pod(a_job(), "j", "ns", 0, "i"))


def test_the_shipped_nccl_is_put_on_the_main_containers_library_path() -> None:
    template = {
        "metadata": {"annotations": {"tpfabric.io/nccl-library": "shipped"}},
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "image": "i",
                    "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/cuda/lib64"}],
                }
            ]
        },
    }
    pod = worker_pod(a_job(template=template), "j", "ns", 0, "init:1")
    assert env(pod)["LD_LIBRARY_PATH"] == "/tpfabric/lib:/usr/local/cuda/lib64"
    assert "--nccl-library=shipped" in pod["spec"]["initContainers"][0]["args"]


def test_a_job_without_rdma_runs_the_init_container_with_rdma_disabled() -> None:
    job = a_job(rdma={"count": 0})
    pod = worker_pod(job, "j", "ns", 0, "init:1", rdma=worker_rdma(job, DGX))
    init = pod["spec"]["initContainers"][0]
    assert "--policy=disabled" in init["args"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    decision = parse_decision(pod["metadata"]["annotations"][RDMA_ANNOTATION])
    assert decision is not None
    assert (decision.count, decision.reason) == (0, "NotRequested")
    assert "spec.rdma.count asks 0 rdma/ib" in decision.message


def test_a_job_that_names_no_rdma_gets_what_the_nodes_offer_in_the_clusters_resource() -> None:
    nodes = [
        NodeOffer(f"n{i}", {labels.LEAF: "l"}, {"nvidia.com/gpu": 8, "rdma/shared_a": 4})
        for i in range(3)
    ]
    job = a_job()
    rdma = worker_rdma(job, nodes, "rdma/shared_a")
    pod = worker_pod(job, "j", "ns", 0, "init:1", rdma=rdma)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["rdma/shared_a"] == "4"
    assert "--policy=preferred" in pod["spec"]["initContainers"][0]["args"]
    decision = parse_decision(pod["metadata"]["annotations"][RDMA_ANNOTATION])
    assert decision is not None
    assert (decision.count, decision.reason) == (4, "NodesOffer")


def test_the_jobs_own_resource_name_and_count_win_over_the_clusters() -> None:
    job = a_job(rdma={"resourceName": "nvidia.com/hostdev", "count": 2})
    rdma = worker_rdma(job, DGX, "rdma/ib")
    assert (rdma.resource, rdma.count, rdma.reason) == ("nvidia.com/hostdev", 2, "Requested")


def test_a_job_on_nodes_without_rdma_runs_over_tcp_and_says_why() -> None:
    nodes = [NodeOffer("n0", {labels.LEAF: "l"}, {"nvidia.com/gpu": 8})]
    rdma = worker_rdma(a_job(), nodes, "rdma/ib")
    pod = worker_pod(a_job(), "j", "ns", 0, "init:1", rdma=rdma)
    assert "--policy=disabled" in pod["spec"]["initContainers"][0]["args"]
    assert rdma.reason == "NodesOfferNone"
    assert "none of the 1 GPU node(s) that could hold the pod offers rdma/ib" in rdma.message
    assert "rdma.resourceName" in rdma.message


def test_a_job_of_one_worker_gets_no_rdma_by_default() -> None:
    rdma = worker_rdma(a_job(workers=1, pipelineParallelSize=1), DGX)
    assert (rdma.count, rdma.reason) == (0, "NotRequested")
    assert "a gang of one pod" in rdma.message


def test_the_default_counts_only_nodes_the_workers_node_selector_allows() -> None:
    nodes = [
        *DGX,
        *(
            NodeOffer(
                f"h{i}", {labels.LEAF: "l", "pool": "h200"}, {"nvidia.com/gpu": 8, "rdma/ib": 4}
            )
            for i in range(2)
        ),
    ]
    job = a_job()
    job.spec.template.spec["nodeSelector"] = {"pool": "h200"}
    assert worker_rdma(job, nodes).count == 4, "2 matching nodes offer 4; 4 others offer 8"


def test_the_service_is_headless_and_publishes_unready_workers() -> None:
    service = headless_service("j", "ns")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"tpfabric.io/job-name": "j"}


def test_a_worker_gets_the_fabric_profile_the_fabric_env_and_the_images_nccl_version() -> None:
    template = {
        "metadata": {"annotations": {"tpfabric.io/nccl-version": "2.30.7"}},
        "spec": {
            "containers": [
                {"name": "trainer", "image": "img", "env": [{"name": "BASH_ENV", "value": "/x"}]}
            ]
        },
    }
    profile = '{"linkLayer":"infiniband","infiniband":{"adaptiveRoutingServiceLevels":[1]}}'
    pod = worker_pod(a_job(template=template), "j", "ns", 0, "init:1", fabric_profile=profile)
    init = pod["spec"]["initContainers"][0]
    assert f"--fabric-profile={profile}" in init["args"]
    assert main_facts(pod)["ncclVersion"] == "2.30.7"
    values = env(pod)
    assert values["BASH_ENV"] == "/x"  # the container's own wins
    assert values["ENV"] == "/tpfabric/fabric.env"
    assert "TPFABRIC_POD_IP" in values


def test_without_a_profile_the_init_container_gets_no_profile_flag() -> None:
    init = worker_pod(a_job(), "j", "ns", 0, "init:1")["spec"]["initContainers"][0]
    assert not any(arg.startswith("--fabric-profile") for arg in init["args"])
