"""The kube-scheduler extender wire protocol (``k8s.io/kube-scheduler/extender/v1``).

JSON keys are the Go field names. With ``nodeCacheCapable: true`` the scheduler sends node names
only (``NodeNames``) and expects names back. Parsing is strict about what we use and lenient about
the rest: a request we cannot use raises :class:`BadRequestError` (answered with HTTP 400 and the
reason), never an exception that takes the server down.
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
    """A filter or prioritize request: the pod and the candidate node names."""

    pod: PodRef
    node_names: list[str]


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
    if names is None:
        nodes = data.get("Nodes")
        if isinstance(nodes, dict) and isinstance(nodes.get("items"), list):
            # a scheduler configured without nodeCacheCapable sends whole Node objects
            names = [n.get("metadata", {}).get("name") for n in nodes["items"]]
        else:
            raise BadRequestError("NodeNames is missing (configure the extender nodeCacheCapable)")
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
    )


def encode_filter_result(result: FilterResult) -> bytes:
    """Return the ExtenderFilterResult JSON for ``result``."""
    return orjson.dumps(
        {
            "Nodes": None,
            "NodeNames": result.node_names,
            "FailedNodes": result.failed,
            "FailedAndUnresolvableNodes": result.failed_unresolvable,
            "Error": result.error,
        }
    )


def encode_priorities(scores: list[tuple[str, int]]) -> bytes:
    """Return the HostPriorityList JSON for ``(node, score)`` pairs (scores 0..10)."""
    return orjson.dumps([{"Host": host, "Score": score} for host, score in scores])
