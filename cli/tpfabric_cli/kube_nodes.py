"""The one adapter through which ``tpfabric topology`` talks to the API server: Node labels.

It reads every Node (paged, one list call per 500 nodes: labels, annotations and status
conditions), or a few Nodes by name (``tpfabric explain`` reads only its job's), and patches the
labels of one Node (and tpfabric's rail map annotation) with a JSON merge patch, where a key set
to ``null`` removes it. Nothing else: which labels to set is decided by the pure functions of
``tpfabric_core.fabric.node_labels``, and this module must never decide it, nor touch anything
but ``metadata.labels`` and those annotations of Nodes.

Errors are translated once, here: an unusable kubeconfig is an ``InputError`` (exit 2, the message
says which flag fixes it), an unreachable or refusing API server a ``RuntimeError`` (exit 1); a
refusal to read nodes (403) is a :class:`NodesHiddenError`, which a reader that can do without
node details (``explain`` for a user with rights in one namespace only) catches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tpfabric_core.errors import InputError

__all__ = [
    "FIELD_MANAGER",
    "NodeCondition",
    "NodeState",
    "NodesHiddenError",
    "node_api",
    "patch_node_labels",
    "read_named_nodes",
    "read_node_labels",
    "read_nodes",
]

#: The field manager our patches are recorded under (``kubectl get node --show-managed-fields``).
FIELD_MANAGER = "tpfabric-topology"
_PAGE = 500
_TIMEOUT_S = 30.0


@contextmanager
def node_api(kubeconfig: Path | None = None) -> Iterator[client.CoreV1Api]:
    """Yield a CoreV1Api for ``kubeconfig`` (default: ``$KUBECONFIG`` or ``~/.kube/config``, then
    the in-cluster service account when running in a pod); the connection is closed afterwards."""
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError(str(kubeconfig), "no such kubeconfig file", "check --kubeconfig")
    try:
        api = config.new_client_from_config(
            config_file=str(kubeconfig) if kubeconfig is not None else None
        )
    except config.ConfigException as err:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api = client.ApiClient(configuration)
        else:
            where = str(kubeconfig) if kubeconfig else "kubeconfig"
            raise InputError(
                where, f"cannot load: {err}", "pass --kubeconfig FILE or set KUBECONFIG"
            ) from err
    with api:
        yield client.CoreV1Api(api)


class NodesHiddenError(RuntimeError):
    """The API server refuses the kubeconfig's user the nodes (403): node details are hidden."""


def _failure(err: Exception, what: str) -> RuntimeError:
    """Return the one-line error for a failed API call ``what``."""
    if isinstance(err, ApiException):
        reason = f"{err.status} {err.reason}"
        if err.status in (401, 403):
            reason += " (the kubeconfig's user needs get/list/patch on nodes)"
        if err.status == 403:
            return NodesHiddenError(f"{what}: API server answered {reason}")
        return RuntimeError(f"{what}: API server answered {reason}")
    return RuntimeError(f"{what}: cannot reach the API server ({type(err).__name__}: {err})")


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One status condition of a Node (``status`` is "True", "False" or "Unknown")."""

    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class NodeState:
    """What ``topology`` reads of a Node: its labels, annotations and conditions by type."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, NodeCondition] = field(default_factory=dict)


def _state(node: Any) -> NodeState:
    """Return what ``topology`` reads of one V1Node."""
    conditions = (node.status.conditions or []) if node.status is not None else []
    return NodeState(
        name=node.metadata.name,
        labels=dict(node.metadata.labels or {}),
        annotations=dict(node.metadata.annotations or {}),
        conditions={
            c.type: NodeCondition(str(c.status), c.reason or "", c.message or "")
            for c in conditions
        },
    )


#: past this many names one paged list of every node costs less than a get per node
_NAMED_READS = 64


def read_named_nodes(core: client.CoreV1Api, names: Iterable[str]) -> list[NodeState]:
    """Return the labels, annotations and conditions of the Nodes ``names`` (one get each; a
    node that is gone is left out), or of every Node when there are many names; raises
    :class:`NodesHiddenError` when the API server refuses them."""
    wanted = sorted(set(names))
    if len(wanted) > _NAMED_READS:
        named = set(wanted)
        return [node for node in read_nodes(core) if node.name in named]
    result = []
    for name in wanted:
        try:
            result.append(_state(core.read_node(name, _request_timeout=_TIMEOUT_S)))
        except ApiException as err:
            if err.status == 404:
                continue
            raise _failure(err, f"reading node {name}") from err
        except HTTPError as err:
            raise _failure(err, f"reading node {name}") from err
    return result


def read_nodes(core: client.CoreV1Api) -> list[NodeState]:
    """Return the labels, annotations and conditions of every Node of the cluster."""
    result: list[NodeState] = []
    token: str | None = None
    while True:
        try:
            page: Any = core.list_node(limit=_PAGE, _continue=token, _request_timeout=_TIMEOUT_S)
        except (ApiException, HTTPError) as err:
            raise _failure(err, "listing nodes") from err
        result.extend(_state(node) for node in page.items)
        # The generated model names the field ``var_continue`` (``continue`` is a keyword).
        token = getattr(page.metadata, "var_continue", None)
        if not token:
            return result


def read_node_labels(core: client.CoreV1Api) -> dict[str, dict[str, str]]:
    """Return ``{node name: its labels}`` for every Node of the cluster."""
    return {node.name: node.labels for node in read_nodes(core)}


def patch_node_labels(
    core: client.CoreV1Api,
    node: str,
    to_set: Mapping[str, str],
    to_remove: list[str],
    annotations: Mapping[str, str | None] | None = None,
) -> None:
    """Patch the labels of ``node``: set ``to_set``, remove ``to_remove`` (merge patch, null);
    ``annotations``: tpfabric's annotations to set (None: remove), in the same patch."""
    patch_labels: dict[str, str | None] = dict(to_set)
    patch_labels.update(dict.fromkeys(to_remove))
    metadata: dict[str, Any] = {"labels": patch_labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    try:
        core.patch_node(
            node,
            {"metadata": metadata},
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
            _request_timeout=_TIMEOUT_S,
        )
    except (ApiException, HTTPError) as err:
        raise _failure(err, f"patching the labels of node {node}") from err
