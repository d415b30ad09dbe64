"""A picture of a fabric: blocks, spine domains, leaf domains with their rail switches, and nodes.

``tpfabric topology show --png/--svg`` draws the :class:`~tpfabric_cli.topology.domains.DomainTree`
it printed: one column per leaf domain, its spine domain and block spanning their columns above,
the leaf switch of each rail as a small box (red when degraded, amber when a node of the domain is
cabled elsewhere on that rail) and one square per node below (red: degraded, dark red: down). Large
fabrics keep one column per leaf domain up to 48 of them; beyond that each spine domain becomes one
column (its leaf domains summed up), and a column of more than 64 nodes shows a count instead of
squares.

Placements (the demo) are drawn as :class:`Panel` s of the same fabric, one above the other: each
job's nodes in the job's colour (the same colour in every panel, named in the legend), other
tenants' busy nodes shaded grey, the pods of the default scheduler hatched.

Matplotlib's object API with the Agg canvas only (no pyplot, so no global figure state and no
display needed). This module draws; it must never compute topology or read the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, sqrt
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from tpfabric_cli.topology.domains import BlockView, DomainTree, LeafDomainView, SpineView
from tpfabric_core.hostlist import compress_hostlist

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["JobMarks", "Panel", "draw_fabric", "wrap_hostlist"]

_BLOCK = "#c9d6ea"
_SPINE = "#d9e8f5"
_LEAF = "#e3f1e0"
_RAIL = "#ffffff"
_NODE = "#7fb77e"
_DEGRADED = "#d9534f"
_DOWN = "#7a1f1d"
_BUSY = "#c8c8c8"
#: Job colours: none of them green (free), grey (busy) or red (degraded).
_JOB_COLOURS = ("#1f77b4", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22")
_ODD = "#f0ad4e"
_EDGE = "#5b6770"
_MAX_NODE_SQUARES = 64  # per leaf domain; more nodes are shown as a count
_MAX_COLUMNS = 48  # more leaf domains are drawn as one column per spine domain
_GAP = 0.12  # between columns, in column widths
_ROW = {"block": 4.2, "spine": 3.1, "leaf": 1.9, "nodes": 0.0}


def _short(name: str, limit: int) -> str:
    """Return ``name`` cut in the middle to at most ``limit`` characters."""
    if len(name) <= limit:
        return name
    keep = max(1, limit - 1)
    return name[: keep - keep // 2] + "…" + name[len(name) - keep // 2 :]


def wrap_hostlist(hosts: str, width: int) -> str:
    """Return a hostlist expression in lines of at most ``width`` characters where it can be,
    broken only after a comma: between node ranges, never inside a name or a range."""
    lines: list[str] = []
    line = ""
    for piece in re.split(r"(?<=,)", hosts):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line += piece
    lines.append(line)
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class JobMarks:
    """One job's nodes to colour; ``default_scheduler``: its pods were placed by kube-scheduler
    alone (drawn hatched)."""

    name: str
    nodes: tuple[str, ...]
    default_scheduler: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One drawing of the fabric: its caption, the jobs placed on it and the busy nodes."""

    title: str
    jobs: tuple[JobMarks, ...] = ()
    busy: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Marks:
    """Per node: fill colour of its job, whether hatched; plus the busy nodes."""

    colour: dict[str, str]
    hatched: frozenset[str]
    busy: frozenset[str]


_NO_MARKS = _Marks({}, frozenset(), frozenset())


Box = tuple[float, float, float, float]  # x, y, width, height


def _box(
    ax: Axes, box: Box, color: str, *, edge: str = _EDGE, lw: float = 0.8, hatch: str | None = None
) -> None:
    x, y, w, h = box
    ax.add_patch(
        Rectangle((x, y), w, h, facecolor=color, edgecolor=edge, linewidth=lw, hatch=hatch)
    )


def _line(ax: Axes, x0: float, y0: float, x1: float, y1: float) -> None:
    ax.plot([x0, x1], [y0, y1], color=_EDGE, linewidth=0.6, zorder=0)


def _node_colour(node: str, leaf: LeafDomainView, marks: _Marks) -> str:
    if node in marks.colour:
        return marks.colour[node]
    if node in leaf.down_nodes:
        return _DOWN
    if node in leaf.degraded_nodes:
        return _DEGRADED
    return _BUSY if node in marks.busy else _NODE


def _draw_leaf(
    ax: Axes, leaf: LeafDomainView, x: float, width: float, font: float, *, marks: _Marks
) -> None:
    """Draw one leaf domain column: its rail switches at the leaf row, its nodes below."""
    y = _ROW["leaf"]
    _box(ax, (x, y, width, 0.75), _LEAF)
    ax.text(x + width / 2, y + 0.6, _short(leaf.name, int(width * 14) + 6), ha="center",
            va="center", fontsize=font)  # fmt: skip
    odd_rails = {rail for _, rail, _ in leaf.odd_rails}
    size = width / max(1, len(leaf.rails))
    for i, (rail, switch) in enumerate(leaf.rails):
        color = _DEGRADED if switch in leaf.degraded_switches else _RAIL
        edge = _ODD if rail in odd_rails else _EDGE
        _box(ax, (x + i * size + size * 0.1, y + 0.1, size * 0.8, 0.32), color, edge=edge,
             lw=1.6 if rail in odd_rails else 0.6)  # fmt: skip
        ax.text(x + (i + 0.5) * size, y + 0.26, f"R{rail}", ha="center", va="center",
                fontsize=font * 0.8)  # fmt: skip
    _line(ax, x + width / 2, y, x + width / 2, _ROW["nodes"] + 1.3)

    degraded = set(leaf.degraded_nodes)
    odd_nodes = {node for node, _, _ in leaf.odd_rails}
    top = _ROW["nodes"] + 1.3
    if len(leaf.nodes) <= _MAX_NODE_SQUARES:
        cols = max(1, ceil(sqrt(len(leaf.nodes) * width / 0.9)))
        cell = min(width / cols, 0.9 / ceil(len(leaf.nodes) / cols))
        for i, node in enumerate(leaf.nodes):
            row, col = divmod(i, cols)
            edge = _ODD if node in odd_nodes else "white"
            if node in marks.colour and node in degraded:
                edge = _DEGRADED
            _box(ax, (x + col * cell, top - (row + 1) * cell, cell, cell),
                 _node_colour(node, leaf, marks), edge=edge,
                 lw=1.4 if node in odd_nodes or edge == _DEGRADED else 0.5,
                 hatch="xxx" if node in marks.hatched else None)  # fmt: skip
    else:
        share = len(degraded) / len(leaf.nodes)
        _box(ax, (x, top - 0.9, width, 0.9), _NODE)
        if share:
            _box(ax, (x, top - 0.9, width * share, 0.9), _DEGRADED)
        ax.text(x + width / 2, top - 0.45, f"{len(leaf.nodes)}", ha="center", va="center",
                fontsize=font)  # fmt: skip
    wrap = max(8, int(width * 20))
    hosts = compress_hostlist(list(leaf.nodes))
    if len(hosts) > 3 * wrap:
        hosts = f"{min(leaf.nodes)} … {max(leaf.nodes)}"
    label = wrap_hostlist(hosts, wrap)
    ax.text(x + width / 2, top - 1.0, label, ha="center", va="top", fontsize=font * 0.85,
            linespacing=1.0)  # fmt: skip


def _per_spine(tree: DomainTree) -> DomainTree:
    """Return ``tree`` with the leaf domains of each spine domain merged into one column."""
    blocks = []
    for block in tree.blocks:
        spines = []
        for spine in block.spines:
            merged = LeafDomainView(
                name=f"{len(spine.leaves)} leaf domains",
                nodes=tuple(n for leaf in spine.leaves for n in leaf.nodes),
                rails=(),
                degraded_nodes=tuple(n for leaf in spine.leaves for n in leaf.degraded_nodes),
                down_nodes=tuple(n for leaf in spine.leaves for n in leaf.down_nodes),
            )
            spines.append(SpineView(spine.name, (merged,), spine.switches))
        blocks.append(BlockView(block.name, tuple(spines)))
    note = f"{len(tree.leaf_domains)} leaf domains, drawn per spine domain"
    return DomainTree(f"{tree.title}\n{note}", tuple(blocks), tree.anomalies, tree.notes)


def _draw_tree(ax: Axes, tree: DomainTree, font: float, marks: _Marks) -> None:
    """Draw the columns, spine and block boxes of ``tree`` on ``ax`` and fit its limits."""
    ax.set_axis_off()
    col = 1.0
    step = col * (1 + _GAP)
    x_of: dict[int, float] = {}
    index = 0
    for block in tree.blocks:
        block_x0 = index * step
        for spine in block.spines:
            spine_x0 = index * step
            for leaf in spine.leaves:
                x_of[id(leaf)] = index * step
                _draw_leaf(ax, leaf, index * step, col, font, marks=marks)
                index += 1
            spine_w = index * step - spine_x0 - col * _GAP
            y = _ROW["spine"]
            _box(ax, (spine_x0, y, spine_w, 0.6), _SPINE)
            count = f"\n{spine.switches} switches" if spine.switches else ""
            ax.text(spine_x0 + spine_w / 2, y + 0.3,
                    f"spine {_short(spine.name, max(8, int(spine_w * 14) - 2))}{count}",
                    ha="center", va="center", fontsize=font)  # fmt: skip
            for leaf in spine.leaves:
                _line(
                    ax, x_of[id(leaf)] + col / 2, _ROW["leaf"] + 0.75, x_of[id(leaf)] + col / 2, y
                )
            if not tree.flat_blocks:
                _line(ax, spine_x0 + spine_w / 2, y + 0.6, spine_x0 + spine_w / 2, _ROW["block"])
        if not tree.flat_blocks:
            block_w = index * step - block_x0 - col * _GAP
            _box(ax, (block_x0, _ROW["block"], block_w, 0.6), _BLOCK)
            ax.text(block_x0 + block_w / 2, _ROW["block"] + 0.3,
                    f"block {_short(block.name, max(8, int(block_w * 14) - 2))}\n"
                    f"{block.node_count} nodes",
                    ha="center", va="center", fontsize=font)  # fmt: skip
    top = _ROW["block"] + 0.7 if not tree.flat_blocks else _ROW["spine"] + 0.7
    ax.set_xlim(-0.1, max(index * step - col * _GAP, col) + 0.1)
    ax.set_ylim(-0.9, top)


def _marks(panel: Panel, colours: dict[str, str]) -> _Marks:
    """Return the node marks of ``panel``; a job's colour comes from ``colours`` (by job name)."""
    colour = {node: colours[job.name] for job in panel.jobs for node in job.nodes}
    hatched = frozenset(node for job in panel.jobs if job.default_scheduler for node in job.nodes)
    return _Marks(colour, hatched, panel.busy)


def draw_fabric(
    tree: DomainTree,
    path: Path,
    fmt: str,
    panels: Sequence[Panel] = (),
    *,
    title: str | None = None,
) -> None:
    """Draw ``tree`` into ``path`` as ``fmt`` (``png`` or ``svg``): once, or once per panel
    (one above the other) with the panel's jobs and busy nodes marked; ``title`` replaces the
    tree's."""
    if len(tree.leaf_domains) > _MAX_COLUMNS:
        tree = _per_spine(tree)
    columns = max(1, len(tree.leaf_domains))
    width_in = min(60.0, max(7.0, 1.7 * columns))
    font = max(4.0, min(8.5, 7.0 * width_in / columns / 1.7))
    rows = list(panels) or [Panel("")]
    figure = Figure(figsize=(width_in, 0.6 + 4.6 * len(rows)), layout="constrained")
    FigureCanvasAgg(figure)
    names = list(dict.fromkeys(job.name for panel in rows for job in panel.jobs))
    colours = {name: _JOB_COLOURS[i % len(_JOB_COLOURS)] for i, name in enumerate(names)}
    for i, panel in enumerate(rows):
        ax = figure.add_subplot(len(rows), 1, i + 1)
        _draw_tree(ax, tree, font, _marks(panel, colours))
        if panel.title:
            ax.set_title(panel.title, fontsize=9.5, loc="left")
    subtitle = f"{len(tree.anomalies)} cabling anomalies" if tree.anomalies else ""
    heading = title or tree.title
    figure.suptitle(heading + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    legend = _legend(tree, rows, colours)
    figure.legend(
        handles=legend,
        loc="outside lower center",
        ncols=min(5, len(legend)),
        fontsize=8,
        frameon=False,
    )
    figure.savefig(path, format=fmt, dpi=130)


def _legend(tree: DomainTree, panels: Sequence[Panel], colours: dict[str, str]) -> list[Patch]:
    """Return the legend: the jobs by name, then what the other colours and marks mean (health
    and cabling marks only where the tree has them)."""
    handles = [Patch(facecolor=c, edgecolor="white", label=name) for name, c in colours.items()]
    if any(job.default_scheduler for panel in panels for job in panel.jobs):
        handles.append(
            Patch(facecolor="white", edgecolor=_EDGE, hatch="xxx", label="placed by default "
                  "kube-scheduler")
        )  # fmt: skip
    if any(panel.busy for panel in panels):
        handles.append(Patch(facecolor=_BUSY, edgecolor="white", label="busy (other tenants)"))
    handles.append(Patch(facecolor=_NODE, edgecolor="white", label="free node" if colours
                         else "node"))  # fmt: skip
    leaves = tree.leaf_domains
    if any(leaf.degraded_nodes or leaf.degraded_switches for leaf in leaves):
        handles.append(
            Patch(facecolor=_DEGRADED, edgecolor=_EDGE, label="degraded node / rail switch")
        )
    if any(leaf.down_nodes for leaf in leaves):
        handles.append(Patch(facecolor=_DOWN, edgecolor=_EDGE, label="down node"))
    if any(leaf.odd_rails for leaf in leaves):
        handles.append(Patch(facecolor="white", edgecolor=_ODD, linewidth=1.6,
                             label="miscabled rail (node / switch)"))  # fmt: skip
    handles.append(Patch(facecolor=_RAIL, edgecolor=_EDGE, label="rail leaf switch (R<i>)"))
    return handles
