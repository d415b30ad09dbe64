"""The placer's layout is the map of its guarantees: every policy module has its test file, every
guarantee of docs/how-it-works.md links to its module, and no scheduler module outgrows what a
reader takes in at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "scheduler_plugin" / "tpfabric_scheduler"
POLICIES = sorted(p.stem for p in (PACKAGE / "policy").glob("*.py") if p.stem != "__init__")
TESTS = Path(__file__).parent / "policy"
#: the cycle is a short script; no module of the scheduler is a long read
MOST_LINES = {"placer.py": 350}
MOST_LINES_ELSEWHERE = 450


def test_there_is_a_policy_module_per_guarantee() -> None:
    assert POLICIES == [
        "bind_bound",
        "drop",
        "healthy_room",
        "holds",
        "mend",
        "near",
        "plan",
        "recovered",
        "refusals",
        "release",
        "requeue",
        "returning",
        "waiting",
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_module_has_its_test_file(policy: str) -> None:
    assert (TESTS / f"test_{policy}.py").exists(), f"tests/unit/scheduler/policy/test_{policy}.py"


@pytest.mark.parametrize("policy", POLICIES)
def test_how_it_works_links_every_policy_module(policy: str) -> None:
    doc = (ROOT / "docs" / "how-it-works.md").read_text()
    link = f"../scheduler_plugin/tpfabric_scheduler/policy/{policy}.py"
    assert f"]({link})" in doc, f"docs/how-it-works.md links no guarantee to {link}"


def test_no_policy_imports_the_api_client_or_the_writer() -> None:
    for path in (PACKAGE / "policy").glob("*.py"):
        source = path.read_text()
        found = re.findall(
            r"^(?:from|import) (kubernetes|kopf|tpfabric_scheduler\.(?:kube|writes|apply))",
            source,
            re.MULTILINE,
        )
        assert not found, f"{path.name} imports {found}"


def test_no_scheduler_module_is_a_long_read() -> None:
    long = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines()))
        > MOST_LINES.get(path.name, MOST_LINES_ELSEWHERE)
    }
    assert long == {}
