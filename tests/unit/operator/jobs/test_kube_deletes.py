"""The operator deletes a pod by name and uid: a pod made again under the same name stays."""

from __future__ import annotations

from unittest import mock

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_operator.jobs.kube import KubeAdapter


def an_adapter(answer: int | None) -> tuple[KubeAdapter, mock.Mock]:
    """Return an adapter whose pod deletes the API answers with ``answer`` (None: done)."""
    adapter = KubeAdapter(client.ApiClient(client.Configuration()))
    delete = mock.Mock(side_effect=None if answer is None else ApiException(status=answer))
    adapter.core.delete_namespaced_pod = delete  # type: ignore[method-assign]
    return adapter, delete


@pytest.mark.parametrize(
    ("answer", "deleted"), [(None, True), (404, False), (409, False)], ids=["ok", "gone", "other"]
)
def test_a_pod_is_deleted_by_its_uid(answer: int | None, deleted: bool) -> None:
    adapter, delete = an_adapter(answer)
    assert adapter.delete_pod("ns", "j-worker-0", "u-1") is deleted
    delete.assert_called_once_with("j-worker-0", "ns", body={"preconditions": {"uid": "u-1"}})


def test_other_errors_are_raised() -> None:
    adapter, _ = an_adapter(403)
    with pytest.raises(ApiException):
        adapter.delete_pod("ns", "p", "u-1")
