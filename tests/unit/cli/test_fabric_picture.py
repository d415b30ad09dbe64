"""The demo's placement pictures: jobs coloured and named, busy nodes and default pods marked."""

from __future__ import annotations

from pathlib import Path

from tpfabric_cli.fabric_picture import JobMarks, Panel, _legend, _marks, draw_fabric
from tpfabric_cli.topology import Discovery, domain_tree
from tpfabric_core import labels


def tree_of(nodes: dict[str, str]) -> Discovery:
    return Discovery(
        "test",
        {n: {labels.LEAF: leaf, labels.SPINE: "s", labels.BLOCK: "b"} for n, leaf in nodes.items()},
    )


PANELS = [
    Panel("default", (JobMarks("llama", ("n1", "n3"), default_scheduler=True),), frozenset({"n2"})),
    Panel("tpfabric", (JobMarks("llama", ("n1", "n2")), JobMarks("other", ("n4",)))),
]


def test_a_job_keeps_its_colour_in_every_panel_and_default_pods_are_hatched() -> None:
    colours = {"llama": "#1", "other": "#2"}
    default, ours = (_marks(panel, colours) for panel in PANELS)
    assert default.colour == {"n1": "#1", "n3": "#1"}
    assert default.hatched == frozenset({"n1", "n3"})
    assert default.busy == frozenset({"n2"})
    assert ours.colour == {"n1": "#1", "n2": "#1", "n4": "#2"}
    assert ours.hatched == frozenset()


def test_the_legend_names_the_jobs_then_only_the_marks_in_use() -> None:
    tree = domain_tree(tree_of({"n1": "L1", "n2": "L1", "n3": "L2", "n4": "L2"}))
    names = [h.get_label() for h in _legend(tree, PANELS, {"llama": "#111111", "other": "#222222"})]
    assert names[:2] == ["llama", "other"]
    assert "placed by default kube-scheduler" in names
    assert "busy (other tenants)" in names
    assert "degraded node / rail switch" not in names  # no node is
    plain = [h.get_label() for h in _legend(tree, [Panel("")], {})]
    assert "placed by default kube-scheduler" not in plain
    assert "busy (other tenants)" not in plain


def test_panels_are_drawn_as_png_and_svg(tmp_path: Path) -> None:
    tree = domain_tree(tree_of({"n1": "L1", "n2": "L1", "n3": "L2", "n4": "L2"}))
    png, svg = tmp_path / "p.png", tmp_path / "p.svg"
    draw_fabric(tree, png, "png", PANELS, title="two panels")
    draw_fabric(tree, svg, "svg", PANELS, title="two panels")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text()[:1000]
