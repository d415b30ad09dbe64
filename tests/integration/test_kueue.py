"""Kueue admits, tpfabric places: Kueue's real controller on the local control plane.

A ClusterQueue has GPU quota for two 2-worker jobs; three are submitted. Two are admitted and run
in their leaves; the third waits on quota (suspended by the operator: no pods, so no plan and no
reservation), and runs once one of the others finishes and its Workload gives the quota back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from test_lifecycle import end_worker
from test_operator import Tpj, small_job

from conftest import wait_for
from tpfabric_core import labels
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.kueue import KUEUE, start_kueue
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator
from tpfabric_operator.queueing import (
    QUEUE_LABEL,
    WORKLOAD_GROUP,
    WORKLOAD_VERSION,
    workload_name,
)

KUEUE_V = f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}"


@pytest.fixture(scope="module")
def kueue(tpfabric_scheduling: LocalCluster) -> Iterator[LocalCluster]:
    if find_toolchain(("kueue",)).missing:
        pytest.fail("kueue is not built: run `make toolchain`", pytrace=False)
    start_kueue(tpfabric_scheduling)
    start_operator(tpfabric_scheduling)
    yield tpfabric_scheduling
    tpfabric_scheduling.stop_component(OPERATOR)
    tpfabric_scheduling.stop_component(KUEUE)


@pytest.fixture
def tpj(
    api: client.ApiClient,
    kueue: LocalCluster,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
) -> Iterator[Tpj]:
    custom = client.CustomObjectsApi(api)
    flavor = {"apiVersion": KUEUE_V, "kind": "ResourceFlavor", "metadata": {"name": "gpus"}}
    queue = {
        "apiVersion": KUEUE_V,
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{namespace}"[:63]},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu", "rdma/ib"],
                    "flavors": [
                        {
                            "name": "gpus",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 32},  # 2 jobs x 2 x 8
                                {"name": "rdma/ib", "nominalQuota": 32},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    local = {
        "apiVersion": KUEUE_V,
        "kind": "LocalQueue",
        "metadata": {"name": "training", "namespace": namespace},
        "spec": {"clusterQueue": queue["metadata"]["name"]},
    }
    for obj, plural in ((flavor, "resourceflavors"), (queue, "clusterqueues")):
        try:
            custom.create_cluster_custom_object(WORKLOAD_GROUP, WORKLOAD_VERSION, plural, obj)
        except client.ApiException as err:
            if err.status != 409:
                raise
    custom.create_namespaced_custom_object(
        WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, "localqueues", local
    )
    yield Tpj(api, kueue, namespace)
    custom.delete_cluster_custom_object(
        WORKLOAD_GROUP, WORKLOAD_VERSION, "clusterqueues", queue["metadata"]["name"]
    )


def queued_job(name: str) -> dict[str, Any]:
    job = small_job(name)
    job["metadata"]["labels"] = {QUEUE_LABEL: "training"}
    return job


def test_two_jobs_fit_the_quota_and_the_third_waits_for_one_to_finish(
    tpj: Tpj, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    started = time.monotonic()
    names = [tpj.apply(queued_job(f"q{i}")) for i in range(3)]

    def running() -> list[str]:
        return [n for n in names if tpj.status(n).get("phase") == "Running"]

    wait_for(lambda: len(running()) == 2, 120, what="two of the three jobs Running")
    both_running = time.monotonic() - started
    admitted_jobs = running()
    for name in admitted_jobs:
        status = tpj.status(name)
        leaves = {fabric_nodes[n][labels.LEAF] for n in status["placement"]["nodes"]}
        assert len(leaves) == 1  # tpfabric placed the admitted gang in one leaf
        assert tpj.condition(name, "Admitted")["status"] == "True"
    (waiting,) = set(names) - set(admitted_jobs)
    admitted = wait_for(
        lambda: (c := tpj.condition(waiting, "Admitted")).get("reason") == "Queued" and c,
        60,
        what="the third job queued",
    )
    assert admitted["status"] == "False"
    assert "quota" in admitted["message"], admitted  # Kueue's words: waiting on quota
    time.sleep(3)
    status = tpj.status(waiting)
    assert status["phase"] == "Suspended"
    assert not status.get("placement")  # not waiting on topology: never planned
    assert tpj.pods(waiting) == []

    for pod in tpj.pods(admitted_jobs[0]):
        end_worker(tpj, pod.metadata.name, "Succeeded")
    tpj.wait_phase(admitted_jobs[0], "Succeeded")
    finished = time.monotonic()
    status = tpj.wait_phase(waiting, "Running", timeout=120)
    print(
        f"KUEUE two admitted and running after {both_running:.1f}s; third running "
        f"{time.monotonic() - finished:.1f}s after the first finished"
    )
    assert tpj.condition(waiting, "Admitted")["status"] == "True"
    assert len(status["placement"]["nodes"]) == 2


def test_an_evicted_job_stops_uncharged_and_runs_again_when_readmitted(tpj: Tpj) -> None:
    name = tpj.apply(queued_job("evictee"))
    tpj.wait_phase(name, "Running", timeout=120)
    workload = workload_name(name, tpj.get(name)["metadata"]["uid"])

    def set_active(active: bool) -> None:
        tpj.custom.patch_namespaced_custom_object(
            WORKLOAD_GROUP,
            WORKLOAD_VERSION,
            tpj.namespace,
            "workloads",
            workload,
            {"spec": {"active": active}},
        )

    set_active(False)  # Kueue evicts a deactivated workload
    wait_for(
        lambda: tpj.condition(name, "Admitted").get("reason") == "Evicted",
        60,
        what="the eviction seen by the job",
    )
    tpj.wait_phase(name, "Suspended", timeout=60)
    assert tpj.pods(name) == []
    set_active(True)
    status = tpj.wait_phase(name, "Running", timeout=120)
    assert status["restarts"] == 0  # an eviction is not the job's failure
    assert tpj.condition(name, "Admitted")["status"] == "True"
