"""``tpfabric diagnose``'s reading half without a cluster: the node facts it takes from a Node,
the fabric file it loads, the files it refuses, and how it prints a diagnosis."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tpfabric_cli.diagnose import load_fabric, node_facts, print_diagnosis
from tpfabric_cli.main import app
from tpfabric_core.diagnose.diagnosis import Diagnosis, Finding

DUMPS = Path(__file__).parents[1] / "fabric" / "data"


def test_the_agents_last_write_time_comes_from_its_managed_fields() -> None:
    node = {
        "metadata": {
            "name": "dgx-07",
            "annotations": {"a": "b"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "time": "2026-08-10T10:00:00Z"},
                {"manager": "tpfabric-fabric-agent", "operation": "Update",
                 "time": "2026-08-10T10:00:05Z"},
                {"manager": "tpfabric-fabric-agent", "operation": "Update",
                 "subresource": "status", "time": "2026-08-10T10:09:00Z"},
            ],
        },
        "status": {"conditions": [{"type": "FabricHealthy", "status": "True", "reason": "x"}]},
    }  # fmt: skip
    facts = node_facts(node)
    assert facts.agent_written == 1_786_356_005.0  # the metadata write, not the status one
    assert facts.conditions["FabricHealthy"] == {"status": "True", "reason": "x", "message": ""}
    assert node_facts({"metadata": {"name": "n"}}).agent_written is None


def test_the_fabric_file_is_a_dump_or_a_description(tmp_path: Path) -> None:
    dump = load_fabric(DUMPS / "real" / "ibtopotool-doc-dumps" / "1.topo")
    assert dump.switches
    description = tmp_path / "fabric.yaml"
    description.write_text(
        "name: f\nblocks:\n- name: b\n  spines:\n  - name: s\n    leaves:\n"
        "    - {name: leaf-a, nodes: [n1, n2]}\n"
    )
    assert load_fabric(description).nodes == ("n1", "n2")


def test_an_unreadable_input_file_stops_before_the_cluster_is_read(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["diagnose", "job", "--kubeconfig", str(tmp_path / "none"), "--serve-trace",
              str(tmp_path / "missing.json")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--serve-trace" in result.output
    assert "cannot read it" in result.output


@pytest.mark.parametrize(
    ("kind", "text", "printed"),
    [
        ("not-the-network", "not the network: 4 ports ...", "not the network: 4 ports ..."),
        ("link", "rank 3 = ...", "link: rank 3 = ..."),
    ],
)
def test_a_finding_is_printed_with_its_kind_once(kind: str, text: str, printed: str) -> None:
    diagnosis = Diagnosis("TensorParallelJob ns/j", (0.0, 60.0), "the last 60 s", (), (), (),
                          (Finding(kind, text, (3,)),))  # fmt: skip
    out = io.StringIO()
    print_diagnosis(diagnosis, Console(file=out, width=200, no_color=True))
    assert printed in out.getvalue().splitlines()
