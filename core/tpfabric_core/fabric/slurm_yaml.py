"""Slurm's ``topology.yaml`` (Slurm 25.05+): pick one topology and read its switches or blocks.

The format (``man 5 topology.yaml``, SchedMD/slurm ``doc/man/man5/topology.yaml.5``) is a list of
topologies; each names itself (``topology:``), may be the ``cluster_default``, and is exactly one
of ``tree: {switches: [{switch, children, nodes}]}``, ``block: {block_sizes: [...], blocks:
[{block, nodes}]}`` or ``flat: true``. ``children`` and ``nodes`` are Slurm hostlist expressions.
When the file exists Slurm ignores ``topology.conf``.

This module reads the structure only, keeping the line of every switch and block, and returns
plain entries; :mod:`tpfabric_core.fabric.slurm` expands the host lists and checks the tree exactly
as it does for ``topology.conf``. Which topology: the one named by the caller, else the first with
``cluster_default: true`` (the one Slurm uses for cluster-wide operations), else the only one.
Text in, data out: never reads a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from tpfabric_core.errors import InputError
from tpfabric_core.input_limits import check_yaml_text

__all__ = ["YamlEntry", "YamlTopology", "looks_like_topology_yaml", "read_topology_yaml"]

_LINE = "__line__"  # never a Slurm key: carries the line of the mapping it sits in
_KINDS = ("tree", "block", "flat")
_UNSUPPORTED = ("ring", "torus3d")  # newer Slurm plugins that are not a switch hierarchy
_FIRST_CONTENT = re.compile(r"^\s*([^#\s][^#]*)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class YamlEntry:
    """One ``switch`` or ``block`` of the chosen topology: name, host lists as written, line."""

    name: str
    children: str
    nodes: str
    line: int


@dataclass(frozen=True, slots=True)
class YamlTopology:
    """The chosen tree or block topology of a ``topology.yaml``."""

    name: str
    kind: Literal["tree", "block"]
    entries: tuple[YamlEntry, ...]
    block_sizes: tuple[int, ...] = ()
    line: int = 0


class _LineLoader(yaml.SafeLoader):
    """A safe loader that records each mapping's first line under :data:`_LINE`."""


def _mapping_with_line(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping[_LINE] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def looks_like_topology_yaml(text: str) -> bool:
    """Return whether ``text`` is YAML rather than ``topology.conf``: its first line that is not
    a comment starts a list item or a document, or is ``key:`` without any ``=``."""
    match = _FIRST_CONTENT.search(text)
    if match is None:
        return False
    first = match.group(1).strip()
    return first.startswith(("-", "---")) or ("=" not in first and ":" in first)


def _kind_of(entry: dict[Any, Any], where: str) -> str:
    kinds = [kind for kind in (*_KINDS, *_UNSUPPORTED) if kind in entry]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        raise InputError(
            where, f"a topology needs exactly one of tree, block or flat (found: {found})"
        )
    return kinds[0]


def _hostlist(value: Any, where: str, key: str) -> str:
    """Return a hostlist expression from a string or a list of strings."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(v.strip() for v in value)
    raise InputError(
        where, f"{key} must be a host list such as node[01-04], found {type(value).__name__}"
    )


def _entries(items: Any, name_key: str, child_key: str, where: str) -> tuple[YamlEntry, ...]:
    """Return the switches or blocks of a ``switches:``/``blocks:`` list."""
    if not isinstance(items, list) or not items:
        raise InputError(where, f"expected a non-empty list of {name_key}s")
    known = {name_key, "nodes", _LINE} | ({child_key} if child_key else set())
    entries: list[YamlEntry] = []
    for item in items:
        if not isinstance(item, dict):
            raise InputError(where, f"each {name_key} is a mapping such as {{{name_key}: s1}}")
        at = f"{where.rsplit(':', 1)[0]}:{item[_LINE]}"
        unknown = sorted(str(k) for k in set(item) - known)
        if unknown:
            keys = ", ".join(sorted(k for k in known if k != _LINE))
            raise InputError(at, f"unknown key(s) {', '.join(unknown)}", f"use {keys}")
        name = item.get(name_key)
        if not isinstance(name, str | int) or not str(name).strip():
            raise InputError(at, f"{name_key} needs a name")
        children = _hostlist(item.get(child_key), at, child_key) if child_key else ""
        nodes = _hostlist(item.get("nodes"), at, "nodes")
        entries.append(YamlEntry(str(name), children, nodes, item[_LINE]))
    return tuple(entries)


def _block_sizes(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else value
    if isinstance(parts, list):
        try:
            sizes = tuple(int(p) for p in parts)
        except (TypeError, ValueError):
            sizes = ()
        if sizes and all(s > 0 for s in sizes):
            return sizes
    raise InputError(where, f"block_sizes must be positive integers such as [4, 16], got {value!r}")


def _choose(topologies: list[dict[Any, Any]], wanted: str | None, source: str) -> dict[Any, Any]:
    names = [str(t.get("topology")) for t in topologies]
    if wanted is not None:
        for topology in topologies:
            if str(topology.get("topology")) == wanted:
                return topology
        raise InputError(source, f"has no topology {wanted!r} (it has {', '.join(names)})")
    for topology in topologies:
        if topology.get("cluster_default") is True:
            return topology
    if len(topologies) == 1:
        return topologies[0]
    raise InputError(
        source,
        f"has {len(topologies)} topologies ({', '.join(names)}) and none is cluster_default",
        "mark the one to import with 'cluster_default: true'",
    )


def read_topology_yaml(text: str, source: str, topology: str | None = None) -> YamlTopology:
    """Return the chosen tree or block topology of a ``topology.yaml`` (see the module docstring).

    InputError names ``source:line``: not YAML, not a list of topologies, a topology with none or
    several of tree/block/flat, unknown keys, a flat, ring or torus3d topology (no switch
    hierarchy to build a fabric of).
    """
    try:
        check_yaml_text(text, source)
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise InputError(where, f"not valid YAML: {error.problem}") from error
    except yaml.YAMLError as error:
        raise InputError(source, f"not valid YAML: {error}") from error
    except InputError:
        raise
    except ValueError as error:  # a value the loader cannot make: a 5,000-digit number
        raise InputError(source, f"not valid YAML: {error}") from error
    expected = "a list of topologies (- topology: NAME with tree:, block: or flat:)"
    if not isinstance(data, list) or not data:
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        raise InputError(source, f"expected {expected} as in Slurm's topology.yaml, found {found}")
    for item in data:
        if not isinstance(item, dict) or "topology" not in item:
            raise InputError(source, f"expected {expected}; an item has no 'topology' name")
    chosen = _choose(data, topology, source)
    name, line = str(chosen["topology"]), chosen[_LINE]
    where = f"{source}:{line}"
    kind = _kind_of(chosen, where)
    if kind in _UNSUPPORTED or kind == "flat":
        raise InputError(
            where,
            f"topology {name!r} is {kind}: it has no switches or blocks to build a fabric of",
            "import a tree or block topology (pass its name, or mark it cluster_default)",
        )
    body = chosen[kind]
    if not isinstance(body, dict):
        raise InputError(where, f"{kind}: must be a mapping")
    at = f"{source}:{body[_LINE]}"
    if kind == "tree":
        unknown = sorted(str(k) for k in set(body) - {"switches", _LINE})
        if unknown:
            raise InputError(at, f"unknown key(s) {', '.join(unknown)} in tree", "use switches")
        switches = _entries(body.get("switches"), "switch", "children", at)
        return YamlTopology(name, "tree", switches, line=line)
    unknown = sorted(str(k) for k in set(body) - {"blocks", "block_sizes", _LINE})
    if unknown:
        raise InputError(
            at, f"unknown key(s) {', '.join(unknown)} in block", "use blocks, block_sizes"
        )
    return YamlTopology(
        name, "block", _entries(body.get("blocks"), "block", "", at),
        _block_sizes(body.get("block_sizes"), at), line,
    )  # fmt: skip
