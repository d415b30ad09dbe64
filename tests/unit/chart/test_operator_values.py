"""The operator's chart values against the operator's own flags (no helm, no cluster)."""

from __future__ import annotations

from chart_files import CHART, load_yaml

from tpfabric_operator.__main__ import parse_args


def test_the_operator_runs_two_replicas_with_leader_election_by_default() -> None:
    # issue 31, item 18: one replica was all the chart could run (two charged incidents twice)
    values = load_yaml(CHART / "values.yaml")["operator"]
    assert (values["replicas"], values["leaderElect"]) == (2, True)
    assert parse_args([]).leader_elect is True


def test_the_lease_the_operator_takes_is_the_one_its_role_may_update() -> None:
    template = (CHART / "templates" / "operator.yaml").read_text()
    assert "- --lease-name={{ $fullname }}-operator" in template
    assert "- --lease-namespace={{ .Release.Namespace }}" in template
    assert 'resourceNames: ["{{ $fullname }}-operator"]' in template
    args = parse_args(["--lease-namespace=ns", "--lease-name=t-operator", "--no-leader-elect"])
    assert (args.lease_namespace, args.lease_name, args.leader_elect) == ("ns", "t-operator", False)
