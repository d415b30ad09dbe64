"""``status.placement`` has one owner: no product module but
:mod:`tpfabric_core.api.placement` reads or writes it, or the operator's status words the placer
reads, by string key.

The check reads every module's syntax tree (comments and docstrings do not count) and flags: a
key only ``status.placement`` has (``domainLabels``, ``waitingSince``...) or a condition word
the two processes share (``WorkersCreated``, ``CreateFailed``, ``Surge``), anywhere in code;
``"placement"`` or ``"problems"`` as a key read, looked up or written in a mapping display; and
any string key read of a variable named after a placement (``placement.get("nodes")``,
``previous_placement[...]``). A placement held under another name and read by a generic key
(``p.get("state")``) is beyond a syntax check: review catches those.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: the product source folders (the init program and the fake device plugin read no status)
PRODUCT = (
    "core/tpfabric_core",
    "kube/tpfabric_kube",
    "scheduler_plugin/tpfabric_scheduler",
    "operator/tpfabric_operator",
    "cli/tpfabric_cli",
    "bench/tpfabric_bench",
    "fabric_agent/tpfabric_fabric_agent",
    "e2e/tpfabric_localcluster",
)

#: where string keys of ``status.placement`` may still be read, and why
ALLOWED = {
    "core/tpfabric_core/api/placement.py": "the owner: the one reader and writer",
}

#: keys only status.placement has, and the operator's condition words the placer reads
OWNED_WORDS = frozenset(
    {
        "domainLabels",
        "waitingSince",
        "releasedAt",
        "plannedAt",
        "replacedRanks",
        "previousNodes",
        "healthyRoom",
        "refusedNodes",
        "modelledAllreduceUs",
        "degradedNodes",
        "WorkersCreated",
        "CreateFailed",
        "Surge",
    }
)
#: status keys that are read by key only through the owner
OWNED_KEYS = frozenset({"placement", "problems"})
_LOOKUPS = frozenset({"get", "pop", "setdefault"})


def _docstrings(tree: ast.AST) -> set[int]:
    """Return the ids of the docstring and bare-string statements of ``tree``."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _named_placement(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "placement" in name.lower()


def _key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def offences(source: str) -> list[tuple[int, str]]:
    """Return (line, what) for every string-key use of the owned status in ``source``."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in skipped:
            if isinstance(node.value, str) and node.value in OWNED_WORDS:
                found.append((node.lineno, repr(node.value)))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and (key := _key(node.slice)) is not None
        ):
            if key in OWNED_KEYS or _named_placement(node.value):
                found.append((node.lineno, f"[{key!r}]"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _LOOKUPS
            and node.args
            and (key := _key(node.args[0])) is not None
            and (key in OWNED_KEYS or _named_placement(node.func.value))
        ):
            found.append((node.lineno, f".{node.func.attr}({key!r})"))
        elif isinstance(node, ast.Dict):
            found += [
                (node.lineno, f"{{{key!r}: ...}}")
                for k in node.keys
                if k is not None and (key := _key(k)) in OWNED_KEYS
            ]
    return found


def _allowed(relative: str) -> bool:
    return any(relative == a or (a.endswith("/") and relative.startswith(a)) for a in ALLOWED)


def test_no_product_module_reads_the_placement_by_string_key() -> None:
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if _allowed(relative):
                continue
            found += [f"{relative}:{line}: {what}" for line, what in offences(path.read_text())]
    assert not found, (
        "status.placement and the status words the placer and the operator share are read and "
        "written through tpfabric_core.api.placement only:\n" + "\n".join(found)
    )


def test_every_allowed_place_exists() -> None:
    for place in ALLOWED:
        assert (ROOT / place).exists(), place


@pytest.mark.parametrize(
    "source",
    [
        'x = status.get("placement") or {}',
        'x = status["placement"]',
        'patch = {"placement": None}',
        'since = p.get("waitingSince")',
        'nodes = placement.get("nodes")',
        'nodes = self.previous_placement["nodes"]',
        'if c.get("type") == "Surge": pass',
        'problems = status.get("problems")',
    ],
)
def test_the_check_sees_a_raw_read(source: str) -> None:
    assert offences(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""status.placement.waitingSince is read by the owner."""',
        "nodes = placement.nodes",
        'app.command("placement")',
        'x = f"placement {state}"',
        'document["placement"] = dict(placement.raw)',
        'labels = node.get("labels")',
    ],
)
def test_the_check_passes_what_is_not_a_read(source: str) -> None:
    assert not offences(source)
