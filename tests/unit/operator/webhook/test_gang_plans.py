"""The gang webhook's view of the gangs: the plans its Gang record watch keeps and the ranks its
gang pod watch notes, which tell a pod of the plan from a replacement admitted by any replica."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tpfabric_core.api import ATTEMPT_LABEL
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.jobset_ranks import jobset_layout
from tpfabric_operator.webhook.gang_plans import GangPlans, GangPodRanks, GangRecords
from tpfabric_operator.webhook.jobsets import JobSetLayouts

pytestmark = pytest.mark.unit

KEY = ("serving", "chat-0")


def record(state: str = "Planned") -> dict[str, Any]:
    placement = {"state": state, "attempt": 0, "nodes": ["n0", "n1"]}
    return {
        "metadata": {"namespace": "serving", "name": "chat-0"},
        "status": {"placement": placement},
    }


def gang_pod(rank: int, attempt: int) -> dict[str, Any]:
    labels = {GANG_LABEL: "chat-0", RANK_LABEL: str(rank), ATTEMPT_LABEL: str(attempt)}
    return {"metadata": {"namespace": "serving", "name": f"chat-0-{rank}", "labels": labels}}


def watches() -> tuple[GangPlans, GangRecords, GangPodRanks]:
    plans = GangPlans()
    return plans, GangRecords(None, None, plans), GangPodRanks(None, plans)


def test_a_rank_another_replica_admitted_makes_this_replicas_pod_of_it_a_replacement() -> None:
    plans, records, ranks = watches()
    records._replace([records._slim(record())])
    ranks._event("serving/chat-0-1", gang_pod(1, 0))  # admitted by the other replica
    other, plan = plans.stamp(*KEY, 0)
    assert other.born_released
    assert plan is not None
    assert list(plan.nodes) == ["n0", "n1"]
    replacement, _ = plans.stamp(*KEY, 1)
    assert (replacement.attempt, replacement.born_released) == (1, False)
    after, _ = plans.stamp(*KEY, 0)
    assert (after.attempt, after.born_released) == (1, False), "it joins the later attempt"


def test_a_deleted_pods_rank_stays_seen_and_a_deleted_record_forgets_its_gang() -> None:
    plans, records, ranks = watches()
    records._replace([records._slim(record())])
    ranks._replace([ranks._slim(gang_pod(0, 0))])
    ranks._event("serving/chat-0-0", None)  # the pod deleted
    assert plans.stamp(*KEY, 0)[0].attempt == 1, "its replacement is a later attempt"
    records._event("serving/chat-0", None)  # the record deleted (its LWS with it)
    again, plan = plans.stamp(*KEY, 0)
    assert plan is None
    assert (again.attempt, again.born_released) == (0, False), "a new gang of the same name"


def test_a_plan_that_is_not_planned_releases_nothing() -> None:
    plans, records, _ = watches()
    records._event("serving/chat-0", record("Waiting"))
    given, _ = plans.stamp(*KEY, 1)
    assert not given.born_released


def test_without_the_gang_crd_the_view_is_listed_empty_and_listed_again() -> None:
    class NoCrd:
        def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=404, reason="Not Found")

    plans = GangPlans()
    records = GangRecords(None, NoCrd(), plans)
    with pytest.raises(ApiException):
        records._list()  # raised: the watch loop lists again after its backoff
    assert records.synced.is_set(), "the webhook serves meanwhile"
    given, plan = plans.stamp(*KEY, 0)
    assert plan is None
    assert not given.born_released


# -- the JobSets' view ---------------------------------------------------------------------------


def jobset_object(workers: int) -> dict[str, Any]:
    """A JobSet as the API server lists it (the parts the layout does not read included)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"namespace": "train", "name": "pretrain", "uid": "u-1", "labels": {"a": "b"}},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
                        }
                    },
                }
            ],
        },
        "status": {"restarts": 0},
    }


def test_a_jobset_is_kept_as_its_replicated_jobs_and_follows_the_watch() -> None:
    layouts = JobSetLayouts(None, None)
    layouts._replace([layouts._slim(jobset_object(4))])
    assert layouts.jobset("train", "pretrain") == {
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}}
            ]
        }
    }, "only what the rank layout reads"
    layouts._event("train/pretrain", jobset_object(8))
    kept = layouts.jobset("train", "pretrain")
    assert kept is not None
    assert jobset_layout(kept, None) == {"workers/0": 0, "workers/1": 8, "": 16}
    layouts._event("train/pretrain", None)
    assert layouts.jobset("train", "pretrain") is None


@pytest.mark.parametrize("status", [404, 403])
def test_without_the_jobset_crd_or_the_right_to_list_it_the_webhook_still_serves(
    status: int,
) -> None:
    class NoJobSets:
        def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=status, reason="Not Found")

    layouts = JobSetLayouts(None, NoJobSets())
    with pytest.raises(ApiException):
        layouts._list()  # raised: the watch loop lists again after its backoff
    assert layouts.synced.is_set(), "the webhook serves meanwhile"
    assert layouts.jobset("train", "pretrain") is None


class OneJobSet:
    """The JobSets API as the webhook calls it: a list of the whole cluster (the watch) and a
    list of one by name (a miss); the JobSet is there only once ``created``."""

    def __init__(self) -> None:
        self.created: dict[str, Any] | None = None
        self.reads: list[str] = []
        self.fail: Exception | None = None

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(data=b'{"metadata": {"resourceVersion": "1"}, "items": []}')

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.reads.append(f"{args[2]}/{kwargs['field_selector']}")
        assert kwargs["_request_timeout"] <= 0.5, "an admission never waits long on it"
        if self.fail is not None:
            raise self.fail
        return {"items": [self.created] if self.created else []}


def test_a_jobset_the_watch_has_not_shown_is_read_once_by_name_and_kept() -> None:
    """JobSet makes its Jobs and their pods as soon as it sees the JobSet: a watch event late
    behind them would leave an InOrder JobSet's first pods unranked, its gang never whole."""
    api = OneJobSet()
    layouts = JobSetLayouts(None, api)
    layouts._list()
    api.created = jobset_object(4)
    kept = layouts.jobset("train", "pretrain")
    assert kept is not None
    assert jobset_layout(kept, None) == {"workers/0": 0, "workers/1": 4, "": 8}
    assert layouts.jobset("train", "pretrain") == kept
    assert api.reads == ["train/metadata.name=pretrain"], "read once, then kept"


def test_a_jobset_not_found_or_not_readable_leaves_its_pods_to_the_operator() -> None:
    api = OneJobSet()
    layouts = JobSetLayouts(None, api)
    layouts._list()
    assert layouts.jobset("train", "ghost") is None
    assert layouts.jobset("train", "ghost") is None
    assert len(api.reads) == 1, "a JobSet not found is not read again at once"
    layouts._event("train/ghost", {**jobset_object(2), "metadata": {"name": "ghost"}})
    assert layouts.jobset("train", "ghost") is not None, "the watch shows it later"
    api.fail = ApiException(status=500, reason="Internal Server Error")
    assert layouts.jobset("train", "slow") is None, "a failed read: the path without the view"


def test_without_the_jobset_crd_nothing_is_read_on_a_miss() -> None:
    class NoJobSets(OneJobSet):
        def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiException(status=404, reason="Not Found")

    api = NoJobSets()
    layouts = JobSetLayouts(None, api)
    with pytest.raises(ApiException):
        layouts._list()
    assert layouts.jobset("train", "pretrain") is None
    assert api.reads == [], "no CRD, or no right to list it: no read per admission"


def test_a_gang_view_never_started_knows_no_jobset() -> None:
    assert GangPlans().jobset("train", "pretrain") is None


def test_the_pod_watch_notes_a_jobset_pods_restart_count() -> None:
    plans, records, ranks = watches()
    records._replace([records._slim(record())])
    restarted = gang_pod(0, 0)
    restarted["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = "0"
    ranks._event("serving/chat-0-0", restarted)
    assert plans.stamp(*KEY, 1, 0)[0].attempt == 0, "the same restart: attempt 0"
    assert plans.stamp(*KEY, 2, 1)[0].attempt == 1, "JobSet restarted: the next attempt"
