"""The one adapter through which ``tpfabric topology`` talks to the API server: Node labels.

It reads the labels of every Node (paged, one list call per 500 nodes) and patches the labels of
one Node with a JSON merge patch, where a key set to ``null`` removes the label. Nothing else:
which labels to set is decided by the pure functions of ``tpfabric_core.fabric.node_labels``, and
this module must never decide it, nor touch anything but ``metadata.labels`` of Nodes.

Errors are translated once, here: an unusable kubeconfig is an ``InputError`` (exit 2, the message
says which flag fixes it), an unreachable or refusing API server a ``RuntimeError`` (exit 1).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tpfabric_core.errors import InputError

__all__ = ["FIELD_MANAGER", "node_api", "patch_node_labels", "read_node_labels"]

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


def _failure(err: Exception, what: str) -> RuntimeError:
    """Return the one-line error for a failed API call ``what``."""
    if isinstance(err, ApiException):
        reason = f"{err.status} {err.reason}"
        if err.status in (401, 403):
            reason += " (the kubeconfig's user needs get/list/patch on nodes)"
        return RuntimeError(f"{what}: API server answered {reason}")
    return RuntimeError(f"{what}: cannot reach the API server ({type(err).__name__}: {err})")


def read_node_labels(core: client.CoreV1Api) -> dict[str, dict[str, str]]:
    """Return ``{node name: its labels}`` for every Node of the cluster."""
    result: dict[str, dict[str, str]] = {}
    token: str | None = None
    while True:
        try:
            page: Any = core.list_node(limit=_PAGE, _continue=token, _request_timeout=_TIMEOUT_S)
        except (ApiException, HTTPError) as err:
            raise _failure(err, "listing nodes") from err
        for node in page.items:
            result[node.metadata.name] = dict(node.metadata.labels or {})
        # The generated model names the field ``var_continue`` (``continue`` is a keyword).
        token = getattr(page.metadata, "var_continue", None)
        if not token:
            return result


def patch_node_labels(
    core: client.CoreV1Api, node: str, to_set: Mapping[str, str], to_remove: list[str]
) -> None:
    """Patch the labels of ``node``: set ``to_set``, remove ``to_remove`` (merge patch, null)."""
    patch_labels: dict[str, str | None] = dict(to_set)
    patch_labels.update(dict.fromkeys(to_remove))
    try:
        core.patch_node(
            node,
            {"metadata": {"labels": patch_labels}},
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
            _request_timeout=_TIMEOUT_S,
        )
    except (ApiException, HTTPError) as err:
        raise _failure(err, f"patching the labels of node {node}") from err
