"""The demo's contrast without a cluster: the seeded load, what a placement spans and costs."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import EXAMPLES

from tpfabric_cli.placement_contrast import (
    background_load,
    format_seconds,
    placement_facts,
    verdict,
)
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_core.placement.topology import ClusterTopology

ONE_LEAF = ["dgx-su1-l1-01", "dgx-su1-l1-02", "dgx-su1-l1-03", "dgx-su1-l1-04"]
TWO_SPINES = ["dgx-su1-l1-01", "dgx-su1-l2-01", "dgx-su2-l1-01", "dgx-su2-l3-01"]


@pytest.fixture(scope="module")
def small() -> ClusterTopology:
    description = parse_fabric_description((EXAMPLES / "small.yaml").read_text())
    return ClusterTopology.from_node_labels(
        {node.name: description.node_labels(node) for node in description.nodes}
    )


def test_the_load_is_the_same_for_a_seed_and_leaves_room_for_the_jobs(
    small: ClusterTopology,
) -> None:
    busy = background_load(small, share=0.4, seed=7, free_in_a_leaf=4, free_in_a_spine=20)
    assert busy == background_load(small, share=0.4, seed=7, free_in_a_leaf=4, free_in_a_spine=20)
    assert busy != background_load(small, share=0.4, seed=8, free_in_a_leaf=4, free_in_a_spine=20)
    assert len(busy) == round(0.4 * len(small))
    free = [n for n in small.node_names if n not in busy]
    per_leaf = [sum(small.leaf_of(n).path == leaf.path for n in free) for leaf in small.domains[0]]
    assert max(per_leaf) >= 4


def test_a_load_that_cannot_leave_room_is_refused(small: ClusterTopology) -> None:
    with pytest.raises(ValueError, match="lower the share"):
        background_load(small, share=0.9, seed=7, free_in_a_leaf=8, free_in_a_spine=20, tries=50)


def test_one_leaf_is_one_hop_and_two_spines_are_five(small: ClusterTopology) -> None:
    leaf = placement_facts("tpfabric", ONE_LEAF, small, 8)
    spread = placement_facts("default", TWO_SPINES, small, 8)
    assert (leaf.leaves, leaf.spines, leaf.max_hops) == (("su1-leaf1",), ("su1",), 1)
    assert spread.leaves == ("su1-leaf1", "su1-leaf2", "su2-leaf1", "su2-leaf3")
    assert (spread.spines, spread.max_hops) == (("su1", "su2"), 5)
    assert spread.allreduce.best_s > leaf.allreduce.best_s


def test_the_verdict_names_the_cost_of_a_spread(small: ClusterTopology) -> None:
    did_well, sentence = verdict(
        placement_facts("default", TWO_SPINES, small, 8),
        placement_facts("tpfabric", ONE_LEAF, small, 8),
    )
    assert not did_well
    assert "span 4 leaf domains over 2 spines" in sentence
    assert "5 switch hops instead of 1" in sentence
    assert (
        "over 1 spine:"
        in verdict(
            placement_facts("default", ["dgx-su1-l1-01", "dgx-su1-l2-01"], small, 8),
            placement_facts("tpfabric", ONE_LEAF[:2], small, 8),
        )[1]
    )


def test_the_verdict_says_plainly_when_the_default_scheduler_got_lucky(
    small: ClusterTopology,
) -> None:
    lucky = ["dgx-su2-l4-01", "dgx-su2-l4-03", "dgx-su2-l4-05", "dgx-su2-l4-08"]
    did_well, sentence = verdict(
        placement_facts("default", lucky, small, 8),
        placement_facts("tpfabric", ONE_LEAF, small, 8),
    )
    assert did_well
    assert sentence.startswith("The default scheduler happened to do well this time")


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.000153159, "153 µs"), (0.0123, "12.3 ms"), (2.5e-6, "2.5 µs")]
)
def test_times_read_in_microseconds_or_milliseconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_the_contrast_job_is_an_example_that_belongs_on_one_leaf() -> None:
    from tpfabric_cli.demo import CONTRAST_JOB, FREE_IN_A_LEAF  # noqa: PLC0415

    text = Path(CONTRAST_JOB).read_text()
    assert f"workers: {FREE_IN_A_LEAF}" in text
    assert "level: leaf" in text
