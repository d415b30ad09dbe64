"""Every wait of a gang says why, where its user looks: a gang short of pods, and a pod the gang
webhook admitted unwired.

Tried as a new user would: a pod group with 3 of its 4 pods showed `Pending 0/4` with no message,
no problem and no Event, and `tpfabric explain` listed ranks 0-3 as "(no pod)" and the 3 real
pods as rank "?"; a `tpfabric.io/gang-size: "abc"` pod was admitted with a warning only its
creator's client saw. Real API server, the gang webhook, the operator and the placer, on kwok
nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    FabricFactory,
    clear_jobs_and_pods,
    gang_pod,
    operator_and_gang_webhook,
    opt_in,
    two_leaves_of_four,
    wait_for,
)
from tpfabric_core.api import GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_NAME_LABEL, GANG_SIZE_LABEL, RANK_LABEL
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def components(tpfabric_scheduling: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """The webhook (configured) and the operator, beside the placer and the scheduler."""
    with operator_and_gang_webhook(tpfabric_scheduling, api) as hook:
        yield hook


@pytest.fixture
def enabled(
    components: GangWebhook, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    fake_nodes(two_leaves_of_four("waits", "wts", rails=8))
    yield opt_in(api, namespace)
    clear_jobs_and_pods(api, namespace)


def member(name: str, gang: str, size: str, rank: int | None = None) -> dict[str, Any]:
    labels = {GANG_NAME_LABEL: gang, GANG_SIZE_LABEL: size}
    if rank is not None:
        labels[RANK_LABEL] = str(rank)
    return gang_pod(name, labels, cpu="1")


def record(api: client.ApiClient, namespace: str, gang: str) -> dict[str, Any] | None:
    try:
        return dict(
            client.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, GANG_PLURAL, gang
            )
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def condition(api: client.ApiClient, namespace: str, gang: str, kind: str) -> dict[str, Any] | None:
    found = record(api, namespace, gang) or {}
    return next(
        (c for c in (found.get("status") or {}).get("conditions") or [] if c["type"] == kind),
        None,
    )


def events_of(api: client.ApiClient, namespace: str, pod: str, reason: str) -> list[Any]:
    uid = client.CoreV1Api(api).read_namespaced_pod(pod, namespace).metadata.uid
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.uid={uid},reason={reason}"
    )
    return list(listed.items)


def tpfabric(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpfabric_cli", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_pod_group_with_3_of_its_4_pods_says_so_on_its_record_its_pods_and_in_explain(
    tpfabric_scheduling: LocalCluster, api: client.ApiClient, enabled: str
) -> None:
    core = client.CoreV1Api(api)
    for index in range(3):
        core.create_namespaced_pod(enabled, member(f"grp-{index}", "grp", "4"))

    def short() -> dict[str, Any] | None:  # the record may first see fewer of them
        found = condition(api, enabled, "grp", "PodsCreated")
        return found if found is not None and found["message"].startswith("3 of 4") else None

    created = wait_for(short, 60, what="the record's PodsCreated condition with the 3 pods")
    assert (created["status"], created["reason"]) == ("False", "PodsMissing")
    assert created["message"].startswith(
        "3 of 4 pods exist; 1 missing (ranks follow the order of creation and are given once "
        "every pod exists): the gang waits for the rest"
    )
    assert created["lastTransitionTime"]
    status = (record(api, enabled, "grp") or {})["status"]
    assert (status["phase"], status["ready"], status["pods"]) == ("Pending", "0/4", 3)

    # after the notice (4 s on the local cluster), each pod is told, once
    for index in range(3):
        told = wait_for(
            lambda index=index: events_of(api, enabled, f"grp-{index}", "PodsMissing"),
            30,
            what=f"the PodsMissing Event on grp-{index}",
        )
        assert len(told) == 1
        assert told[0].type == "Warning"
        assert (
            f"gang grp has waited since {created['lastTransitionTime']} for its pods: 3 of 4"
            in (told[0].message)
        )

    shown = tpfabric(tpfabric_scheduling, "explain", "grp", "-n", enabled)
    assert shown.returncode == 0, shown.stderr
    assert "3 of 4 pods exist; 1 missing" in shown.stdout
    assert "(no pod)" not in shown.stdout
    assert "│ ?" not in shown.stdout
    assert shown.stdout.count("- (not given yet)") == 3
    queued = tpfabric(tpfabric_scheduling, "queue", "-n", enabled, "--json")
    assert queued.returncode == 0, queued.stderr
    (entry,) = json.loads(queued.stdout)
    assert (entry["name"], entry["state"]) == ("grp", "Pending")
    assert entry["waitsFor"].startswith("3 of 4 pods exist; 1 missing")

    # the fourth pod: the gang is whole, planned and runs; its record says all exist
    core.create_namespaced_pod(enabled, member("grp-3", "grp", "4"))
    whole = wait_for(
        lambda: (
            (c := condition(api, enabled, "grp", "PodsCreated")) and c["status"] == "True" and c
        ),
        60,
        what="PodsCreated True",
    )
    assert whole["reason"] == "AllPodsExist"
    wait_for(
        lambda: ((record(api, enabled, "grp") or {}).get("status") or {}).get("phase") == "Running",
        60,
        what="the gang Running",
    )


def test_a_ranked_gang_short_of_pods_names_the_missing_rank(
    tpfabric_scheduling: LocalCluster, api: client.ApiClient, enabled: str
) -> None:
    core = client.CoreV1Api(api)
    for rank in (0, 1, 3):
        core.create_namespaced_pod(enabled, member(f"ranked-{rank}", "ranked", "4", rank))

    def three() -> dict[str, Any] | None:  # the record may first see fewer of them
        found = condition(api, enabled, "ranked", "PodsCreated")
        return found if found and found["message"].startswith("3 of 4") else None

    created = wait_for(three, 60, what="the record's PodsCreated condition with the 3 pods")
    assert created["status"] == "False"
    assert created["message"].startswith("3 of 4 pods exist; missing rank 2:")
    shown = tpfabric(tpfabric_scheduling, "explain", "ranked", "-n", enabled, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["pods"]["missingRanks"] == [2]
    assert [(row["rank"], row["pod"]) for row in document["ranks"]] == [
        (0, "ranked-0"), (1, "ranked-1"), (2, None), (3, "ranked-3")
    ]  # fmt: skip


def test_a_pod_admitted_unwired_is_told_why_in_an_event_on_it(
    api: client.ApiClient, enabled: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(enabled, member("abc-0", "abc", "abc"))
    pod = core.read_namespaced_pod("abc-0", enabled)
    assert pod.spec.scheduler_name == "default-scheduler"  # unwired: no gate, no rdma-init
    assert not pod.spec.scheduling_gates
    (told,) = wait_for(
        lambda: events_of(api, enabled, "abc-0", "GangPodNotWired"),
        30,
        what="the GangPodNotWired Event on the pod",
    )
    assert told.type == "Warning"
    assert "tpfabric.io/gang-size: 'abc' is not a whole number" in told.message
    assert record(api, enabled, "abc") is None
