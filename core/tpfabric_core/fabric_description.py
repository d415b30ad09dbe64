"""The fabric description file: blocks -> spine groups -> leaves -> nodes, rails per node.

This small YAML format is the single source the local cluster launcher, the demo, the tests and
the benchmarks create fake GPU nodes from (the fabric generator writes it too). Example::

    name: small
    rails: 8                 # HCAs per node, HCA i is on rail i
    railOptimized: true      # rail i of every node of a leaf group plugs into that group's rail-i
                             # switch (DGX SuperPOD); false: all HCAs of a node on one leaf switch
    rdmaResource: rdma/ib    # extended resource the RDMA device plugin advertises
    node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
    blocks:
    - name: su1
      spines:
      - name: su1-spine
        leaves:
        - name: su1-leaf1
          nodes: [gpu-su1-[001-008]]   # Slurm hostlist expressions or plain names

Parsing is pure (text in, model out); errors are :class:`~tpfabric_core.errors.InputError` naming
the file and line (YAML) or the field path (schema).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.hostlist import HostlistError, expand_hostlist
from tpfabric_core.input_limits import check_yaml_text

__all__ = [
    "FabricDescription",
    "FabricNode",
    "NodeResources",
    "node_name_problem",
    "parse_fabric_description",
    "pydantic_error_path",
    "uniform_fabric",
]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")

Name = Annotated[str, Field(min_length=1, max_length=253)]

NODE_NAME_RULE = (
    "RFC 1123 subdomain: lower-case letters, digits, '-' and '.', alphanumeric at both ends, "
    "at most 253 characters"
)
"""Why a name is not a Kubernetes node name, in the words of the rule."""


def node_name_problem(name: str) -> str:
    """Return why ``name`` cannot be a Kubernetes node name ('' when it can be one)."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return f"{name!r} is not a valid Kubernetes node name ({NODE_NAME_RULE})"
    return ""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class NodeResources(_Model):
    """Capacity every fake node reports (kubelet-style quantities)."""

    gpus: int = Field(8, ge=0, le=64, description="nvidia.com/gpu per node")
    rdma: int = Field(8, ge=0, le=64, description="RDMA devices (HCAs) advertised per node")
    cpu: str = "128"
    memory: str = "1Ti"
    pods: int = Field(110, ge=1, le=10_000)

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity such as '128', '500m', '2Ti'")
        return value


class Leaf(_Model):
    """A leaf domain: one leaf switch, or one switch per rail when rail-optimized."""

    name: Name
    nodes: list[str] = Field(min_length=1)

    @field_validator("nodes")
    @classmethod
    def _expand(cls, value: list[str]) -> list[str]:
        names: list[str] = []
        for expr in value:
            try:
                names.extend(expand_hostlist(expr))
            except HostlistError as err:
                raise ValueError(str(err)) from err
        for name in names:
            if problem := node_name_problem(name):
                raise ValueError(f"node name {problem}")
        return names


class SpineGroup(_Model):
    """Leaves joined by the same spine switches (one switch hop above the leaves)."""

    name: Name
    leaves: list[Leaf] = Field(min_length=1)


class Block(_Model):
    """The top tier: spine groups joined by core switches (a block / scalable-unit group)."""

    name: Name
    spines: list[SpineGroup] = Field(min_length=1)


class FabricNode(_Model):
    """One GPU node with its place in the fabric."""

    name: str
    block: str
    spine: str
    leaf: str
    rail_switches: tuple[str, ...]


class FabricDescription(_Model):
    """A whole fabric as described in a file; see the module docstring for the format."""

    name: Name
    rails: int = Field(8, ge=1, le=32, description="HCAs per node, HCA i on rail i")
    rail_optimized: bool = True
    rdma_resource: str = "rdma/ib"
    node: NodeResources = NodeResources()
    blocks: list[Block] = Field(min_length=1)

    @field_validator("rdma_resource")
    @classmethod
    def _resource_name(cls, value: str) -> str:
        if "/" not in value or not _QUALIFIED_NAME.match(value) or len(value) > 253:
            raise ValueError(
                f"{value!r} is not an extended resource name; use a domain-prefixed name such as "
                "'rdma/ib' or 'nvidia.com/hostdev'"
            )
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> FabricDescription:
        seen: dict[str, str] = {}

        def claim(name: str, where: str) -> None:
            if name in seen:
                raise ValueError(f"{where}: name {name!r} is used twice (also at {seen[name]})")
            seen[name] = where

        nodes: dict[str, str] = {}
        for b, block in enumerate(self.blocks):
            claim(block.name, f"blocks[{b}]")
            for s, spine in enumerate(block.spines):
                claim(spine.name, f"blocks[{b}].spines[{s}]")
                for lf, leaf in enumerate(spine.leaves):
                    where = f"blocks[{b}].spines[{s}].leaves[{lf}]"
                    claim(leaf.name, where)
                    for node in leaf.nodes:
                        if node in nodes:
                            raise ValueError(
                                f"{where}.nodes: node {node!r} is listed twice "
                                f"(also in {nodes[node]})"
                            )
                        nodes[node] = where
        return self

    def rail_switch(self, leaf: str, rail: int) -> str:
        """Return the name of the switch that rail ``rail`` of the nodes of ``leaf`` plug into."""
        return f"{leaf}-rail{rail}" if self.rail_optimized else leaf

    @cached_property
    def nodes(self) -> tuple[FabricNode, ...]:
        """Return every node, in file order."""
        return tuple(
            FabricNode(
                name=name,
                block=block.name,
                spine=spine.name,
                leaf=leaf.name,
                rail_switches=tuple(self.rail_switch(leaf.name, r) for r in range(self.rails)),
            )
            for block in self.blocks
            for spine in block.spines
            for leaf in spine.leaves
            for name in leaf.nodes
        )

    def node_labels(self, node: FabricNode) -> dict[str, str]:
        """Return the canonical ``topology.tpfabric.io/`` labels of ``node``."""
        result = {
            labels.BLOCK: labels.encode_label_value(node.block),
            labels.SPINE: labels.encode_label_value(node.spine),
            labels.LEAF: labels.encode_label_value(node.leaf),
            labels.HEALTH: "ok",
        }
        for rail, switch in enumerate(node.rail_switches):
            result[labels.rail_key(rail)] = labels.encode_label_value(switch)
        return result


def pydantic_error_path(loc: tuple[int | str, ...]) -> str:
    """Return a pydantic error location as a field path such as ``blocks[0].spines[1].name``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + part
    return path or "(top level)"


def parse_fabric_description(text: str, source: str = "<fabric>") -> FabricDescription:
    """Return the fabric described by YAML ``text``; InputError names ``source`` and where."""
    try:
        check_yaml_text(text, source)
        data: Any = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise InputError(where, f"not valid YAML: {err.problem}") from err
    except yaml.YAMLError as err:
        raise InputError(source, f"not valid YAML: {err}") from err
    except InputError:
        raise
    except ValueError as err:  # a value the loader cannot make: a 5,000-digit number
        raise InputError(source, f"not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise InputError(
            source,
            f"expected a mapping with 'name' and 'blocks', got {type(data).__name__}",
            "see examples/fabrics/small.yaml",
        )
    try:
        return FabricDescription.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise InputError(f"{source}: {pydantic_error_path(first['loc'])}", message + more) from err


def uniform_fabric(
    nodes: int,
    *,
    nodes_per_leaf: int = 8,
    leaves_per_spine: int = 4,
    spines_per_block: int = 4,
    rails: int = 8,
    name: str = "uniform",
) -> FabricDescription:
    """Return a regular fabric of ``nodes`` nodes (the last leaf may be partly filled).

    Names are ``dgx-0001``…, leaves ``leaf-001``…, spine groups ``su-01``…, blocks ``block-1``….
    """
    if nodes < 1 or nodes_per_leaf < 1 or leaves_per_spine < 1 or spines_per_block < 1:
        raise ValueError("nodes and all group sizes must be >= 1")
    width = max(4, len(str(nodes)))
    node_names = [f"dgx-{i:0{width}d}" for i in range(1, nodes + 1)]
    leaves = [
        {"name": f"leaf-{n // nodes_per_leaf + 1:03d}", "nodes": node_names[n : n + nodes_per_leaf]}
        for n in range(0, nodes, nodes_per_leaf)
    ]
    spines = [
        {"name": f"su-{n // leaves_per_spine + 1:02d}", "leaves": leaves[n : n + leaves_per_spine]}
        for n in range(0, len(leaves), leaves_per_spine)
    ]
    blocks = [
        {"name": f"block-{n // spines_per_block + 1}", "spines": spines[n : n + spines_per_block]}
        for n in range(0, len(spines), spines_per_block)
    ]
    return FabricDescription.model_validate({"name": name, "rails": rails, "blocks": blocks})
