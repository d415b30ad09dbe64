"""The operator stays laid out the way it works: one place registers kopf handlers, no module
grows past what a reader takes in at once, each part of the gang half has its tests beside it,
and comments say what the code is for, not which issue it came from.

(Which module may import which is import-linter's: pyproject.toml, "the operator's layers" and
"the operator's decisions are pure".) Each check is also run on a small broken sample, so that a
check which can no longer fail is caught too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
OPERATOR = REPO / "operator" / "tpfabric_operator"
TESTS = REPO / "tests" / "unit" / "operator"
#: a module longer than this is cut along its seams (docstrings and comments count)
MAX_LINES = 400
#: the integration tests of the operator (each also names what it checks in its docstring)
OPERATOR_INTEGRATION = (
    "test_operator.py",
    "test_lifecycle.py",
    "test_operator_boundaries.py",
    "test_operator_replicas.py",
    "test_gang_boundaries.py",
    "test_gang_webhook.py",
    "test_gangs_owned.py",
    "test_gangs_placed.py",
    "test_kueue.py",
    "test_serving.py",
)
#: the modules of the gang half tested through another's tests, and where
TESTED_THROUGH = {
    "kube": "against a real API server: tests/integration/test_gangs_owned.py and others",
    "apply_intent": "test_gang_sync.py, which runs the whole sync",
}

_REGISTRATION = re.compile(r"^\s*@?kopf\.(?:on\.\w+|index|timer|daemon)\(", re.MULTILINE)
_ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def modules() -> list[Path]:
    return sorted(OPERATOR.rglob("*.py"))


def registrations(text: str) -> list[str]:
    """Return the lines of ``text`` that register a kopf handler (a decorator, or one called)."""
    return [m.group(0).strip() for m in _REGISTRATION.finditer(text)]


def test_handlers_is_the_only_module_that_registers_kopf_handlers() -> None:
    found = {
        str(path.relative_to(OPERATOR)): registrations(path.read_text())
        for path in modules()
        if path.name != "handlers.py" or path.parent != OPERATOR
    }
    assert {k: v for k, v in found.items() if v} == {}
    assert len(registrations((OPERATOR / "handlers.py").read_text())) >= 10


def test_a_registration_is_found_as_a_decorator_and_as_a_call() -> None:
    sample = 'import kopf\n\n@kopf.on.event("nodes")\ndef f(**_): ...\n\nkopf.index("pods")(f)\n'
    assert registrations(sample) == ["@kopf.on.event(", "kopf.index("]
    assert registrations("kopf.event(body, reason='x', message='y')\nkopf.Memo()\n") == []


def over(limit: int, paths: list[Path]) -> dict[str, int]:
    """Return the files of ``paths`` longer than ``limit`` lines, with their length."""
    lengths = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in paths}
    return {name: n for name, n in lengths.items() if n > limit}


def test_no_operator_module_is_over_400_lines() -> None:
    assert over(MAX_LINES, modules()) == {}
    assert over(10, [OPERATOR / "handlers.py"]) != {}, "the check finds a long file"


def gang_parts() -> list[str]:
    return sorted(p.stem for p in (OPERATOR / "gangs").glob("*.py") if p.stem != "__init__")


def test_each_part_of_the_gang_half_has_its_tests_beside_it() -> None:
    missing = [
        part
        for part in gang_parts()
        if part not in TESTED_THROUGH and not (TESTS / "gangs" / f"test_gang_{part}.py").exists()
    ]
    assert missing == []
    assert set(TESTED_THROUGH) <= set(gang_parts()), "an exemption names a module that is gone"


def issue_numbers(paths: list[Path], root: Path = REPO) -> list[str]:
    """Return ``path:line: text`` for each line of ``paths`` that names an issue by number."""
    return [
        f"{p.relative_to(root)}:{n}: {line.strip()}"
        for p in paths
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if _ISSUE.search(line)
    ]


def test_the_operator_and_its_tests_say_intent_not_issue_numbers() -> None:
    paths = [
        *modules(),
        *sorted(TESTS.rglob("*.py")),
        *(REPO / "tests" / "integration" / name for name in OPERATOR_INTEGRATION),
    ]
    assert issue_numbers(paths) == []


def test_an_issue_number_is_found_in_a_comment_and_a_docstring(tmp_path: Path) -> None:
    issue = "issue"  # not spelled out with a number here, or this file would hold one
    sample = tmp_path / "sample.py"
    sample.write_text(
        f'"""Kept in step ({issue} 31)."""\nx = 1  # {issue.title()} #15\ntissue = 2\n'
    )
    assert issue_numbers([sample], tmp_path) == [
        f'sample.py:1: """Kept in step ({issue} 31)."""',
        f"sample.py:2: x = 1  # {issue.title()} #15",
    ]
