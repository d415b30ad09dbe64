"""Paths and small readers shared by the chart, image and kind-e2e checks (no processes)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "tpfabric"
KIND = REPO / "e2e" / "kind"
DOCKERFILES = {
    "tpfabric": REPO / "images" / "tpfabric" / "Dockerfile",
    "rdma-init": REPO / "rdma_init" / "Dockerfile",
    "fake-rdma-device-plugin": REPO / "e2e" / "tpfabric_deviceplugin" / "Dockerfile",
}


def load_yaml(path: Path) -> Any:
    """Return the one YAML document of ``path``."""
    return yaml.safe_load(path.read_text())


def values_schema() -> dict[str, Any]:
    """Return the chart's values.schema.json."""
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def object_schemas(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(values path, schema)`` of every object schema that lists its properties."""
    if "properties" in schema:
        yield path or "<root>", schema
        for key, child in schema["properties"].items():
            yield from object_schemas(child, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict):
        yield from object_schemas(schema["items"], f"{path}[]")


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """Return ``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    instructions = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        instruction, _, arguments = stripped.partition(" ")
        instructions.append((instruction.upper(), arguments.strip()))
    return instructions
