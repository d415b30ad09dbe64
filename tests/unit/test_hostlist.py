from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpfabric_core.hostlist import HostlistError, compress_hostlist, expand_hostlist


def test_expands_padded_ranges_and_lists_in_order() -> None:
    assert expand_hostlist("dgx-[01-03,07]") == ["dgx-01", "dgx-02", "dgx-03", "dgx-07"]


def test_expands_several_items_and_unpadded_ranges() -> None:
    assert expand_hostlist("n[9-10],login") == ["n9", "n10", "login"]


def test_expands_several_brackets_as_a_product() -> None:
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]


def test_drops_duplicates() -> None:
    assert expand_hostlist("a1,a[1-2]") == ["a1", "a2"]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("dgx-[01-03", "unbalanced '['"),
        ("dgx-01]", "unbalanced ']'"),
        ("dgx-[03-01]", "runs backwards"),
        ("dgx-[a-b]", "not numeric"),
        ("dgx-[1,,2]", "empty range"),
    ],
)
def test_rejects_malformed_expressions_naming_the_problem(expr: str, problem: str) -> None:
    with pytest.raises(HostlistError, match=re.escape(problem)):
        expand_hostlist(expr)


def test_compresses_runs_of_trailing_numbers() -> None:
    names = ["b05-c01", "b05-c02", "b05-c03", "b05-c07", "login"]
    assert compress_hostlist(names) == "login,b05-c[01-03,07]"


names = st.lists(
    st.builds(
        lambda prefix, number, pad: f"{prefix}{str(number).zfill(pad)}",
        st.sampled_from(["dgx-", "node", "a06-p1-dgx-02-c"]),
        st.integers(0, 300),
        st.integers(1, 4),
    ),
    max_size=40,
)


@given(names)
def test_compress_then_expand_gives_the_same_set(hosts: list[str]) -> None:
    assert sorted(expand_hostlist(compress_hostlist(hosts))) == sorted(set(hosts))
