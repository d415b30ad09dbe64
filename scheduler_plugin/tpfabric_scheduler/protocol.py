"""The kube-scheduler extender wire protocol (``k8s.io/kube-scheduler/extender/v1``).

JSON keys are the Go field names. With ``nodeCacheCapable: true`` the scheduler sends node names
only (``NodeNames``) and expects names back; without it, it sends whole Node objects (``Nodes``)
and reads only ``Nodes`` of the filter answer, so the answer must carry the kept Node objects
themselves (a names-only answer would filter out every node). Parsing is strict about what we use
and lenient about the rest: a request we cannot use raises :class:`BadRequestError` (answered with
HTTP 400 and the reason), never an exception that takes the server down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "MAX_SCORE",
    "BadRequestError",
    "ExtenderArgs",
    "FilterResult",
    "PodRef",
    "encode_filter_result",
    "encode_priorities",
    "parse_extender_args",
]

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority


class BadRequestError(ValueError):
    """The request body is not ExtenderArgs we can use; the message says why."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """What the extender needs of the pod being scheduled."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """A filter or prioritize request: the pod and the candidate node names.

    ``nodes`` holds the request's Node objects, unchanged, when the scheduler sent them
    (``nodeCacheCapable: false``), in the order of ``node_names``; None when it sent names.
    """

    pod: PodRef
    node_names: list[str]
    nodes: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class FilterResult:
    """Nodes that pass, and per-node reasons for those that do not."""

    node_names: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    failed_unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadRequestError(f"{where} must be a map of strings")
    return value


def parse_extender_args(body: bytes) -> ExtenderArgs:
    """Return the ExtenderArgs in ``body``; BadRequestError says what is wrong."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise BadRequestError(f"body is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise BadRequestError("body must be a JSON object with Pod and NodeNames")
    pod = data.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequestError("Pod is missing or not an object")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise BadRequestError("Pod.metadata.name is missing")
    names = data.get("NodeNames")
    node_objects: list[dict[str, Any]] | None = None
    if names is None:
        # a scheduler configured without nodeCacheCapable sends whole Node objects
        node_objects, names = _node_objects(data.get("Nodes"))
    # one C-level pass over thousands of names (orjson only ever makes exact str)
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
        raise BadRequestError("NodeNames must be a list of node names")
    return ExtenderArgs(
        pod=PodRef(
            namespace=str(meta.get("namespace") or "default"),
            name=meta["name"],
            uid=str(meta.get("uid") or ""),
            labels=_string_map(meta.get("labels"), "Pod.metadata.labels"),
            annotations=_string_map(meta.get("annotations"), "Pod.metadata.annotations"),
        ),
        node_names=names,
        nodes=node_objects,
    )


def _node_objects(value: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Return the Node objects of a ``Nodes`` NodeList and their names (checked by the caller)."""
    if not isinstance(value, dict) or not isinstance(value.get("items"), list):
        raise BadRequestError(
            "NodeNames and Nodes are missing (configure the extender nodeCacheCapable)"
        )
    items: list[Any] = value["items"]
    names: list[Any] = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise BadRequestError("Nodes.items[] must be Node objects with metadata.name")
        names.append(meta.get("name"))
    return items, names


def encode_filter_result(result: FilterResult, nodes: list[dict[str, Any]] | None = None) -> bytes:
    """Return the ExtenderFilterResult JSON for ``result``.

    ``nodes``: the request's Node objects (``ExtenderArgs.nodes``). When given, the answer carries
    the kept ones, unchanged and in request order, as ``Nodes.items`` and ``NodeNames`` is null:
    the answer a scheduler without ``nodeCacheCapable`` reads.
    """
    if nodes is not None:
        kept = set(result.node_names)
        kept_nodes: dict[str, Any] | None = {
            "items": [n for n in nodes if n["metadata"]["name"] in kept]
        }
        names: list[str] | None = None
    else:
        kept_nodes, names = None, result.node_names
    return orjson.dumps(
        {
            "Nodes": kept_nodes,
            "NodeNames": names,
            "FailedNodes": result.failed,
            "FailedAndUnresolvableNodes": result.failed_unresolvable,
            "Error": result.error,
        }
    )


def encode_priorities(scores: list[tuple[str, int]]) -> bytes:
    """Return the HostPriorityList JSON for ``(node, score)`` pairs (scores 0..10)."""
    return orjson.dumps([{"Host": host, "Score": score} for host, score in scores])
