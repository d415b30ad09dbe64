"""The benchmarks use the product through its public names only.

import-linter checks modules, not names, so this walks ``bench/tpfabric_bench`` with ``ast``: no
``from tpfabric_X import _name``, no import of a ``_module`` of a product package, and no
``tpfabric_X._name`` attribute reached through a module imported whole. Private names between the
benchmark's own modules (``tpfabric_bench._harness`` and the like) are the package's business.
A private method called on a product object is not visible to ``ast`` (the relist the
benchmarks measure goes through the informer's public ``relist``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tpfabric_bench

PRODUCT = frozenset(
    {
        "tpfabric_core",
        "tpfabric_kube",
        "tpfabric_operator",
        "tpfabric_scheduler",
        "tpfabric_cli",
        "tpfabric_localcluster",
        "tpfabric_deviceplugin",
        "tpfabric_fabric_agent",
        "tpfabric_rdma_init",
    }
)
BENCH = Path(tpfabric_bench.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str) -> list[str]:
    """Return each use of a product's private name in ``source``, as ``line: what``."""
    found = []
    whole: dict[str, str] = {}  # local name -> product module imported whole
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRODUCT:
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
                    whole[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in PRODUCT:
                continue
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module} import ...")
            found += [
                f"{node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root: ast.expr = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in whole:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_benchmarks_import_no_private_name_of_the_product() -> None:
    uses = {
        str(path.relative_to(BENCH)): found
        for path in sorted(BENCH.rglob("*.py"))
        if (found := private_uses(path.read_text()))
    }
    assert uses == {}


def test_the_check_sees_each_way_of_reaching_a_private_name() -> None:
    source = (
        "import tpfabric_scheduler.store\n"
        "from tpfabric_scheduler.store import _Kind, ClusterStore\n"
        "from tpfabric_core._private import thing\n"
        "from tpfabric_bench._harness import _own\n"
        "tpfabric_scheduler.store._Kind\n"
        "tpfabric_scheduler.store.ClusterStore\n"
    )
    assert private_uses(source) == [
        "2: from tpfabric_scheduler.store import _Kind",
        "3: from tpfabric_core._private import ...",
        "5: tpfabric_scheduler.store._Kind",
    ]
