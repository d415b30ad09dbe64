"""How ``tpfabric topology`` prints: the rich tree of ``show``, the tables of ``discover``.

Output is never cropped: a cut switch id is worse than a long line.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.tree import Tree

from tpfabric_cli.topology.domains import DomainTree, LeafDomainView, domain_tree, ignored_groups
from tpfabric_cli.topology.sources import Discovery
from tpfabric_core.hostlist import compress_hostlist

__all__ = ["err", "out", "print_table", "print_uncropped", "render_tree", "summary_line"]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

_MEASURE_WIDTH = 10_000


def _leaf_branch(parent: Tree, leaf: LeafDomainView, show_rails: bool) -> None:
    bad = f" · [red]{len(leaf.degraded_nodes)} degraded[/]" if leaf.degraded_nodes else ""
    branch = parent.add(f"[bold]leaf domain[/] {escape(leaf.name)} · {len(leaf.nodes)} nodes{bad}")
    branch.add(f"[cyan]{escape(compress_hostlist(list(leaf.nodes)))}[/]")
    if leaf.degraded_nodes:
        down = f" (down: {compress_hostlist(list(leaf.down_nodes))})" if leaf.down_nodes else ""
        hosts = compress_hostlist(list(leaf.degraded_nodes))
        health = branch.add(f"[red]degraded: {escape(hosts)}{escape(down)}[/]")
        for nodes, what in leaf.health_notes:
            health.add(f"[red]{escape(nodes)}: {escape(what)}[/]")
    if not show_rails:
        return
    odd: dict[int, list[str]] = defaultdict(list)
    for node, rail, switch in leaf.odd_rails:
        mark = " [red]✗[/]" if switch in leaf.degraded_switches else ""
        odd[rail].append(f"{escape(node)} → {escape(switch)}{mark}")
    for rail, switch in leaf.rails:
        mark = " [red]✗ degraded[/]" if switch in leaf.degraded_switches else ""
        extra = f" [yellow](but {'; '.join(odd[rail])})[/]" if odd.get(rail) else ""
        branch.add(f"rail {rail} → {escape(switch)}{mark}{extra}")


def render_tree(tree: DomainTree, show_rails: bool = True) -> Tree:
    """Return the rich Tree of ``tree``: blocks, spine domains, leaf domains, rails, nodes."""
    root = Tree(f"[bold]{escape(tree.title)}[/]")
    for block in tree.blocks:
        parent = root
        if not tree.flat_blocks:
            parent = root.add(f"[bold]block[/] {escape(block.name)} · {block.node_count} nodes")
        for spine in block.spines:
            count = f" · {spine.switches} spine switches" if spine.switches else ""
            branch = parent.add(
                f"[bold]spine[/] {escape(spine.name)}{count} · {spine.node_count} nodes"
            )
            for leaf in spine.leaves:
                _leaf_branch(branch, leaf, show_rails)
    if tree.anomalies:
        branch = root.add(f"[yellow]cabling anomalies ({len(tree.anomalies)})[/]")
        for detail in tree.anomalies:
            branch.add(f"[yellow]{escape(detail)}[/]")
    for note in tree.notes:
        root.add(f"[dim]{escape(note)}[/]")
    return root


def print_uncropped(renderable: Tree | Table) -> None:
    """Print a tree or table to stdout at least as wide as its widest line: rich crops at the
    console width (80 when piped), and a cropped switch id is worse than a long line."""
    measure = Console(width=_MEASURE_WIDTH)
    needed = Measurement.get(measure, measure.options, renderable).maximum
    Console(highlight=False, soft_wrap=True, width=max(out.width, needed)).print(renderable)


def summary_line(discovery: Discovery) -> str:
    parts = [f"{len(discovery.labels)} nodes", f"{len(discovery.anomalies)} cabling anomalies"]
    if discovery.fabric is not None:
        parts.append(f"{len(discovery.unassigned_hcas)} unassigned HCAs")
        parts.append(f"{len(discovery.degraded_links)} degraded links")
    if discovery.ignored_hosts:
        hosts = ", ".join(f"{g.hosts} ({g.reason})" for g in ignored_groups(discovery))
        parts.append(f"ignored hosts: {hosts}")
    return f"{discovery.source}: " + "; ".join(parts)


def print_table(discovery: Discovery) -> None:
    tree = domain_tree(discovery)
    table = Table("leaf domain", "nodes", "#", "spine", "block", "health", title=tree.title)
    for block in tree.blocks:
        for spine in block.spines:
            for leaf in spine.leaves:
                health = (f"[red]{len(leaf.degraded_nodes)} degraded[/]" if leaf.degraded_nodes
                          else "ok")  # fmt: skip
                table.add_row(
                    escape(leaf.name), escape(compress_hostlist(list(leaf.nodes))),
                    str(len(leaf.nodes)), escape(spine.name), escape(block.name), health,
                )  # fmt: skip
    print_uncropped(table)
    if discovery.anomalies:
        anomalies = Table("kind", "node", "rail", "switch", "detail", title="cabling anomalies")
        for a in discovery.anomalies:
            anomalies.add_row(
                a.kind, a.node or "", "" if a.rail is None else str(a.rail), a.switch or "",
                escape(a.detail),
            )  # fmt: skip
        print_uncropped(anomalies)
    if discovery.unassigned_hcas:
        by_switch = Counter(h.switch or "(not cabled)" for h in discovery.unassigned_hcas)
        unassigned = Table("switch", "HCAs", title="unassigned HCAs (map them with --node-map)")
        for switch, count in sorted(by_switch.items()):
            unassigned.add_row(switch, str(count))
        print_uncropped(unassigned)
    if discovery.ignored_hosts:
        ignored = Table("hosts", "reason", "HCAs", title="hosts kept out of the node set")
        for group in ignored_groups(discovery):
            ignored.add_row(escape(group.hosts), group.reason, str(group.hcas))
        print_uncropped(ignored)
