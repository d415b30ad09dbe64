"""The placer's Lease elector: :class:`tpfabric_kube.leader_election.LeaseElector`, shared with
the operator, made from this process's API client."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tpfabric_kube import leader_election

__all__ = ["LeaseElector"]


class LeaseElector(leader_election.LeaseElector):
    """The shared elector on ``api_client`` (``coordination``: a stand-in Lease API, for tests)."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        namespace: str,
        name: str,
        identity: str,
        *,
        coordination: Any = None,
        **timings: Any,
    ) -> None:
        api = coordination if coordination is not None else client.CoordinationV1Api(api_client)
        super().__init__(api, namespace, name, identity, **timings)
