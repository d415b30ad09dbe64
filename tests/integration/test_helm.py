"""The Helm chart: lint, golden renders, schema errors, and the real API server.

Without a cluster: ``helm lint``, ``helm template`` golden files for the main value sets
(``TPFABRIC_UPDATE_GOLDEN=1`` rewrites them), and the messages of rejected values. On the local
control plane: ``helm install`` gets every object accepted (CRD, RBAC, Pod Security "restricted"
pods) and ``helm uninstall`` leaves nothing. Everything e2e/kind/run.sh applies on kind is
validated here too (server-side dry run), so the kind e2e cannot rot unseen.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from typer.testing import CliRunner

from control_plane_fixtures import CRD_NAMES, FabricFactory, apply_crd, wait_for, wait_serving
from control_plane_fixtures import run_kubectl as kubectl
from tpfabric_cli.main import app
from tpfabric_core.api.crd import crd_name
from tpfabric_core.fabric_profile import init_argument, parse_fabric_profile
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.toolchain import find_toolchain, pinned_versions
from tpfabric_operator.webhook.__main__ import parse_args as webhook_args
from tpfabric_operator.webhook.certs import KeyPair, issue_serving, renewal_due, service_names
from tpfabric_scheduler.__main__ import parse_args as extender_args
from tpfabric_scheduler.kube_scheduler_config import scheduler_configuration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tpfabric"
KIND = REPO / "e2e" / "kind"
GOLDEN = Path(__file__).parent / "golden" / "helm"
KUBE_VERSION = pinned_versions()["kubernetes"]
RELEASE_NAMESPACE = "tpfabric-system"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
SMALL_FABRIC = (REPO / "examples" / "fabrics" / "small.yaml").read_text()

#: The main value sets: name -> (values, extra helm flags).
VALUE_SETS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "default": ({}, []),
    "discovery-cronjob": (
        {
            "discovery": {
                "enabled": True,
                "schedule": "0 * * * *",
                "source": {"type": "ibnetdiscover", "data": "# ibnetdiscover dump\n"},
                "extraArgs": ["--node-pattern=^dgx-"],
            }
        },
        [],
    ),
    "discovery-job-labels": (
        {
            "discovery": {
                "enabled": True,
                "ttlSecondsAfterFinished": 3600,
                "source": {
                    "type": "labelsFrom",
                    "existingConfigMap": "node-labels",
                    "key": "nodes.json",
                    "convention": "topograph",
                },
            }
        },
        [],
    ),
    "metrics-pdb": (
        {
            "metrics": {
                "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
                "grafanaDashboard": {"enabled": True, "namespace": "monitoring"},
                "reader": {"serviceAccounts": [{"name": "prometheus", "namespace": "monitoring"}]},
            },
            "logFormat": "text",
            "gangWebhook": {"enabled": True},
            "fabricAgent": {
                "enabled": True,
                "namespace": "tpfabric-agents",
                "heartbeatGraceSeconds": 60,
            },
            "scheduler": {"extender": {"gangWaitAlertSeconds": 3600}},
            "podDisruptionBudget": {"enabled": True},
            "crds": {"enabled": False},
        },
        ["--api-versions", SERVICE_MONITOR_API, "--api-versions", PROMETHEUS_RULE_API],
    ),
    "kind-e2e": (yaml.safe_load((KIND / "values.yaml").read_text()), []),
    "gang-webhook": (
        {
            "topology": {
                "levels": "spine=topology.tpfabric.io/spine,leaf=topology.tpfabric.io/leaf"
            },
            "rdma": {"resourceName": "rdma/rdma_shared_device_a"},
            "gangWebhook": {
                "enabled": True,
                "rdmaCount": 8,
                "owners": ["LeaderWorkerSet"],
            },
        },
        [],
    ),
    "platform": (
        {
            "global": {"imageRegistry": "mirror.example.com", "storageClass": "a parent's"},
            "image": {"digest": "sha256:" + "a" * 64},
            "scheduler": {"kubeScheduler": {"image": {"digest": "sha256:" + "b" * 64}}},
            "gangWebhook": {
                "enabled": True,
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
                },
            },
            "fabricAgent": {"enabled": True, "namespace": "tpfabric-agents"},
        },
        [],
    ),
    "fabric-agent": (
        {
            "fabricAgent": {
                "enabled": True,
                "hcas": ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5"],
                "judgement": {"windowSeconds": 120, "counterLimits": {"symbol_error": 100}},
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
            # discovery leaves the health label to the agent (--leave-health)
            "discovery": {
                "enabled": True,
                "source": {"type": "ibnetdiscover", "data": "# ibnetdiscover dump\n"},
            },
        },
        [],
    ),
}


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    found = find_toolchain(("helm",)).paths["helm"]
    if found is None:
        pytest.fail("helm is missing: run `make toolchain` (the `make test` target does it)")
    return found


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Return an environment that keeps helm's cache, config and data out of the home folder."""
    home = tmp_path_factory.mktemp("helm-home")
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def run_helm(
    helm: Path, env: dict[str, str], *args: str, values: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """Return the finished ``helm`` run; ``values`` are passed as a values file on stdin."""
    flags = ["--values", "-"] if values is not None else []
    return subprocess.run(
        [str(helm), *args, *flags],
        input=yaml.safe_dump(values) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def render(
    helm: Path,
    env: dict[str, str],
    values: dict[str, Any] | None = None,
    *flags: str,
    namespace: str = RELEASE_NAMESPACE,
) -> subprocess.CompletedProcess[str]:
    """Return ``helm template`` of the chart as the pinned Kubernetes version would see it."""
    return run_helm(
        helm,
        env,
        "template",
        "tpfabric",
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        *flags,
        values=values or {},
    )


def documents(text: str) -> list[dict[str, Any]]:
    """Return the non-empty YAML documents of a rendered chart."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


#: what the chart makes at template time: the gang webhook's CA and serving pair (new each render)
_GENERATED = re.compile(
    r"^(\s*(?:caBundle|ca\.crt|ca\.key|tls\.crt|tls\.key): )\S{40,}$", re.MULTILINE
)


def without_generated_certs(rendered: str) -> str:
    """Return the render with the gang webhook's generated certificate data elided."""
    return _GENERATED.sub(r"\1<generated at template time>", rendered)


def without_crd_spec(rendered: str) -> str:
    """Return the render with the CRD's spec elided: tests/unit/chart pins it to crds/."""
    parts = rendered.split("\n---\n")
    for index, part in enumerate(parts):
        if "\nkind: CustomResourceDefinition\n" in part:
            head, _, _ = part.partition("\nspec:\n")
            parts[index] = f"{head}\nspec: {{}}  # elided: charts/tpfabric/files/crds/"
    return "\n---\n".join(parts)


# -- without a cluster ---------------------------------------------------------------------------


def test_helm_lint_is_clean(helm_binary: Path, helm_env: dict[str, str]) -> None:
    done = run_helm(helm_binary, helm_env, "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout
    assert "[ERROR]" not in done.stdout


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_template_matches_the_golden_file(
    helm_binary: Path, helm_env: dict[str, str], name: str
) -> None:
    values, flags = VALUE_SETS[name]
    done = render(helm_binary, helm_env, values, *flags)
    assert done.returncode == 0, done.stderr
    got = without_generated_certs(without_crd_spec(done.stdout))
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("TPFABRIC_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert golden.exists(), f"{golden} missing: rerun with TPFABRIC_UPDATE_GOLDEN=1"
    assert got == golden.read_text(), (
        f"helm template ({name}) differs from {golden.relative_to(REPO)}; if the change is "
        "meant, rerun with TPFABRIC_UPDATE_GOLDEN=1 and review the diff"
    )


def test_the_scheduler_configuration_is_the_one_the_local_cluster_runs(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    done = render(helm_binary, helm_env)
    config_map = next(
        d
        for d in documents(done.stdout)
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tpfabric-scheduler"
    )
    config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    leader_election = config.pop("leaderElection")
    assert config == scheduler_configuration("http://127.0.0.1:8888")
    assert leader_election == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "tpfabric-scheduler",
        "resourceNamespace": RELEASE_NAMESPACE,
    }


def test_with_metrics_on_nothing_reaches_the_extenders_functional_port(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    values, flags = VALUE_SETS["metrics-pdb"]
    objects = documents(render(helm_binary, helm_env, values, *flags).stdout)
    deployment = next(
        d
        for d in objects
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler")
    )
    extender = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    )
    command = extender["command"]
    args = extender_args(command[command.index("tpfabric_scheduler") + 1 :])
    assert (args.host, args.port) == ("127.0.0.1", 8888)  # /filter, /prioritize: loopback only
    assert (args.metrics_address, args.metrics_port, args.metrics_auth) == (
        "0.0.0.0",
        8443,
        "kubernetes",
    )
    # the pod names no port but the metrics one, and every Service and ServiceMonitor of the
    # scheduler's pods targets that one, over HTTPS with a token
    assert extender["ports"] == [
        {"name": "https-metrics", "containerPort": 8443, "protocol": "TCP"}
    ]
    for probe in ("livenessProbe", "readinessProbe"):
        assert extender[probe]["httpGet"]["port"] == "https-metrics"
        assert extender[probe]["httpGet"]["scheme"] == "HTTPS"
    services = [d for d in objects if d["kind"] == "Service"]
    monitors = [d for d in objects if d["kind"] == "ServiceMonitor"]
    assert {s["metadata"]["name"] for s in services} >= {
        "tpfabric-scheduler-metrics",
        "tpfabric-operator-metrics",
        "tpfabric-gang-webhook-metrics",
        "tpfabric-fabric-agent-metrics",
    }
    for service in services:
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ("https-metrics", "https"), service["metadata"]["name"]
    assert len(monitors) == 4
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert (endpoint["port"], endpoint["scheme"]) == ("https-metrics", "https")
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    reader = next(
        d
        for d in objects
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == "tpfabric-metrics-reader"
    )
    assert reader["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    ]


@pytest.mark.parametrize(
    ("cluster_version", "tag"),
    [(KUBE_VERSION, KUBE_VERSION), ("v1.30.4-eks-a737599", "v1.30.4")],
)
def test_kube_scheduler_runs_the_version_of_the_cluster(
    helm_binary: Path, helm_env: dict[str, str], cluster_version: str, tag: str
) -> None:
    done = run_helm(
        helm_binary,
        helm_env,
        "template",
        "tpfabric",
        str(CHART),
        "--kube-version",
        cluster_version,
        "--show-only",
        "templates/scheduler.yaml",
    )
    assert done.returncode == 0, done.stderr
    (deployment,) = documents(done.stdout)
    images = {c["name"]: c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert images["kube-scheduler"] == f"registry.k8s.io/kube-scheduler:{tag}"


def test_the_fabrics_figures_reach_the_placer_as_flags_it_takes(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    figures = {"oversubscription": "spine=1,block=3,cluster=7", "backgroundLoad": "block=0.25"}
    done = render(
        helm_binary,
        helm_env,
        {"scheduler": {"extender": figures}},
        "--show-only",
        "templates/scheduler.yaml",
    )
    assert done.returncode == 0, done.stderr
    (deployment,) = documents(done.stdout)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    command = next(c["command"] for c in containers if c["name"] == "extender")
    flags = command[command.index("tpfabric_scheduler") + 1 :]
    assert "--oversubscription=spine=1,block=3,cluster=7" in flags
    assert "--background-load=block=0.25" in flags
    cost = extender_args(flags).cost
    assert dict(cost.oversubscription) == {"spine": 1.0, "block": 3.0, "cluster": 7.0}
    assert dict(cost.background_load) == {"block": 0.25}


ROCE_PROFILE = {
    "linkLayer": "roce",
    "roce": {"trafficClass": 106, "fifoTrafficClass": 84, "dscp": 26},
    "ecmp": {"levels": ["spine", "cluster"]},
}


def test_the_fabric_profile_reaches_the_operator_and_the_webhook_as_they_read_it(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    values = {"fabric": {"profile": ROCE_PROFILE}, "gangWebhook": {"enabled": True}}
    done = render(helm_binary, helm_env, values)
    assert done.returncode == 0, done.stderr
    deployments = {d["metadata"]["name"]: d for d in documents(done.stdout)
                   if d["kind"] == "Deployment"}  # fmt: skip
    operator = deployments["tpfabric-operator"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in operator["env"]}
    webhook = deployments["tpfabric-gang-webhook"]["spec"]["template"]["spec"]["containers"][0]
    flag = next(a for a in webhook["args"] if a.startswith("--fabric-profile="))
    wanted = parse_fabric_profile(json.dumps(ROCE_PROFILE), "values")
    assert parse_fabric_profile(env["TPFABRIC_FABRIC_PROFILE"], "env") == wanted
    assert webhook_args(["--cert-dir=/tmp", "--init-image=i", flag]).fabric_profile == (
        init_argument(wanted)
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 2}, "additional properties 'replicas' not allowed"),
        ({"operator": {"logLevel": "verbose"}}, "at '/operator/logLevel': value must be one of"),
        ({"scheduler": {"extender": {"port": 80}}}, "at '/scheduler/extender/port': minimum"),
        (
            {"scheduler": {"extender": {"listenAddress": "0.0.0.0"}}},
            "additional properties 'listenAddress' not allowed",
        ),
        ({"gangWebhook": {"metricsPort": 9443}}, "at '/gangWebhook/metricsPort'"),
        (
            {"scheduler": {"kubeScheduler": {"image": {"tag": "1.30"}}}},
            "at '/scheduler/kubeScheduler/image/tag'",
        ),
        ({"discovery": {"source": {"type": "ufm"}}}, "at '/discovery/source/type'"),
        ({"crds": {"enabled": "yes"}}, "at '/crds/enabled': got string, want boolean"),
        (
            {"scheduler": {"extender": {"oversubscription": "spine:2"}}},
            "at '/scheduler/extender/oversubscription'",
        ),
        ({"operator": {"resources": {"limit": {}}}}, "additional properties 'limit' not allowed"),
        (
            {"fabric": {"profile": {"infiniband": {"serviceLevel": 16}}}},
            "at '/fabric/profile/infiniband/serviceLevel': maximum",
        ),
        (
            {"fabric": {"profile": {"infiniband": {"adaptiveRoutingServiceLevels": [1, 17]}}}},
            "at '/fabric/profile/infiniband/adaptiveRoutingServiceLevels/1': maximum",
        ),
        (
            {"fabric": {"profile": {"roce": {"trafficClass": 256}}}},
            "at '/fabric/profile/roce/trafficClass': maximum",
        ),
        (
            {"fabric": {"profile": {"linkLayer": "ethernet"}}},
            "at '/fabric/profile/linkLayer': value must be one of",
        ),
        ({"gangWebhook": {"rdmaCount": "all"}}, "at '/gangWebhook/rdmaCount'"),
        ({"gangWebhook": {"rdmaCount": 65}}, "at '/gangWebhook/rdmaCount'"),
        ({"rdma": {"resourceName": "ib"}}, "at '/rdma/resourceName'"),
        ({"image": {"digest": "sha256:abc"}}, "at '/image/digest'"),
        ({"global": {"imageRegistry": "mirror example"}}, "at '/global/imageRegistry'"),
        ({"topology": {"levels": "leaf"}}, "at '/topology/levels'"),
        (
            {"gangWebhook": {"certManager": {"issuerRef": {"kind": "Vault"}}}},
            "at '/gangWebhook/certManager/issuerRef/kind'",
        ),
    ],
)
def test_the_schema_rejects_bad_values_with_their_path(
    helm_binary: Path, helm_env: dict[str, str], values: dict[str, Any], message: str
) -> None:
    done = render(helm_binary, helm_env, values)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert message in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("values", "flags", "message"),
    [
        (
            {"discovery": {"enabled": True}},
            [],
            "discovery.enabled needs the topology file: set discovery.source.data",
        ),
        (
            {"scheduler": {"extender": {"metricsPort": 8888}}},
            [],
            "scheduler.extender.metricsPort must differ from scheduler.extender.port",
        ),
        (
            {"metrics": {"serviceMonitor": {"enabled": True}}},
            [],
            "needs the Prometheus Operator's ServiceMonitor CRD",
        ),
        (
            {"operator": {"serviceAccount": {"create": False}}},
            [],
            "operator.serviceAccount.name is required when operator.serviceAccount.create is false",
        ),
        (
            {"operator": {"leaderElect": False}},
            [],
            "operator.replicas > 1 needs operator.leaderElect=true",
        ),
        (
            {"scheduler": {"topologyLevels": "leaf=example.com/tor"}},
            [],
            (
                "scheduler.topologyLevels moved to topology.levels (one setting for the placer "
                'and the gang webhook): set topology.levels="leaf=example.com/tor"'
            ),
        ),
        (
            {"gangWebhook": {"levels": {"leaf": "example.com/tor"}}},
            [],
            "gangWebhook.levels moved to topology.levels, in the placer's format",
        ),
    ],
)
def test_inconsistent_values_fail_with_what_to_set(
    helm_binary: Path,
    helm_env: dict[str, str],
    values: dict[str, Any],
    flags: list[str],
    message: str,
) -> None:
    done = render(helm_binary, helm_env, values, *flags)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


# -- a chart platform teams can ship --------------------------------------------------------------


def _containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return every container of the rendered pods by ``<object name>/<container name>``."""
    found = {}
    for obj in objects:
        spec = obj.get("spec") or {}
        template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template") or {}
        for container in (template.get("spec") or {}).get("containers") or []:
            found[f"{obj['metadata']['name']}/{container['name']}"] = container
    return found


def test_as_a_subchart_the_parents_global_values_registry_and_digests_are_taken(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    values, flags = VALUE_SETS["platform"]
    done = render(helm_binary, helm_env, values, *flags)
    assert done.returncode == 0, done.stderr
    containers = _containers(documents(done.stdout))
    ours = "mirror.example.com/tpfabric/tpfabric@sha256:" + "a" * 64
    assert containers["tpfabric-operator/operator"]["image"] == ours
    assert containers["tpfabric-scheduler/extender"]["image"] == ours
    assert containers["tpfabric-gang-webhook/webhook"]["image"] == ours
    assert containers["tpfabric-fabric-agent/fabric-agent"]["image"] == ours
    # the registry replaces registry.k8s.io; the digest pins kube-scheduler whatever the cluster
    assert containers["tpfabric-scheduler/kube-scheduler"]["image"] == (
        "mirror.example.com/kube-scheduler@sha256:" + "b" * 64
    )
    init = "mirror.example.com/tpfabric/rdma-init:0.1.0"
    env = {e["name"]: e.get("value") for e in containers["tpfabric-operator/operator"]["env"]}
    assert env["TPFABRIC_RDMA_INIT_IMAGE"] == init
    assert f"--init-image={init}" in containers["tpfabric-gang-webhook/webhook"]["args"]


def test_one_levels_setting_reaches_the_placer_and_the_gang_webhook(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    levels = "block=example.com/pod,spine=example.com/row,leaf!=example.com/tor"
    values = {"topology": {"levels": levels}, "gangWebhook": {"enabled": True}}
    containers = _containers(documents(render(helm_binary, helm_env, values).stdout))
    extender = containers["tpfabric-scheduler/extender"]["command"]
    assert extender_args(extender[extender.index("tpfabric_scheduler") + 1 :]).levels == (
        extender_args([f"--levels={levels}"]).levels
    )
    hook = containers["tpfabric-gang-webhook/webhook"]["args"]
    webhook = webhook_args(["--cert-dir=/tmp", "--init-image=i", *hook])
    assert dict(webhook.level) == {
        "block": "example.com/pod",
        "spine": "example.com/row",
        "leaf": "example.com/tor",
    }


def test_the_gang_webhook_is_hardened_and_critical_pods_install_outside_kube_system(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    values = {
        "rdma": {"resourceName": "rdma/rdma_shared_device_a"},
        "gangWebhook": {"enabled": True},
        "fabricAgent": {"enabled": True, "namespace": "tpfabric-agents"},
    }
    objects = documents(render(helm_binary, helm_env, values).stdout)
    deployments = {d["metadata"]["name"]: d for d in objects if d["kind"] == "Deployment"}
    webhook = deployments["tpfabric-gang-webhook"]["spec"]["template"]["spec"]
    assert webhook["priorityClassName"] == "system-cluster-critical"
    anti = webhook["affinity"]["podAntiAffinity"]
    (spread,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    term = spread["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gang-webhook"
    (container,) = webhook["containers"]
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {
            "path": "/healthz",
            "port": "https",
            "scheme": "HTTPS",
        }
    assert "--rdma-resource=rdma/rdma_shared_device_a" in container["args"]
    budgets = {d["metadata"]["name"]: d for d in objects if d["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == {"tpfabric-operator", "tpfabric-scheduler", "tpfabric-gang-webhook"}
    assert budgets["tpfabric-gang-webhook"]["spec"]["minAvailable"] == 1
    scheduler = deployments["tpfabric-scheduler"]["spec"]["template"]["spec"]
    assert scheduler["priorityClassName"] == "system-cluster-critical"
    agent = next(d for d in objects if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert agent["priorityClassName"] == "system-node-critical"
    quotas = {
        d["metadata"]["namespace"]: d["spec"] for d in objects if d["kind"] == "ResourceQuota"
    }
    scope = {ns: q["scopeSelector"]["matchExpressions"][0]["values"] for ns, q in quotas.items()}
    assert scope == {
        RELEASE_NAMESPACE: ["system-cluster-critical"],
        "tpfabric-agents": ["system-node-critical"],
    }


def _gang_webhook_objects(helm: Path, env: dict[str, str], **hook: Any) -> list[dict[str, Any]]:
    done = render(helm, env, {"gangWebhook": {"enabled": True, **hook}})
    assert done.returncode == 0, done.stderr
    return [
        d
        for d in documents(done.stdout)
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "gang-webhook"
    ]


def test_the_webhooks_ca_bundle_is_in_the_rendered_output_and_the_webhook_takes_the_pair(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    objects = _gang_webhook_objects(helm_binary, helm_env)
    (secret,) = [d for d in objects if d["kind"] == "Secret"]
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    (configuration,) = [d for d in objects if d["kind"] == "MutatingWebhookConfiguration"]
    bundles = {w["clientConfig"]["caBundle"] for w in configuration["webhooks"]}
    assert bundles == {secret["data"]["ca.crt"]}
    ca, serving = KeyPair(data["ca.crt"], data["ca.key"]), KeyPair(data["tls.crt"], data["tls.key"])
    names = service_names("tpfabric-gang-webhook", RELEASE_NAMESPACE)
    now = dt.datetime.now(dt.UTC)
    # the webhook's own check: nothing to renew, so it serves this pair as the chart made it
    assert renewal_due(ca, serving, names, now) == ""
    assert renewal_due(ca, serving, names, now + dt.timedelta(days=340)) != ""
    renewed = issue_serving(ca, names, now)  # and it renews it with the chart's CA
    assert renewal_due(ca, renewed, names, now) == ""


def test_with_cert_manager_the_certificate_and_its_ca_are_cert_managers(
    helm_binary: Path, helm_env: dict[str, str]
) -> None:
    objects = _gang_webhook_objects(helm_binary, helm_env, certManager={"enabled": True})
    kinds = {d["kind"] for d in objects}
    assert {"Certificate", "Issuer"} <= kinds
    assert "Secret" not in kinds  # cert-manager writes it
    assert "Role" not in kinds  # the webhook neither reads nor writes it: it mounts it
    (certificate,) = [d for d in objects if d["kind"] == "Certificate"]
    assert certificate["spec"]["secretName"] == "tpfabric-gang-webhook-tls"
    assert certificate["spec"]["dnsNames"] == service_names(
        "tpfabric-gang-webhook", RELEASE_NAMESPACE
    )
    assert certificate["spec"]["issuerRef"]["name"] == "tpfabric-gang-webhook-selfsigned"
    (configuration,) = [d for d in objects if d["kind"] == "MutatingWebhookConfiguration"]
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{RELEASE_NAMESPACE}/tpfabric-gang-webhook"
    }
    assert all("caBundle" not in w["clientConfig"] for w in configuration["webhooks"])
    (role,) = [d for d in objects if d["kind"] == "ClusterRole"]
    assert all("mutatingwebhookconfigurations" not in r["resources"] for r in role["rules"])
    (container,) = _containers(objects).values()
    args = webhook_args(["--init-image=i", *container["args"]])
    assert (str(args.cert_dir), args.manage_certs) == ("/certs", False)
    assert {"name": "certs", "mountPath": "/certs", "readOnly": True} in container["volumeMounts"]
    corp = {"enabled": True, "issuerRef": {"name": "corp", "kind": "ClusterIssuer"}}
    issued = _gang_webhook_objects(helm_binary, helm_env, certManager=corp)
    assert "Issuer" not in {d["kind"] for d in issued}
    (certificate,) = [d for d in issued if d["kind"] == "Certificate"]
    assert certificate["spec"]["issuerRef"] == {
        "name": "corp",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


def test_the_kind_script_parses() -> None:
    done = subprocess.run(
        ["bash", "-n", str(KIND / "run.sh")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


# -- on the local control plane ------------------------------------------------------------------


def _crd_exists(cluster: LocalCluster, name: str | None = None) -> bool:
    found = kubectl(cluster, "get", "crd", name or crd_name(), "--ignore-not-found", "-o", "name")
    return found.stdout != ""


def _delete_crd(cluster: LocalCluster) -> None:
    """Delete the CRDs (those there) once TensorParallelJobs are served; wait until they go."""
    present = [name for name in CRD_NAMES if _crd_exists(cluster, name)]
    if not present:
        return
    if crd_name() in present:
        wait_serving(cluster)
    deleted = kubectl(cluster, "delete", "crd", *present, "--ignore-not-found", "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    # a stalled delete (see wait_serving) still ends at the finalizer's resync, within 5 minutes
    wait_for(
        lambda: not any(_crd_exists(cluster, name) for name in present),
        timeout=330,
        what="the CRDs to be deleted",
    )


@pytest.fixture
def without_tpj_crd(local_cluster: LocalCluster) -> Iterator[None]:
    """Run without the CRDs (other tests may have applied them), restoring them afterwards.

    The CRDs are restored even when removing them failed, so one failure cannot take them away
    from every later test of the session.
    """
    existed = _crd_exists(local_cluster)
    try:
        _delete_crd(local_cluster)
        yield
    finally:
        _delete_crd(local_cluster)
        if existed:
            apply_crd(local_cluster)


def _restricted(cluster: LocalCluster, namespace: str) -> None:
    labelled = kubectl(
        cluster,
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )
    assert labelled.returncode == 0, labelled.stderr


def _pods_of(api: client.ApiClient, namespace: str, release: str) -> set[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/instance={release}"
    )
    return {p.metadata.labels.get("app.kubernetes.io/component") for p in pods.items}


@pytest.mark.usefixtures("without_tpj_crd")
def test_helm_install_is_accepted_and_uninstall_leaves_nothing(
    local_cluster: LocalCluster,
    api: client.ApiClient,
    namespace: str,
    helm_binary: Path,
    helm_env: dict[str, str],
) -> None:
    _restricted(local_cluster, namespace)
    # the fabric agent (a hostPath: privileged) in a namespace of its own, so that the release's
    # can enforce restricted
    agents = f"{namespace}-agents"
    core = client.CoreV1Api(api)
    core.create_namespace(
        {
            "metadata": {
                "name": agents,
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
            }
        }
    )
    values = {
        "crds": {"keep": False},
        "discovery": {"enabled": True, "source": {"type": "fabric", "data": SMALL_FABRIC}},
        "podDisruptionBudget": {"enabled": True},
        "gangWebhook": {"enabled": True},
        "fabricAgent": {"enabled": True, "namespace": agents},
    }
    kubeconfig = f"--kubeconfig={local_cluster.kubeconfig}"
    installed = run_helm(
        helm_binary, helm_env, "install", "tpf", str(CHART), "-n", namespace, kubeconfig,
        values=values,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    assert "violate PodSecurity" not in installed.stderr, installed.stderr
    manifest = run_helm(
        helm_binary, helm_env, "get", "manifest", "tpf", "-n", namespace, kubeconfig
    )
    kinds = {d["kind"] for d in documents(manifest.stdout)}
    assert {"CustomResourceDefinition", "ClusterRole", "Deployment", "Job", "DaemonSet"} <= kinds
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    assert "MutatingWebhookConfiguration" in kinds
    existing = kubectl(local_cluster, "get", "-f", "-", "-o", "name", stdin=manifest.stdout)
    assert existing.returncode == 0, existing.stderr
    assert len(existing.stdout.split()) == len(documents(manifest.stdout))
    # the controllers' pods pass Pod Security "restricted" admission (they stay Pending: no nodes)
    wait_for(
        lambda: (
            _pods_of(api, namespace, "tpf")
            == {"operator", "scheduler", "discovery", "gang-webhook"}
        ),
        what="pods of the operator, the scheduler, the gang webhook and the discovery Job",
    )

    # the release's CRD serves TensorParallelJobs (deleting it unserved can stall: wait_serving)
    wait_serving(local_cluster)

    # --no-hooks: this cluster has no node to run the cleanup hook's Job on (helm would wait for
    # it); test_upgrade_uninstall.py runs the hook on nodes
    removed = run_helm(
        helm_binary, helm_env, "uninstall", "tpf", "-n", namespace, kubeconfig, "--no-hooks"
    )
    assert removed.returncode == 0, removed.stderr
    wait_for(
        lambda: kubectl(
            local_cluster, "get", "-f", "-", "--ignore-not-found", "-o", "name",
            stdin=manifest.stdout,
        ).stdout == "",
        what="every object of the release to be deleted",
    )  # fmt: skip
    wait_for(lambda: not _pods_of(api, namespace, "tpf"), what="the release's pods to be deleted")
    secrets = client.CoreV1Api(api).list_namespaced_secret(namespace, label_selector="owner=helm")
    assert secrets.items == []
    core.delete_namespace(agents)


@pytest.mark.usefixtures("without_tpj_crd")
def test_helm_uninstall_keeps_the_crd_by_default(
    local_cluster: LocalCluster, namespace: str, helm_binary: Path, helm_env: dict[str, str]
) -> None:
    kubeconfig = f"--kubeconfig={local_cluster.kubeconfig}"
    installed = run_helm(
        helm_binary, helm_env, "install", "tpk", str(CHART), "-n", namespace, kubeconfig
    )
    assert installed.returncode == 0, installed.stderr
    removed = run_helm(  # no node runs the cleanup hook's Job here: test_upgrade_uninstall.py
        helm_binary, helm_env, "uninstall", "tpk", "-n", namespace, kubeconfig, "--no-hooks"
    )
    assert removed.returncode == 0, removed.stderr
    assert "tensorparalleljobs.tpfabric.io" in removed.stdout + removed.stderr  # "kept" notice
    assert _crd_exists(local_cluster)


def test_everything_the_kind_e2e_applies_is_accepted(
    local_cluster: LocalCluster,
    namespace: str,
    fake_nodes: FabricFactory,
    helm_binary: Path,
    helm_env: dict[str, str],
) -> None:
    """The objects and commands of e2e/kind/run.sh, as far as a cluster without Docker allows."""
    apply_crd(local_cluster)
    # the workers of the fake fabric, stripped of their leaf label: `topology label` restores it
    workers = fake_nodes((KIND / "fabric.yaml").read_text())
    for node in workers:
        kubectl(local_cluster, "label", "node", node, "topology.tpfabric.io/leaf-")
    labelled = CliRunner().invoke(
        app,
        ["topology", "label", "--fabric", str(KIND / "fabric.yaml"), "--apply",
         "--kubeconfig", str(local_cluster.kubeconfig)],
    )  # fmt: skip
    assert labelled.exit_code == 0, labelled.output
    leaves = kubectl(
        local_cluster, "get", "nodes", *workers, "-o",
        "jsonpath={.items[*].metadata.labels.topology\\.tpfabric\\.io/leaf}",
    )  # fmt: skip
    assert len(set(leaves.stdout.split())) == 2, leaves.stdout
    for node in workers:
        patched = kubectl(
            local_cluster, "patch", "node", node, "--subresource=status", "--type=json",
            f"--patch-file={KIND / 'advertise-gpus.json'}",
        )  # fmt: skip
        assert patched.returncode == 0, patched.stderr

    def dry_run(*args: str, stdin: str | None = None) -> None:
        done = kubectl(local_cluster, "apply", "--dry-run=server", *args, stdin=stdin)
        assert done.returncode == 0, done.stderr

    dry_run("-f", str(REPO / "e2e" / "manifests" / "fake-rdma-device-plugin.yaml"))
    dry_run("-n", namespace, "-f", str(KIND / "tpj.yaml"))
    # the LeaderWorkerSet the kind tier runs through the gang webhook, against LWS's own CRD
    # (copied beside the controller by `tpfabric toolchain build --controllers`)
    lws = find_toolchain(("lws",))
    if lws.missing:
        pytest.fail("missing lws: run `tpfabric toolchain build --controllers`", pytrace=False)
    crd = lws.path("lws").parent / "config" / "lws" / "bases"
    applied = kubectl(
        local_cluster, "apply", "--server-side", "--force-conflicts", "-f",
        str(crd / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    kubectl(
        local_cluster, "wait", "--for=condition=Established", "--timeout=60s",
        "crd/leaderworkersets.leaderworkerset.x-k8s.io",
    )  # fmt: skip

    def lws_accepted() -> bool:  # kubectl's discovery may not know the new kind for a moment
        manifest = str(KIND / "lws.yaml")
        done = kubectl(local_cluster, "apply", "--dry-run=server", "-n", namespace, "-f", manifest)
        assert "no matches for kind" in done.stderr or done.returncode == 0, done.stderr
        return done.returncode == 0

    wait_for(lws_accepted, 60, what="the kind tier's LeaderWorkerSet accepted (server dry run)")
    values, _ = VALUE_SETS["kind-e2e"]
    rendered = render(helm_binary, helm_env, values, namespace=namespace)
    assert rendered.returncode == 0, rendered.stderr
    dry_run("-f", "-", stdin=rendered.stdout)
