"""The chart's confinement as written (no helm, no cluster): every admission policy is bound and
denies, RBAC holds no verb the policies would have to catch, /filter never leaves loopback.
What the policies do on a real API server: tests/integration/test_chart_confinement.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chart_files import CHART, load_yaml

TEMPLATES = CHART / "templates"
#: the policy that guards Kueue's quota holds every user to Kueue's rule, not one component
QUEUE_POLICY = TEMPLATES / "kueue-queue-name-policy.yaml"
POLICIES = sorted(p for p in TEMPLATES.glob("*-policy.yaml") if p != QUEUE_POLICY)


def test_every_component_that_writes_shared_objects_has_a_policy() -> None:
    assert {p.name for p in POLICIES} == {
        "discovery-policy.yaml",
        "fabric-agent-policy.yaml",
        "gang-webhook-policy.yaml",
        "pod-writes-policy.yaml",
        "scheduler-node-policy.yaml",
    }


def test_the_queue_name_policy_is_bound_fails_closed_and_refuses_with_403() -> None:
    text = QUEUE_POLICY.read_text()
    assert "kind: ValidatingAdmissionPolicyBinding\n" in text
    assert "failurePolicy: Fail" in text
    assert 'validationActions: ["Deny"]' in text
    assert "reason: Forbidden" in text


@pytest.mark.parametrize("template", POLICIES, ids=lambda p: p.name)
def test_each_policy_is_bound_fails_closed_and_refuses_with_403_and_a_message(
    template: Path,
) -> None:
    text = template.read_text()
    assert "kind: ValidatingAdmissionPolicy\n" in text
    assert "kind: ValidatingAdmissionPolicyBinding\n" in text
    name = re.search(r"kind: ValidatingAdmissionPolicy\nmetadata:\n  name: (\S+)", text)
    assert name is not None
    assert f"policyName: {name[1]}" in text
    assert "validationActions: [Deny]" in text
    assert "failurePolicy: Fail" in text
    validations = text.split("  validations:\n", 1)[1].split("\n---\n", 1)[0]
    rules = validations.count("    - expression:")
    assert rules >= 3
    assert validations.count("reason: Forbidden") == rules  # 403, not 422
    assert validations.count("      message") == rules  # message or messageExpression
    # it matches the component's account only: a policy never stands in anyone else's way
    assert "request.userInfo.username" in text.split("matchConditions:", 1)[1].split("\n  v", 1)[0]


def test_the_agents_annotation_limits_are_values_the_schema_bounds() -> None:
    values = load_yaml(CHART / "values.yaml")["fabricAgent"]
    assert 1024 <= values["maxDetailCharacters"] <= 64 * 1024  # the readers' own bound: 64 KiB
    assert 1024 <= values["maxTimelineCharacters"] <= 64 * 1024
    policy = (TEMPLATES / "fabric-agent-policy.yaml").read_text()
    assert "int .Values.fabricAgent.maxDetailCharacters" in policy
    assert "int .Values.fabricAgent.maxTimelineCharacters" in policy
    # the agent trims its timeline to the same cap the policy holds it to
    agent = (TEMPLATES / "fabric-agent.yaml").read_text()
    assert '"max_characters" (int $agent.maxTimelineCharacters)' in agent


def test_no_account_may_delete_a_collection_or_make_secrets() -> None:
    for template in TEMPLATES.glob("*.yaml"):
        if template.name == "user-roles.yaml":  # the users' roles (Kubernetes' edit, extended)
            continue
        text = template.read_text()
        assert "deletecollection" not in text, template.name
        for rule in re.findall(r'resources: \["secrets"\]\n(.*)\n', text):
            assert "create" not in rule, f"{template.name}: {rule}"


def test_the_extenders_functional_port_is_loopback_whatever_the_values() -> None:
    scheduler = (TEMPLATES / "scheduler.yaml").read_text()
    assert "- --host=127.0.0.1" in scheduler
    assert "listenAddress" not in scheduler
    assert "listenAddress" not in (CHART / "values.yaml").read_text()
    # no Service reaches a pod port but the metrics or the webhook port
    for template in TEMPLATES.glob("*.yaml"):
        for target in re.findall(r"targetPort: (\S+)", template.read_text()):
            assert target in ("https-metrics", "https"), f"{template.name}: {target}"


def test_metrics_are_for_those_granted_get_on_the_metrics_url() -> None:
    text = (TEMPLATES / "metrics-rbac.yaml").read_text()
    assert 'nonResourceURLs: ["/metrics"]' in text
    assert 'resources: ["tokenreviews"]' in text
    assert 'resources: ["subjectaccessreviews"]' in text
    monitors = (TEMPLATES / "servicemonitor.yaml").read_text()
    assert "scheme: https" in monitors
    assert "bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token" in monitors


def test_kube_scheduler_gets_a_copy_of_its_role_without_the_default_schedulers_lease() -> None:
    text = (TEMPLATES / "scheduler-rbac.yaml").read_text()
    copy = text.split("name: {{ $fullname }}-kube-scheduler\n", 1)[1].split("\n---\n", 1)[0]
    assert "coordination.k8s.io" not in copy
    assert "name: system:kube-scheduler" not in text
    assert 'resourceNames: ["{{ $fullname }}-scheduler", "{{ $fullname }}-placer"]' in text
