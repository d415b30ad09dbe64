"""The gang webhook's view of the gangs: each gang's plan and the ranks seen per attempt.

A gang pod admitted after its gang's plan, for the attempt the plan was made for, is created
released onto its planned node (:mod:`tpfabric_core.gang_attempts` says which pods qualify,
:mod:`tpfabric_core.placement.born_released` writes the release): one write instead of a create
and the placer's release patch. The webhook answers in milliseconds and never reads the API
server per admission, so two list+watches keep what that needs, as the node view does
(:class:`.node_offers.NodeOffers`):

- :class:`GangRecords`: every Gang record's ``status.placement`` (the plan);
- :class:`GangPodRanks`: every gang pod's (attempt, rank), so that a replacement is told from a
  pod of the plan whichever webhook replica admitted the pod it replaces;
- :class:`.jobsets.JobSetLayouts`: every JobSet's replicated Jobs, which rank a JobSet's pod at
  its admission (its pods do not carry their rank, as a LeaderWorkerSet's do).

The first two feed one :class:`GangPlans`, which also notes each pod it stamps at once (its own
replica's admissions never wait on the watch). What it forgets (a pod deleted while the webhook
was down) can only make a replacement look like a pod of the plan: the placer's bind bound drops
it if its planned node cannot take it (:mod:`tpfabric_core.gang_attempts`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.api import ATTEMPT_LABEL, GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.api.placement import StoredPlacement, placement_of_status
from tpfabric_core.gang_attempts import GangHistory, Stamp, stamp
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.input_limits import whole_number
from tpfabric_core.jobset_ranks import jobset_restarts
from tpfabric_operator.pod_watch import PodWatch
from tpfabric_operator.webhook.jobsets import JobSetLayouts

__all__ = ["GangPlans", "GangPodRanks", "GangRecords"]

log = logging.getLogger("tpfabric.webhook")
_NOT_FOUND = 404

GangKey = tuple[str, str]  # (namespace, gang record's name)
#: gangs remembered at most (their records' deletions forget them sooner)
MEMORY_LIMIT = 100_000


class GangPlans:
    """Each gang's plan and history, as the two watches show them; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[GangKey, StoredPlacement] = {}
        self._histories: dict[GangKey, GangHistory] = {}
        self.watches: tuple[PodWatch, ...] = ()
        #: the JobSets' view (None: not started; no JobSet pod is ranked at admission)
        self.jobsets: JobSetLayouts | None = None

    def start(self, core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
        """Start the three watches."""
        self.jobsets = JobSetLayouts(core, custom)
        self.watches = (GangRecords(core, custom, self), GangPodRanks(core, self), self.jobsets)
        for watch in self.watches:
            watch.start()

    def synced(self) -> bool:
        """Return whether every watch has listed once."""
        return all(w.synced.is_set() for w in self.watches)

    def jobset(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Return the JobSet's replicated Jobs as the watch keeps them (None: not seen)."""
        return self.jobsets.jobset(namespace, name) if self.jobsets is not None else None

    def stamp(
        self, namespace: str, gang: str, rank: int, restart: int | None = None
    ) -> tuple[Stamp, StoredPlacement | None]:
        """Return the stamp of the gang's pod of ``rank`` admitted now and the gang's plan, and
        note the pod as seen (``restart``: its owner's restart count, where it has one)."""
        key = (namespace, gang)
        with self._lock:
            history = self._history(key)
            plan = self._plans.get(key)
            answer = stamp(rank, history, plan, restart)
            history.saw(answer.attempt, rank, restart)
        return answer, plan

    # -- what the watches bring -------------------------------------------------------------------

    def plan(self, key: GangKey, placement: StoredPlacement | None) -> None:
        """Keep the gang's plan (None: its record is gone, and so is what was seen of it)."""
        with self._lock:
            if placement is None:
                self._plans.pop(key, None)
                self._histories.pop(key, None)
            else:
                self._plans[key] = placement

    def plans(self, entries: list[tuple[GangKey, StoredPlacement]]) -> None:
        """Replace every plan with ``entries`` (a list); what was seen of the pods is kept."""
        with self._lock:
            self._plans = dict(entries)

    def saw(self, key: GangKey, attempt: int, rank: int, restart: int | None = None) -> None:
        """Note a pod of ``rank`` in ``attempt`` (a watch showed it)."""
        with self._lock:
            self._history(key).saw(attempt, rank, restart)

    def _history(self, key: GangKey) -> GangHistory:
        history = self._histories.get(key)
        if history is None:
            if len(self._histories) >= MEMORY_LIMIT:
                self._histories.clear()
            history = self._histories[key] = GangHistory()
        return history


class GangRecords(PodWatch):
    """Every Gang record's plan, kept in a :class:`GangPlans`."""

    def __init__(
        self, core: client.CoreV1Api, custom: client.CustomObjectsApi, plans: GangPlans
    ) -> None:
        super().__init__(core, "", "gang-plans")
        self.custom = custom
        self.book = plans

    def _call(self, **kwargs: Any) -> Any:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, GANG_PLURAL, **kwargs)

    def _list(self) -> str:
        """List the records; without the Gang CRD there are none (the webhook serves, and no
        pod is born released), and the list is tried again until the CRD is there."""
        try:
            return super()._list()
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            if not self.synced.is_set():
                log.warning(
                    "no Gang CRD (gangs.%s): no gang pod is born released until it is", GROUP
                )
                self._replace([])
                self.synced.set()
            raise

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        return f"{key[0]}/{key[1]}", (key, placement_of_status(obj.get("status")))

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        self.book.plans([entry for _, entry in entries])

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        namespace, _, name = key.partition("/")
        self.book.plan((namespace, name), None if obj is None else self._slim(obj)[1][1])


class GangPodRanks(PodWatch):
    """Every gang pod's (attempt, rank, owner's restart count), noted in a :class:`GangPlans`
    (pods never forget: a deleted pod's rank stays seen, which is what tells its replacement)."""

    def __init__(self, core: client.CoreV1Api, plans: GangPlans) -> None:
        super().__init__(core, f"{GANG_LABEL},{ATTEMPT_LABEL}", "gang-pod-ranks")
        self.book = plans

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        attempt = whole_number(labels.get(ATTEMPT_LABEL))
        rank = whole_number(labels.get(RANK_LABEL))
        key = (str(meta.get("namespace") or ""), str(labels.get(GANG_LABEL) or ""))
        restart = jobset_restarts(labels)
        seen = None if attempt is None or rank is None else (key, attempt, rank, restart)
        return f"{key[0]}/{meta.get('name')}", seen

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        for _, seen in entries:
            if seen is not None:
                self.book.saw(*seen)

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is not None and (seen := self._slim(obj)[1]) is not None:
            self.book.saw(*seen)
