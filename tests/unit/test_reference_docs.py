"""The reference pages cannot drift from the code: every label and annotation key tpfabric's
code names is in docs/labels-and-annotations.md (and no key there is gone from the code); the
generated pages (CLI, chart values, Gang CRD) are what their generators print now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "kube", "cli", "operator", "scheduler_plugin", "fabric_agent", "rdma_init")
LABELS_DOC = REPO / "docs" / "labels-and-annotations.md"
#: a key written out in full, or built on the topology prefix (``labels.PREFIX + "health"``)
_FULL = re.compile(r"[\"']((?:topology\.)?tpfabric\.io/[a-z0-9][a-z0-9.-]*)[\"']")
_BUILT = re.compile(r"\bPREFIX \+ \"([a-z0-9-]+)\"")
#: names of this form that are not keys: the API's group/version, a report's schema
_NOT_KEYS = re.compile(r"^tpfabric\.io/(v\d\w*|rdma-init-report)$")
_DOC_KEY = re.compile(r"^\| `((?:topology\.)?tpfabric\.io/[^`]+)`", re.MULTILINE)


def code_keys() -> set[str]:
    """Return every label and annotation key the product code names."""
    found: set[str] = set()
    for package in PRODUCT:
        for path in (REPO / package).rglob("*.py"):
            text = path.read_text()
            found |= {m for m in _FULL.findall(text) if not _NOT_KEYS.match(m)}
            found |= {f"topology.tpfabric.io/{m}" for m in _BUILT.findall(text)}
    # rail-<N> is built from a prefix ("rail-") and a number
    return {"topology.tpfabric.io/rail-<N>" if k.endswith("/rail-") else k for k in found}


def documented_keys() -> set[str]:
    return set(_DOC_KEY.findall(LABELS_DOC.read_text()))


def test_every_key_in_the_code_is_documented_and_every_documented_key_exists() -> None:
    code, documented = code_keys(), documented_keys()
    assert code - documented == set(), "add these to docs/labels-and-annotations.md"
    assert documented - code == set(), "gone from the code: remove from the page"


def test_the_key_scan_finds_keys_written_out_and_built_on_the_prefix() -> None:
    keys = code_keys()
    assert {"tpfabric.io/gang-size", "topology.tpfabric.io/health"} <= keys
    assert "topology.tpfabric.io/fabric-health" in keys  # labels.PREFIX + "fabric-health"
    assert not any(k.startswith("tpfabric.io/v1") for k in keys)


def test_the_cli_and_chart_values_pages_are_their_generators_output() -> None:
    from tpfabric_cli.main import generated_pages  # noqa: PLC0415

    for path, text in generated_pages().items():
        assert path.read_text() == text, f"{path.name} is stale: run `tpfabric docs generate`"


def test_a_values_comment_is_read_with_its_continuation_lines_and_nesting() -> None:
    from tpfabric_cli.reference import values_comments  # noqa: PLC0415

    text = (
        "# A section comment, not a value's.\n"
        "uninstall:\n"
        "  # -- Run the cleanup\n"
        "  # when the release goes.\n"
        "  cleanup: true\n"
        "  waitSeconds: 120\n"
        "# -- Top.\n"
        "name: x\n"
    )
    assert values_comments(text) == {
        "uninstall.cleanup": "Run the cleanup when the release goes.",
        "name": "Top.",
    }
