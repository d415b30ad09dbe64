"""The pure parts of ``tpfabric bench fleet``: the objects it makes, when a rollout is done, which
groups crossed a spine or a leaf from the samples, the training gangs' numbers, the table and the
command line."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from tpfabric_bench.fleet import (
    ROLLOUT_ANNOTATION,
    Placement,
    TrainingGang,
    group_domains,
    live_placements,
    parse_args,
    rollout_done,
    rollout_patch,
    rollout_summary,
    serving_manifest,
    summary_table,
    training_pods,
    training_summary,
)
from tpfabric_core.gangs import GANG_NAME_LABEL, GANG_SIZE_LABEL, RANK_LABEL

# two spines of two leaves of two nodes
LEAF_OF = {f"n{i}": f"leaf-{(i - 1) // 2 + 1}" for i in range(1, 9)}
SPINE_OF = {f"n{i}": f"su-{(i - 1) // 4 + 1}" for i in range(1, 9)}


def at(group: int, *nodes: str, revision: str = "old") -> tuple[Placement, ...]:
    """The live bound pods of group ``serve-<group>`` on ``nodes``."""
    return tuple(Placement(f"serve-{group}", revision, node) for node in nodes)


def lws_pod(group: int, node: str | None, revision: str = "r1", **metadata: Any) -> dict[str, Any]:
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
    }
    return {
        "metadata": {"labels": labels} | metadata,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running"},
    }


def lws_status(groups: int, **status: Any) -> dict[str, Any]:
    base = {
        "observedGeneration": 2,
        "replicas": groups,
        "readyReplicas": groups,
        "updatedReplicas": groups,
        "conditions": [{"type": "Available", "status": "True"}],
    }
    return {"metadata": {"generation": 2}, "status": base | status}


# -- the objects ----------------------------------------------------------------------------------


def test_the_serving_set_rolls_out_with_the_surge_and_unavailability_asked() -> None:
    lws = serving_manifest(50, 2, surge=2, unavailable=1)
    assert lws["spec"]["replicas"] == 50
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 2, "maxUnavailable": 1},
    }


def test_the_rollout_patch_changes_the_pod_template() -> None:
    patch = rollout_patch("1")
    template = patch["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert template["metadata"]["annotations"] == {ROLLOUT_ANNOTATION: "1"}


def test_training_pods_are_one_ranked_plain_gang_of_whole_nodes() -> None:
    pods = training_pods("train-00001", 4)
    assert [p["metadata"]["name"] for p in pods] == [f"train-00001-{r}" for r in range(4)]
    for rank, pod in enumerate(pods):
        labels = pod["metadata"]["labels"]
        assert labels[GANG_NAME_LABEL] == "train-00001"
        assert labels[GANG_SIZE_LABEL] == "4"
        assert labels[RANK_LABEL] == str(rank)
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"


# -- when the rollout is done ---------------------------------------------------------------------


def test_a_rollout_is_done_when_every_group_is_updated_and_ready() -> None:
    assert rollout_done(lws_status(50), 50)


@pytest.mark.parametrize(
    "status",
    [
        {"observedGeneration": 1},
        {"updatedReplicas": 49},
        {"readyReplicas": 49},
        {"replicas": 52},  # surge groups still there
        {"conditions": [{"type": "UpdateInProgress", "status": "True"}]},
    ],
)
def test_a_rollout_is_not_done_while_the_status_says_otherwise(status: dict[str, Any]) -> None:
    assert not rollout_done(lws_status(50, **status), 50)


# -- the samples ----------------------------------------------------------------------------------


def test_only_live_bound_pods_of_groups_are_placements() -> None:
    pods = [
        lws_pod(0, "n1", name="p0") | {"spec": {"nodeName": "n1", "schedulerName": "tpfabric"}},
        lws_pod(0, None),  # not bound yet
        lws_pod(1, "n3", deletionTimestamp="2026-01-01T00:00:00Z"),
        {"metadata": {"labels": {}}, "spec": {"nodeName": "n4"}},  # no group
    ]
    assert live_placements(pods) == (Placement("serve-0", "r1", "n1", "p0", "tpfabric"),)


def test_a_group_under_one_leaf_crossed_nothing() -> None:
    domains = group_domains([(0.0, at(0, "n1", "n2")), (0.5, at(0, "n1", "n2"))], LEAF_OF, SPINE_OF)
    assert domains["serve-0"] == {
        "leaves": 1,
        "spines": 1,
        "leaves_any_revision": 1,
        "spines_any_revision": 1,
        "leaves_seen": ["leaf-1"],
        "spines_seen": ["su-1"],
        "first_crossed": None,
    }


def test_a_group_under_two_leaves_of_one_spine_crossed_a_leaf_not_a_spine() -> None:
    domains = group_domains([(0.0, at(0, "n1", "n3"))], LEAF_OF, SPINE_OF)
    assert (domains["serve-0"]["leaves"], domains["serve-0"]["spines"]) == (2, 1)


def test_a_group_under_two_spines_crossed_both() -> None:
    domains = group_domains([(0.0, at(0, "n1")), (0.5, at(0, "n1", "n5"))], LEAF_OF, SPINE_OF)
    assert (domains["serve-0"]["leaves"], domains["serve-0"]["spines"]) == (2, 2)
    assert domains["serve-0"]["spines_seen"] == ["su-1", "su-2"]
    first = domains["serve-0"]["first_crossed"]
    assert first["t"] == 0.5
    assert [(pod["node"], pod["leaf"], pod["spine"]) for pod in first["pods"]] == [
        ("n1", "leaf-1", "su-1"),
        ("n5", "leaf-3", "su-2"),
    ]


def test_moving_between_samples_is_not_crossing() -> None:
    samples = [(0.0, at(0, "n1", "n2")), (0.5, at(0, "n5", "n6", revision="new"))]
    domains = group_domains(samples, LEAF_OF, SPINE_OF)
    assert domains["serve-0"]["spines"] == domains["serve-0"]["spines_any_revision"] == 1
    assert domains["serve-0"]["leaves_seen"] == ["leaf-1", "leaf-3"]


def test_old_and_new_pods_apart_at_once_are_a_handover_not_a_crossing() -> None:
    sample = at(0, "n1") + at(0, "n5", revision="new")
    domains = group_domains([(0.0, sample)], LEAF_OF, SPINE_OF)
    assert domains["serve-0"]["spines"] == 1
    assert domains["serve-0"]["spines_any_revision"] == 2
    assert domains["serve-0"]["first_crossed"] is None


def test_a_node_without_labels_is_a_domain_of_its_own() -> None:
    domains = group_domains([(0.0, at(0, "n1", "elsewhere"))], LEAF_OF, SPINE_OF)
    assert domains["serve-0"]["leaves"] == 2


# -- the summary ----------------------------------------------------------------------------------


def test_the_summary_names_crossings_returns_and_surge_groups() -> None:
    before = at(0, "n1", "n2") + at(1, "n3", "n4")
    samples = [
        (0.0, before),
        (0.5, at(0, "n1", "n5", revision="new") + at(1, "n3", "n4") + at(2, "n7", "n8")),
        (1.0, at(0, "n1", "n2", revision="new") + at(1, "n5", "n6", revision="new")),
    ]
    after = at(0, "n1", "n2", revision="new") + at(1, "n5", "n6", revision="new")
    found = rollout_summary(samples, before, after, groups=2, leaf_of=LEAF_OF, spine_of=SPINE_OF)
    assert found["crossed_spine"] == found["crossed_leaf"] == ["serve-0"]
    assert found["back_on_their_leaf"] == 1
    assert found["back_on_their_nodes"] == 1
    assert found["moved"] == [{"group": "serve-1", "before": ["leaf-2"], "after": ["leaf-3"]}]
    assert found["surge_groups"] == [{"group": "serve-2", "leaves": ["leaf-4"], "spines": ["su-2"]}]
    assert found["groups_seen"] == 3
    assert (found["samples"], found["sample_gap_max_s"]) == (3, 0.5)


def test_a_group_on_other_nodes_of_its_leaf_came_back_to_its_leaf_only() -> None:
    found = rollout_summary(
        [], at(0, "n1", "n2"), at(0, "n2", "n1"), groups=1, leaf_of=LEAF_OF, spine_of=SPINE_OF
    )
    assert (found["back_on_their_leaf"], found["back_on_their_nodes"]) == (1, 1)
    found = rollout_summary(
        [], at(0, "n1"), at(0, "n2"), groups=1, leaf_of=LEAF_OF, spine_of=SPINE_OF
    )
    assert (found["back_on_their_leaf"], found["back_on_their_nodes"]) == (1, 0)


def test_a_group_missing_before_the_patch_did_not_come_back() -> None:
    after = at(0, "n1", "n2")
    found = rollout_summary([], (), after, groups=1, leaf_of=LEAF_OF, spine_of=SPINE_OF)
    assert found["back_on_their_leaf"] == 0
    assert found["sample_gap_max_s"] is None


# -- the training gangs ---------------------------------------------------------------------------


def test_training_counts_the_gangs_that_ran_in_the_window_and_their_wait() -> None:
    gangs = [
        TrainingGang("before", created=0.0, running=1.0, deleted=5.0),  # gone before the window
        TrainingGang("overlap", created=8.0, running=11.0, deleted=20.0),
        TrainingGang("inside", created=12.0, running=13.0, deleted=14.0),
        TrainingGang("waiting", created=25.0, posted=26.0),
        TrainingGang("unposted", created=29.0),
        TrainingGang("after", created=40.0, running=41.0),
    ]
    found = training_summary(gangs, start=10.0, end=30.0)
    assert (found["ran"], found["created"]) == (2, 3)
    assert (found["waiting_at_end"], found["unposted_at_end"]) == (1, 1)
    assert found["wait_s"]["count"] == 2
    assert found["wait_s"]["max"] == 3.0


# -- the report and the command line --------------------------------------------------------------


def test_the_table_shows_the_rollout_the_crossings_and_the_training() -> None:
    rollout = rollout_summary(
        [(0.0, at(0, "n1", "n5")), (0.5, at(1, "n3"))],
        at(0, "n1", "n5"),
        at(0, "n1", "n2"),
        groups=1,
        leaf_of=LEAF_OF,
        spine_of=SPINE_OF,
    )
    result = {
        "nodes": 8,
        "leaves": 4,
        "spines": 2,
        "nodes_per_leaf": 2,
        "groups": 1,
        "size": 2,
        "max_surge": 1,
        "max_unavailable": 1,
        "cluster_up_s": 3.0,
        "nodes_ready_s": 1.0,
        "serving_ready_s": 2.0,
        "training_fill_s": 4.0,
        "busy_nodes_at_patch": 6,
        "busy_nodes_at_end": 5,
        "rollout_s": 12.5,
        "rollout_cpu_s": {"kube-apiserver": 3.0},
        "rollout": rollout,
        "training": training_summary([TrainingGang("t", 1.0, 2.0, 3.0)], 0.0, 5.0)
        | {"gangs": 1, "size": 2, "hold_s": 1.0},
    }
    text = io.StringIO()
    Console(file=text, width=200, highlight=False).print(summary_table(result))
    out = text.getvalue()
    assert "12.5 s" in out
    assert "1 of 2 (serve-0)" in out  # crossed a spine
    assert "1: serve-1 leaf-2 (su-1)" in out  # the surge group
    assert "0 of 1 (0)" in out  # not back on its leaf


def test_the_defaults_are_the_issues_fleet() -> None:
    args = parse_args([])
    assert (args.nodes, args.groups, args.size, args.max_surge, args.max_unavailable) == (
        1000,
        50,
        2,
        2,
        1,
    )
    assert (args.train_gangs, args.train_size) == (80, 8)
    assert args.json is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--groups", "0"],
        ["--max-surge", "0", "--max-unavailable", "0"],
        ["--train-gangs", "-1"],
        ["--nodes", "10", "--groups", "5", "--max-surge", "1"],  # 12 nodes of serving
        ["--timeout", "0"],
    ],
)
def test_bad_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "error" in capsys.readouterr().err
