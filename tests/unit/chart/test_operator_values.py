"""The operator's chart values against the operator's own flags (no helm, no cluster)."""

from __future__ import annotations

import json

from chart_files import CHART, load_yaml

from tpfabric_operator.__main__ import parse_args
from tpfabric_operator.settings import KNOBS, queue_requirement


def test_the_operator_runs_two_replicas_with_leader_election_by_default() -> None:
    # two replicas, one acting: a single replica is a single point of failure
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


def test_the_charts_mirror_of_kueues_configuration_defaults_to_kueues_own_defaults() -> None:
    """Off, and Kueue's default selector (every namespace but kube-system and kueue-system), in
    the chart as in the operator's knobs; the chart's value reads as a selector the operator
    takes."""
    values = load_yaml(CHART / "values.yaml")["kueue"]
    knobs = {k.env: k for k in KNOBS}
    assert values["manageJobsWithoutQueueName"] is False
    assert knobs["TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME"].default == "false"
    chart_selector = values["managedJobsNamespaceSelector"]
    default = json.loads(knobs["TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR"].default)
    assert chart_selector["matchExpressions"] == default["matchExpressions"]
    assert not chart_selector["matchLabels"]
    requirement = queue_requirement(
        {
            "TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
            "TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR": json.dumps(chart_selector),
        }
    )
    name = "kubernetes.io/metadata.name"
    assert requirement.applies({name: "team-a"})
    assert not requirement.applies({name: "kube-system"})
    assert not requirement.applies({name: "kueue-system"})
