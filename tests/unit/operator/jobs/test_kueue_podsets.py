from __future__ import annotations

from typing import Any

from tpfabric_operator.jobs.kueue.podsets import admitted_pod_set, flavor_names, topology_domains

LEAF = "topology.tpfabric.io/leaf"
HOST = "kubernetes.io/hostname"


def admitted(**assignment: Any) -> dict[str, Any]:
    return {
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "workers", "flavors": {"nvidia.com/gpu": "h100"}, **assignment}
                ],
            }
        }
    }


H100 = {
    "metadata": {"name": "h100"},
    "spec": {
        "nodeLabels": {"gpu.example/model": "h100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def a_worker() -> dict[str, Any]:
    return {
        "metadata": {"name": "j-worker-0", "labels": {"tpfabric.io/job": "j"}, "annotations": {}},
        "spec": {"containers": [{"name": "w"}], "nodeSelector": {"zone": "a"}},
    }


def test_the_admitted_flavors_node_labels_and_tolerations_go_onto_every_worker() -> None:
    workload = admitted()
    assert flavor_names(workload) == ["h100"]
    info = admitted_pod_set(workload, {"h100": H100}, {"zone": "a"})
    assert info.conflict == ""
    pod = info.apply(a_worker())
    assert pod["spec"]["nodeSelector"] == {"zone": "a", "gpu.example/model": "h100"}
    assert pod["spec"]["tolerations"] == H100["spec"]["tolerations"]
    assert a_worker()["spec"]["nodeSelector"] == {"zone": "a"}  # the manifest is copied
    assert info.words() == "nodes gpu.example/model=h100"


def test_a_flavor_that_contradicts_the_template_is_a_conflict_not_a_silent_override() -> None:
    info = admitted_pod_set(admitted(), {"h100": H100}, {"gpu.example/model": "a100"})
    assert "conflicts with flavor h100's gpu.example/model=h100" in info.conflict
    missing = admitted_pod_set(admitted(), {}, {})
    assert missing.conflict == "ResourceFlavor h100 of the admission is not found"


def test_ready_admission_checks_pod_set_updates_are_applied_and_others_are_not() -> None:
    workload = admitted()
    workload["status"]["admissionChecks"] = [
        {
            "name": "prov",
            "state": "Ready",
            "podSetUpdates": [
                {
                    "name": "workers",
                    "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "pr-1"},
                    "nodeSelector": {"pool": "reserved"},
                }
            ],
        },
        {
            "name": "pending",
            "state": "Pending",
            "podSetUpdates": [{"name": "workers", "labels": {"never": "applied"}}],
        },
    ]
    pod = admitted_pod_set(workload, {"h100": H100}, {}).apply(a_worker())
    assert pod["spec"]["nodeSelector"]["pool"] == "reserved"
    assert pod["metadata"]["annotations"] == {
        "autoscaling.x-k8s.io/consume-provisioning-request": "pr-1"
    }
    assert "never" not in pod["metadata"]["labels"]


def test_the_compact_v1beta2_topology_assignment_is_decoded() -> None:
    assignment = {
        "levels": [LEAF, HOST],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "leaf-1"},
                    {"individual": {"prefix": "node-", "roots": ["03", "07"]}},
                ],
                "podCounts": {"universal": 1},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "leaf-2"}, {"universal": "node-12"}],
                "podCounts": {"individual": [2]},
            },
        ],
    }
    assert topology_domains(assignment) == (HOST, [("node-03", 1), ("node-07", 1), ("node-12", 2)])


def test_a_topology_assignment_becomes_a_required_affinity_inside_its_domains() -> None:
    workload = admitted(
        topologyAssignment={
            "levels": [LEAF],
            "slices": [
                {
                    "domainCount": 1,
                    "valuesPerLevel": [{"universal": "leaf-1"}],
                    "podCounts": {"universal": 2},
                }
            ],
        }
    )
    info = admitted_pod_set(workload, {"h100": H100}, {})
    assert info.topology == (LEAF, ("leaf-1",))
    worker = a_worker()
    worker["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                ]
            }
        }
    }
    terms = info.apply(worker)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    inside = {"key": LEAF, "operator": "In", "values": ["leaf-1"]}
    assert all(inside in term["matchExpressions"] for term in terms)  # AND-ed into every term
    assert "topology topology.tpfabric.io/leaf in leaf-1" in info.words()
    # Kueue's TAS marker: without it Kueue counts the workers again as non-TAS pods
    assert info.apply(worker)["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-unconstrained-topology": "true"
    }
    workload["spec"] = {"podSets": [{"name": "workers", "topologyRequest": {"required": LEAF}}]}
    assert admitted_pod_set(workload, {"h100": H100}, {}).annotations == {
        "kueue.x-k8s.io/podset-required-topology": LEAF
    }
