"""``tpfabric topology levels --kueue-topology FILE`` prints the chart's topology.levels for a
Kueue Topology, as text, the bare string or a values file; a bad file is an error, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_runner import tpfabric

pytestmark = pytest.mark.unit

TOPOLOGY = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: default}
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gce-topology-subblock
  - nodeLabel: kubernetes.io/hostname
"""
LEVELS = "spine=cloud.google.com/gce-topology-block,leaf=cloud.google.com/gce-topology-subblock"


@pytest.fixture
def topology_file(tmp_path: Path) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(TOPOLOGY)
    return path


def test_the_levels_print_for_people_for_set_and_as_values(topology_file: Path) -> None:
    text = tpfabric("topology", "levels", "--kueue-topology", topology_file)
    assert text.exit_code == 0, text.output
    assert f"--set topology.levels={LEVELS}" in text.stdout
    assert "kubernetes.io/hostname is left out" in text.stdout
    bare = tpfabric("topology", "levels", "--kueue-topology", topology_file, "-o", "levels")
    assert bare.stdout.strip() == LEVELS
    values = tpfabric("topology", "levels", "--kueue-topology", topology_file, "-o", "values")
    assert yaml.safe_load(values.stdout) == {"topology": {"levels": LEVELS}}


def test_a_file_that_is_not_a_kueue_topology_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "cm.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    result = tpfabric("topology", "levels", "--kueue-topology", bad)
    assert result.exit_code == 2
    assert "is not a Kueue Topology" in result.stderr
    neither = tpfabric("topology", "levels")
    assert neither.exit_code == 2
    assert "--kueue-topology FILE or --kueue-topology-name" in neither.stderr
