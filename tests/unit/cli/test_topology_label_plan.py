"""`tpfabric topology label`: the plan (pure), and what it refuses before touching a cluster."""

from __future__ import annotations

from pathlib import Path

from cli_runner import tpfabric

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_cli.topology import EXIT_EMPTY, plan_labels
from tpfabric_core import labels

RAIL0 = labels.rail_key(0)
RAIL7 = labels.rail_key(7)


def test_the_plan_sets_changed_labels_and_removes_stale_ones_only_under_the_prefix() -> None:
    desired = {"n1": {labels.LEAF: "l1", RAIL0: "sw1"}}
    current = {"n1": {labels.LEAF: "old", RAIL0: "sw1", RAIL7: "gone", "example.com/keep": "yes"}}
    (change,) = plan_labels(desired, current).changes
    assert change.to_set == {labels.LEAF: "l1"}
    assert change.to_remove == [RAIL7]
    assert change.current[labels.LEAF] == "old"


def test_nodes_on_one_side_only_are_reported_and_left_alone() -> None:
    plan = plan_labels(
        {"n1": {labels.LEAF: "l1"}, "n2": {labels.LEAF: "l1"}},
        {"n1": {labels.LEAF: "l1"}, "cpu-1": {labels.LEAF: "stale"}},
    )
    assert plan.changes == ()
    assert plan.unchanged == ("n1",)
    assert plan.not_in_cluster == ("n2",)
    assert plan.not_in_fabric == ("cpu-1",)


def test_a_second_plan_after_applying_the_first_is_empty() -> None:
    desired = {"n1": {labels.LEAF: "l1", RAIL0: "sw1"}}
    current = {"n1": {RAIL7: "x", "kubernetes.io/hostname": "n1"}}
    (change,) = plan_labels(desired, current).changes
    after = {k: v for k, v in current["n1"].items() if k not in change.to_remove}
    after |= change.to_set
    assert plan_labels(desired, {"n1": after}).changes == ()


def test_an_empty_fabric_exits_3_before_any_cluster_is_contacted(
    example_bad_out: Path, tmp_path: Path
) -> None:
    result = tpfabric(
        "topology", "label", "--ibnetdiscover", example_bad_out,
        "--kubeconfig", tmp_path / "nope", "--apply",
    )  # fmt: skip
    assert result.exit_code == EXIT_EMPTY


def test_a_missing_kubeconfig_is_an_input_error(example_out: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = tpfabric("topology", "label", "--ibnetdiscover", example_out, "--kubeconfig", missing)
    assert result.exit_code == EXIT_INPUT
    assert result.stderr.strip() == f"error: {missing}: no such kubeconfig file; check --kubeconfig"


def test_a_left_label_is_neither_set_nor_removed() -> None:
    desired = {"n1": {labels.LEAF: "l1", labels.HEALTH: "ok"}, "n2": {labels.LEAF: "l1"}}
    current = {
        "n1": {labels.LEAF: "l1", labels.HEALTH: "degraded"},  # the agent's live judgement
        "n2": {labels.LEAF: "l1", labels.HEALTH: "ok"},
    }
    leave = frozenset({labels.HEALTH})
    plan = plan_labels(desired, current, leave)
    assert plan.changes == ()
    assert plan.unchanged == ("n1", "n2")
    (first, second) = plan_labels(desired, current).changes  # without it: overwritten, removed
    assert first.to_set == {labels.HEALTH: "ok"}
    assert second.to_remove == [labels.HEALTH]
