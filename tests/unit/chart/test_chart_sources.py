"""The chart's single sources: the CRD copy, values vs schema, documentation, versions."""

from __future__ import annotations

import re
import tomllib
from typing import Any

from chart_files import CHART, REPO, load_yaml, object_schemas, values_schema

CRDS = REPO / "crds"
CHART_CRDS = CHART / "files" / "crds"


def test_the_chart_ships_exactly_the_generated_crds() -> None:
    generated = {p.name: p.read_bytes() for p in CRDS.glob("*.yaml")}
    shipped = {p.name: p.read_bytes() for p in CHART_CRDS.glob("*.yaml")}
    assert generated, f"no CRD in {CRDS}"
    assert shipped == generated, (
        f"{CHART_CRDS.relative_to(REPO)} drifted from crds/: run `tpfabric crds generate`"
    )


def test_every_object_of_the_schema_rejects_unknown_keys() -> None:
    loose = [
        path
        for path, schema in object_schemas(values_schema())
        if schema.get("additionalProperties") is not False
    ]
    # but Helm's `global`, which a parent chart fills with its own keys (a subchart must take it)
    assert loose == ["global"], f"schema objects without additionalProperties: false: {loose}"


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, child in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        paths.add(path)
        paths |= _schema_paths(child, f"{path}.")
    return paths


def _value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Return the dotted paths of values.yaml, descending where the schema lists properties."""
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths.add(path)
        child = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and "properties" in child:
            paths |= _value_paths(value, child, f"{path}.")
    return paths


def test_the_schema_describes_exactly_the_keys_of_values_yaml() -> None:
    schema = values_schema()
    in_values = _value_paths(load_yaml(CHART / "values.yaml"), schema)
    in_schema = _schema_paths(schema)
    assert in_values - in_schema == set(), "values.yaml keys missing from values.schema.json"
    assert in_schema - in_values == set(), "values.schema.json keys missing from values.yaml"


def _undocumented_values(text: str) -> list[str]:
    """Return the leaf keys of values.yaml without a ``# --`` comment on them or an ancestor."""
    lines = text.splitlines()
    undocumented = []
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented) of the open parents
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w-]*):(.*)$", line)
        if not match:
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        comment = number - 1
        while comment >= 0 and lines[comment].strip().startswith("#"):
            if lines[comment].strip().startswith("# --"):
                break
            comment -= 1
        documented = comment >= 0 and lines[comment].strip().startswith("# --")
        documented = documented or any(parent_documented for _, _, parent_documented in stack)
        following = next(
            (x for x in lines[number + 1 :] if x.strip() and not x.strip().startswith("#")), ""
        )
        is_parent = not rest and len(following) - len(following.lstrip()) > indent
        if not is_parent and not documented:
            undocumented.append(".".join([*(k for _, k, _ in stack), key]))
        stack.append((indent, key, documented))
    return undocumented


def test_every_value_is_documented_in_place() -> None:
    assert _undocumented_values((CHART / "values.yaml").read_text()) == []


def test_the_documentation_check_finds_an_undocumented_value() -> None:
    text = "image:\n  # -- the repository\n  repository: x\n  tag: ''\n"
    assert _undocumented_values(text) == ["image.tag"]


def test_the_chart_version_follows_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["appVersion"] == project["version"]


def test_the_chart_targets_the_kubernetes_versions_with_gated_pods() -> None:
    # scheduling gates and mutable scheduling directives of gated pods: GA in 1.30
    assert load_yaml(CHART / "Chart.yaml")["kubeVersion"] == ">=1.30.0-0"
