"""Which attempt a gang pod of another controller belongs to, told at its admission. Pure.

A TensorParallelJob's workers carry the attempt the operator made them for
(``tpfabric.io/attempt``): the placer plans the gang from its first worker, and a worker created
later for the planned attempt is born released onto the plan, while a worker of a later attempt
(a replacement) comes gated and is checked first. Another controller's pods carry no such
number, and none of their owners writes one a webhook could copy: a LeaderWorkerSet group made
again, or one worker its StatefulSet makes again, has the same name, labels and template
revision as the pod it replaces. So the gang webhook numbers them itself, from what it has seen
of the gang (:class:`GangHistory`: the ranks seen per attempt, from its watch of the gang's
pods and from its own admissions) and the gang's plan (its Gang record):

- a pod whose rank has not been seen in the gang's current attempt belongs to it;
- a pod whose rank has been seen in the current attempt is a replacement: it begins the next
  attempt, which the pods of the other ranks that follow it join;
- where the owner counts its own restarts on its pods (a JobSet's ``restart-attempt``, which
  goes up each time JobSet deletes and makes all its Jobs again), a pod whose count is higher
  than the current attempt's pods carried begins the next attempt too, even when its rank was
  not seen yet (a restart before every pod of the attempt was created);
- a pod of the attempt a plan was made for, admitted after the plan, is born released onto its
  rank's planned node (:func:`stamp`); any other pod comes gated, and the placer checks it
  (a replacement returns to its planned node while that node holds it, else it moves).

Which pods are numbered at all (:func:`numbered_rank`): those whose rank is known at admission
and whose owner makes again whatever the placer deletes (a plan dropped at its bind bound, its
node taken, deletes the gang's pods and relies on their owner to make them again, gated). Such a
gang is planned from its first pods. The others carry no attempt and are planned once every pod
exists:

- a LeaderWorkerSet group's pods: numbered (size, group and worker index on every pod);
- a pod group's (``tpfabric.io/gang-name``, Kueue's pod-group labels, a Workload API PodGroup):
  numbered when the pod has a controller (an owner reference with ``controller: true``: a Job,
  a ReplicaSet...) and its own rank (``tpfabric.io/rank``, or an Indexed Job's completion
  index); a bare pod is not (deleted with a dropped plan, it would not come back), nor a pod
  ranked by the order of creation (its rank is only known once the gang is whole);
- a JobSet's: its rank follows from its JobSet's Jobs, which the pod does not carry, so
  :func:`numbered_rank` alone says None; the gang webhook ranks it from its own watch of the
  JobSets (:mod:`tpfabric_core.jobset_ranks`) and numbers it with that rank.

A pod is only ever mistaken in one direction when the webhook forgets (a restarted webhook
whose watch no longer shows a pod deleted meanwhile): a replacement born onto its planned node,
which the placer's bind bound drops if that node cannot take it. Never is a pod of the plan
kept gated for want of memory past the placer's own release.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tpfabric_core.api.placement import StoredPlacement
from tpfabric_core.gangs import GangMember

__all__ = ["GangHistory", "Stamp", "numbered_rank", "stamp"]


def numbered_rank(member: GangMember) -> int | None:
    """Return the rank a gang pod is numbered by (its attempt, and born released onto its
    gang's plan when that plan was made for its attempt), or None when it is not numbered: its
    gang is planned once every pod exists (the rules above)."""
    if member.rank is None:
        return None
    if member.kind == "LeaderWorkerSet":
        return member.rank if member.size is not None else None
    if member.kind in ("PodGroup", "WorkloadPodGroup"):
        return member.rank if member.controlled else None
    return None


@dataclass(slots=True)
class GangHistory:
    """The ranks seen of one gang, per attempt: the newest two attempts only (older ones can
    no longer decide anything)."""

    ranks: dict[int, set[int]] = field(default_factory=dict)
    #: the highest restart count of its owner each attempt's pods carried (where it counts one)
    restarts: dict[int, int] = field(default_factory=dict)

    @property
    def current(self) -> int | None:
        """Return the newest attempt seen (None: no pod seen)."""
        return max(self.ranks, default=None)

    def saw(self, attempt: int, rank: int, restart: int | None = None) -> None:
        """Note a pod of ``rank`` in ``attempt`` (``restart``: its owner's restart count, None
        where the owner counts none)."""
        self.ranks.setdefault(attempt, set()).add(rank)
        if restart is not None:
            self.restarts[attempt] = max(restart, self.restarts.get(attempt, restart))
        for old in sorted(self.ranks)[:-2]:
            del self.ranks[old]
            self.restarts.pop(old, None)

    def seen(self, attempt: int, rank: int) -> bool:
        """Return whether a pod of ``rank`` was seen in ``attempt``."""
        return rank in self.ranks.get(attempt, ())

    @classmethod
    def of(cls, pods: Iterable[tuple[int, int]]) -> GangHistory:
        """Return the history of pods given as (attempt, rank)."""
        history = cls()
        for attempt, rank in pods:
            history.saw(attempt, rank)
        return history


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the webhook writes on a gang pod: its attempt, and whether it is born released."""

    attempt: int
    #: the plan covers the pod's attempt and rank: it is created released onto it
    born_released: bool


def stamp(
    rank: int, history: GangHistory, plan: StoredPlacement | None, restart: int | None = None
) -> Stamp:
    """Return the attempt of the gang's pod of ``rank`` admitted now, and whether ``plan`` (the
    gang record's placement; None: no record yet) releases it at once.

    The gang's current attempt is the newest seen, or the plan's when that is newer (a webhook
    that has seen nothing of a gang the placer planned), or 0. A rank already seen in it, or an
    owner's restart count (``restart``) above the one its pods carried, makes the pod one of
    the next attempt.
    """
    planned = plan is not None and plan.planned and plan.attempt is not None
    plan_attempt = plan.attempt if planned and plan is not None else None
    current = max(
        (a for a in (history.current, plan_attempt) if a is not None),
        default=0,
    )
    carried = history.restarts.get(current)
    restarted = restart is not None and carried is not None and restart > carried
    attempt = current + 1 if history.seen(current, rank) or restarted else current
    return Stamp(attempt, born_released=plan_attempt is not None and attempt == plan_attempt)
