"""The operator deletes a pod by name and uid: a pod made again under the same name stays."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_operator.kube import KubeAdapter


class FakeCore:
    def __init__(self, status: int | None) -> None:
        self.status = status
        self.deleted: list[tuple[str, str, Any]] = []

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any = None) -> None:
        self.deleted.append((namespace, name, body))
        if self.status is not None:
            raise ApiException(status=self.status, reason="x")


def an_adapter(core: FakeCore) -> KubeAdapter:
    adapter = KubeAdapter(client.ApiClient(client.Configuration()))
    adapter.core = core  # type: ignore[assignment]
    return adapter


@pytest.mark.parametrize(
    ("status", "deleted"), [(None, True), (404, False), (409, False)], ids=["ok", "gone", "other"]
)
def test_a_pod_is_deleted_by_its_uid(status: int | None, deleted: bool) -> None:
    core = FakeCore(status)
    assert an_adapter(core).delete_pod("ns", "j-worker-0", "u-1") is deleted
    assert core.deleted == [("ns", "j-worker-0", {"preconditions": {"uid": "u-1"}})]


def test_other_errors_are_raised() -> None:
    with pytest.raises(ApiException):
        an_adapter(FakeCore(403)).delete_pod("ns", "p", "u-1")
