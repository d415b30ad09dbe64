"""``status.placement`` and the status words the placer and the operator share: one reader, one
writer.

The placer owns ``status.placement`` (a gang's plan, or why it waits); the operator and the CLI
read it; the placer reads a few words the operator writes (``WorkersCreated`` ``False`` with
``CreateFailed``, ``Surge``, a Gang's ``problems``, the job's ``phase`` and ``attempt``). Every
key of those is named here and nowhere else, so renaming a field or a reason is one change that
either side sees.

Reading is tolerant: :func:`read_placement` returns a :class:`StoredPlacement`, the typed
:class:`~tpfabric_core.api.models.Placement` of what is stored, with unknown fields ignored and a
field that cannot be read left at its default (an item of a list alone when only it is bad), so
that a status written by another version never hides a job from the placer. A ``null`` reads as
absent (a merge patch's ``null`` deletes the key). Writing is a set of builders that return the
placement as the API server stores it (camelCase keys, ``None`` where a merge patch must delete
a field) and :func:`prepare_write`, the rules every write of it follows: what a write carries
over from the placement it replaces, when it is worth sending, and the compare-and-swap test
that keeps a deposed placer from overwriting its successor. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pydantic import ConfigDict, PrivateAttr, ValidationError

from tpfabric_core.api.models import HealthyRoom, Placement, RefusedNode
from tpfabric_core.input_limits import whole_number
from tpfabric_core.timestamps import parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from tpfabric_core.placement.results import GangPlan, Unschedulable

__all__ = [
    "CREATE_FAILED",
    "INVALID",
    "MAX_REASONS",
    "NO_PLACEMENT",
    "PLANNED",
    "REFUSAL_SECONDS",
    "REPLANNING",
    "SURGE",
    "WAITING",
    "WORKERS_CREATED",
    "PlacementWrite",
    "StoredPlacement",
    "create_refused",
    "finished",
    "gang_problems",
    "healthy_room",
    "invalid",
    "meaning_changed",
    "partner_waiting",
    "placement_of_status",
    "planned",
    "prepare_drop",
    "prepare_write",
    "ranks_moved",
    "read_placement",
    "refusal",
    "replanning",
    "status_attempt",
    "stored_status",
    "surge",
    "waiting",
    "waiting_message",
    "with_gang_problems",
    "with_healthy_room",
]

#: ``state``: the gang has a plan and its pods were released
PLANNED: Final = "Planned"
#: ``state``: no domain can take the whole gang yet
WAITING: Final = "Waiting"
#: ``state``: the plan was dropped; the gang is made again and planned afresh
REPLANNING: Final = "Replanning"
#: ``state``: the job can never be planned as written
INVALID: Final = "Invalid"

#: the operator's condition on a job's workers; ``False`` with :data:`CREATE_FAILED` when the API
#: server refused to create one (a quota, an admission policy)
WORKERS_CREATED: Final = "WorkersCreated"
CREATE_FAILED: Final = "CreateFailed"
#: the operator's condition on a Gang record that is a rolling update's extra group
SURGE: Final = "Surge"

#: candidate domains listed while a job waits; the rest are counted in the message
MAX_REASONS: Final = 5
#: a refusal by kube-scheduler's own filters (``refusedNodes``) lasts this long: what refused
#: (another tenant's pod, a volume) may change
REFUSAL_SECONDS: Final = 600.0

#: the level of a plan over the whole cluster: the engine's ``CLUSTER_LEVEL``, named again here
#: so that reading a status never imports the engine (a test holds the two equal)
CLUSTER_LEVEL: Final = "cluster"
#: what a write compares to decide whether the stored placement's meaning changes (a time alone,
#: a plan's hops or its term never do)
_MEANING: Final = (
    "state",
    "message",
    "reasons",
    "waitingSince",
    "nodes",
    "domainLabels",
    "refusedNodes",
    "healthyRoom",
)


class StoredPlacement(Placement):
    """``status.placement`` as stored (or as the placer just wrote it), typed; read it with
    :func:`read_placement`. Every field is the :class:`Placement` model's; what is computed from
    them is a property here."""

    model_config = ConfigDict(frozen=True)

    #: the mapping as read (what a write compares its meaning with, and tests its term against)
    _raw: Mapping[str, Any] = PrivateAttr(default_factory=dict)
    #: the fields (or list items, ``refusedNodes[2]``) that could not be read and were ignored
    _ignored: tuple[str, ...] = PrivateAttr(default=())

    @property
    def raw(self) -> Mapping[str, Any]:
        """Return the mapping this placement was read from."""
        return self._raw

    @property
    def ignored(self) -> tuple[str, ...]:
        """Return the fields that could not be read (each ignored, for a log line)."""
        return self._ignored

    @property
    def present(self) -> bool:
        """Return whether the status holds a placement at all (a dropped one holds none)."""
        return bool(self._raw)

    @property
    def planned(self) -> bool:
        """Return whether the gang has a plan."""
        return self.state == PLANNED

    @property
    def waiting(self) -> bool:
        """Return whether the gang waits for a domain."""
        return self.state == WAITING

    @property
    def replanning(self) -> bool:
        """Return whether the gang's plan was dropped for a new one."""
        return self.state == REPLANNING

    @property
    def waiting_since_time(self) -> float | None:
        """Return when the gang first waited (``waitingSince``), in epoch seconds."""
        return parse_rfc3339(self.waiting_since)

    @property
    def planned_at_time(self) -> float | None:
        """Return when the plan was made (``plannedAt``), in epoch seconds."""
        return parse_rfc3339(self.planned_at)

    @property
    def released_time(self) -> float | None:
        """Return when the plan's pods were last released (``releasedAt``, else ``plannedAt``),
        in epoch seconds."""
        return parse_rfc3339(self.released_at or self.planned_at)

    @property
    def last_nodes(self) -> tuple[str, ...]:
        """Return the nodes of the gang's plan, or of its last plan while it has none
        (``previousNodes``)."""
        return tuple(n for n in self.nodes or self.previous_nodes if n)

    @property
    def plan_level(self) -> str | None:
        """Return the level whose one domain holds the whole planned gang: ``node`` when it is
        on one node, else the plan's level (``cluster`` when it spans the top); None without a
        plan."""
        nodes = [node for node in self.nodes if node]
        if not nodes:
            return None
        if len(set(nodes)) == 1:
            return "node"
        return self.level or CLUSTER_LEVEL

    def domain_labels_or_level(
        self, level_key: Callable[[str], str | None]
    ) -> dict[str, str] | None:
        """Return the planned domain as node labels, every level's from the top down
        (``domainLabels``); empty for a plan over the whole cluster. A plan persisted before
        ``domainLabels`` existed names its level's label only: ``level_key`` gives that label's
        key (None when it is not known, and then so is the domain)."""
        if self.level == CLUSTER_LEVEL:
            return {}
        if self.domain_labels:
            return dict(self.domain_labels)
        key = level_key(self.level) if self.level else None
        if key is None or not self.domain:
            return None
        return {key: self.domain}

    def live_refusals(self, now: float) -> list[RefusedNode]:
        """Return the refusals of kube-scheduler's own filters (``refusedNodes``) that have not
        expired at ``now`` (:data:`REFUSAL_SECONDS`)."""
        kept = []
        for item in self.refused_nodes:
            since = parse_rfc3339(item.since)
            if since is not None and now - since < REFUSAL_SECONDS and item.node:
                kept.append(item)
        return kept

    def refusals(self, now: float) -> list[dict[str, str]]:
        """Return the live refusals (:meth:`live_refusals`) as written."""
        return [refusal(r.node, r.reason, r.since) for r in self.live_refusals(now)]

    def with_waiting_since(self, since: float) -> StoredPlacement:
        """Return this placement as if its gang had waited since ``since`` (read, never
        written: what a plan made afresh keeps of the gang's first wait)."""
        return read_placement({**self._raw, "waitingSince": rfc3339(since)})


def read_placement(raw: object) -> StoredPlacement:
    """Return the typed placement of ``raw`` (a stored ``status.placement``; None or anything
    that is not a mapping reads as no placement). Never raises."""
    if isinstance(raw, StoredPlacement):
        return raw
    if not isinstance(raw, Mapping) or not raw:
        return NO_PLACEMENT
    data: dict[str, Any] = {k: v for k, v in raw.items() if isinstance(k, str) and v is not None}
    ignored: list[str] = []
    placement = None
    for _ in range(len(data) + 1):  # each round ignores at least one field or item
        try:
            placement = StoredPlacement.model_validate(data)
            break
        except ValidationError as err:
            data = _without_unreadable(data, err, ignored)
    if placement is None:
        placement = StoredPlacement()
    # set once, here, on the copy just made (a private attribute: the model stays frozen)
    placement._raw = dict(raw)
    placement._ignored = tuple(ignored)
    return placement


def placement_of_status(status: object) -> StoredPlacement:
    """Return the typed ``placement`` of a job's or Gang record's ``status``."""
    return read_placement(status.get("placement") if isinstance(status, Mapping) else None)


def _without_unreadable(
    data: dict[str, Any], err: ValidationError, ignored: list[str]
) -> dict[str, Any]:
    """Return ``data`` without what ``err`` found unreadable: a list's bad items, else the bad
    field (noted in ``ignored``)."""
    bad_items: dict[str, set[int]] = {}
    bad_fields: set[str] = set()
    for error in err.errors():
        loc = error["loc"]
        field = str(loc[0]) if loc else ""
        if len(loc) >= 2 and isinstance(loc[1], int) and isinstance(data.get(field), list):
            bad_items.setdefault(field, set()).add(loc[1])
        else:
            bad_fields.add(field)
    kept = {k: v for k, v in data.items() if k not in bad_fields}
    for field, items in bad_items.items():
        if field in kept:
            kept[field] = [v for i, v in enumerate(kept[field]) if i not in items]
            ignored.extend(f"{field}[{i}]" for i in sorted(items))
    ignored.extend(sorted(bad_fields))
    if kept == data:  # nothing to drop by location: give up on every field named
        return {}
    return kept


#: the placement of a job that has none
NO_PLACEMENT: Final = StoredPlacement()


# -- the status words of the operator that the placer reads ------------------------------------


def create_refused(status: Mapping[str, Any]) -> str:
    """Return why the API server refused to create a worker of the job whose ``status`` this is
    (its ``WorkersCreated`` condition, ``False`` with reason ``CreateFailed``: a quota, an
    admission policy), or ""."""
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == WORKERS_CREATED
            and condition.get("status") == "False"
            and condition.get("reason") == CREATE_FAILED
        ):
            return str(condition.get("message") or CREATE_FAILED)
    return ""


def surge(status: Mapping[str, Any]) -> bool:
    """Return whether the operator marks a Gang record a rolling update's surge group
    (condition ``Surge`` ``True``)."""
    return any(
        isinstance(c, Mapping) and c.get("type") == SURGE and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def with_gang_problems(status: Mapping[str, Any], problems: Iterable[str]) -> dict[str, Any]:
    """Return ``status`` (the part of a Gang record's status the operator writes) with what the
    operator found wrong with the record's pods, as :func:`gang_problems` reads it."""
    return {**status, "problems": list(problems)}


def gang_problems(status: Mapping[str, Any]) -> tuple[str, ...]:
    """Return what the operator found wrong with a Gang record's pods (``status.problems``:
    two owners, one rank twice...)."""
    problems = status.get("problems") or ()
    return tuple(str(p) for p in problems) if isinstance(problems, list | tuple) else ()


def finished(status: Mapping[str, Any]) -> bool:
    """Return whether the job has finished (``phase`` ``Succeeded`` or ``Failed``)."""
    return status.get("phase") in ("Succeeded", "Failed")


def status_attempt(status: Mapping[str, Any]) -> int:
    """Return the job's current attempt (``status.attempt``; 0 when absent or unreadable)."""
    value = status.get("attempt")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return whole_number(value) or 0


# -- builders: the placement as written -----------------------------------------------------


def planned(
    plan: GangPlan,
    now: float,
    attempt: int | None = None,
    waiting_since: float | None = None,
    *,
    near: str | None = None,
) -> dict[str, Any]:
    """Return the placement of a fresh plan (released at once after it is persisted) for the
    worker pods of ``attempt`` (None: pods without the attempt label).

    ``waiting_since``: when the gang began waiting for this plan; kept, so that a plan dropped
    before the gang ever ran whole (its nodes taken, a worker that never bound) does not
    restart the gang's wait (head of line and ``maxWaitSeconds`` count from the first wait).
    ``near``: how the plan stands to the gang it asked to be near (said only when it asked).
    """
    placement: dict[str, Any] = {
        "state": PLANNED,
        "message": plan.explain().splitlines()[0],
        "level": plan.level,
        "domain": plan.domain,
        "domainLabels": dict(plan.domain_labels),
        "nodes": list(plan.nodes_by_rank),
        "hops": plan.hops,
        "modelledAllreduceUs": round(plan.cost.best_s * 1e6, 3),
        "plannedAt": rfc3339(now),
        "releasedAt": rfc3339(now),
        "attempt": attempt,
        "waitingSince": rfc3339(waiting_since) if waiting_since is not None else None,
        "replacedRanks": None,
        "previousNodes": None,
        "healthyRoom": None,
        "reasons": [
            {"level": plan.level, "domain": plan.domain, "reason": r}
            for r in plan.reasons[: MAX_REASONS * 2]
        ],
    }
    if near is not None:
        placement["near"] = near
    return placement


def stored_status(placement: Placement) -> dict[str, Any]:
    """Return the status field a whole ``placement``, typed, is stored as (camelCase keys,
    fields at their defaults left out): what a fake API server or a benchmark's fixture
    serves."""
    return {"placement": placement.model_dump(by_alias=True, exclude_defaults=True)}


def _unplanned(state: str, message: str, **fields: Any) -> dict[str, Any]:
    """Return a placement without a plan: every plan field cleared (a merge patch removes them)."""
    return {
        "state": state,
        "message": message,
        "level": None,
        "domain": None,
        "domainLabels": None,
        "nodes": [],
        "hops": None,
        "modelledAllreduceUs": None,
        "plannedAt": None,
        "releasedAt": None,
        "attempt": None,
        "replacedRanks": None,
        "waitingSince": None,
        "near": None,
        "healthyRoom": None,
        "reasons": [],
        **fields,
    }


def partner_waiting(message: str, waiting_since: float) -> dict[str, Any]:
    """Return the placement of a gang that waits for its ``near`` partner to be placed."""
    return _unplanned(WAITING, message, waitingSince=rfc3339(waiting_since), reasons=[])


def waiting_message(result: Unschedulable) -> str:
    """Return what a waiting gang's message says of ``result``: its summary, and how many of
    the candidate domains the reasons show when they do not show all."""
    shown, more = result.top_candidates(MAX_REASONS)
    message = result.summary
    if more:
        message += f" ({len(shown)} of {len(shown) + more} {result.level} domains in reasons)"
    return message


def waiting(
    result: Unschedulable, waiting_since: float, message: str | None = None
) -> dict[str, Any]:
    """Return the placement of a gang that waits: the best few domains and why they fall short
    (``message``: the words, default :func:`waiting_message`)."""
    shown, _ = result.top_candidates(MAX_REASONS)
    return _unplanned(
        WAITING,
        waiting_message(result) if message is None else message,
        waitingSince=rfc3339(waiting_since),
        reasons=[{"level": c.level, "domain": c.domain, "reason": str(c)} for c in shown],
    )


def replanning(
    why: str,
    now: float,
    waiting_since: float | None = None,
    refused: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Return the placement of a plan dropped because it can no longer be honoured; the gang
    waits since ``waiting_since`` (its first wait, when the plan never ran), else since now.
    ``refused``: every refusal the next plans keep off (see :func:`refusal`), when the drop
    records new ones."""
    placement = _unplanned(
        REPLANNING, why, waitingSince=rfc3339(now if waiting_since is None else waiting_since)
    )
    if refused:
        placement["refusedNodes"] = refused
    return placement


def invalid(message: str) -> dict[str, Any]:
    """Return the placement of a job the placer can never plan as written (e.g. unknown level)."""
    return _unplanned(INVALID, message)


def refusal(node: str, reason: str, since: str) -> dict[str, str]:
    """Return one ``refusedNodes`` item: ``node`` refused by kube-scheduler's own filters, in
    its words, since ``since`` (RFC 3339)."""
    return {"node": node, "reason": reason, "since": since}


def ranks_moved(
    previous: StoredPlacement,
    plan: GangPlan,
    replaced_ranks: Mapping[str, str],
    notes: Iterable[str],
    now: float,
) -> dict[str, Any]:
    """Return ``previous`` with some ranks on new nodes (``plan``, every other rank where it
    was), the pods they were moved for (``replaced_ranks``: rank -> pod uid) and the moves said
    in its message (``notes``, e.g. ``rank 2 -> n7``), released again at ``now``."""
    message = str(previous.raw.get("message") or "").split(" [replaced:")[0]
    return {
        **previous.raw,
        "nodes": list(plan.nodes_by_rank),
        "hops": plan.hops,
        "modelledAllreduceUs": round(plan.cost.best_s * 1e6, 3),
        "replacedRanks": dict(replaced_ranks),
        "releasedAt": rfc3339(now),
        "message": f"{message} [replaced: {', '.join(notes)}]",
    }


def healthy_room(found: bool, degraded: Iterable[str], message: str, now: float) -> HealthyRoom:
    """Return ``healthyRoom``: whether the running gang has room off its ``degraded`` nodes,
    why, and since when."""
    return HealthyRoom(
        found=found, degraded_nodes=sorted(degraded), message=message, since=rfc3339(now)
    )


def with_healthy_room(previous: StoredPlacement, room: HealthyRoom | None) -> dict[str, Any]:
    """Return ``previous`` with its ``healthyRoom`` answer replaced (None clears it)."""
    return {**previous.raw, "healthyRoom": room.model_dump(by_alias=True) if room else None}


# -- the rules of every write ---------------------------------------------------------------


def meaning_changed(previous: StoredPlacement, placement: Mapping[str, Any]) -> bool:
    """Return whether writing ``placement`` would change what ``previous`` means (a waiting
    job's status is quiet while nothing it says changes)."""
    stored = previous.raw
    return any((stored.get(key) or None) != (placement.get(key) or None) for key in _MEANING)


@dataclass(frozen=True, slots=True)
class PlacementWrite:
    """One write of ``status.placement``, prepared (see :func:`prepare_write`)."""

    #: the placement as written, with what it carries over and its term
    placement: dict[str, Any]
    #: the patch of ``status`` that writes it
    patch: dict[str, Any]
    #: the JSON patch ``test`` the write is sent behind: the placement it was computed from
    test: dict[str, Any]
    #: whether the write is worth sending (False: it would change no meaning)
    send: bool = True

    @property
    def written(self) -> StoredPlacement:
        """Return the placement as the status holds it once written."""
        return read_placement(self.placement)


def prepare_write(
    previous: StoredPlacement, placement: Mapping[str, Any], *, now: float, term: int
) -> PlacementWrite:
    """Return the write of ``placement`` over ``previous`` by the placer of lease ``term``.

    A refusal by kube-scheduler lasts its time across plans, waits and re-plans (unless the
    placement says its own ``refusedNodes``); where the gang ran last lasts until it is planned
    again (the next plan prefers it); the placement records its writer's term. A write is sent
    when its meaning changes, and a plan always (its times and attempt matter to the operator).
    ``domainLabels`` replace the old ones (a merge patch merges maps: the old keys are deleted).
    """
    written = dict(placement)
    if "refusedNodes" not in written:
        written["refusedNodes"] = previous.refusals(now) or None
    if "previousNodes" not in written and written.get("state") != PLANNED:
        written["previousNodes"] = list(previous.last_nodes) or None
    written["term"] = term
    patch = dict(written)
    labels = written.get("domainLabels")
    if isinstance(labels, dict):
        stale = previous.domain_labels
        patch["domainLabels"] = {**dict.fromkeys(k for k in stale if k not in labels), **labels}
    send = meaning_changed(previous, written) or written.get("state") == PLANNED
    return PlacementWrite(written, {"placement": patch}, _computed_from(previous), send)


def prepare_drop(previous: StoredPlacement) -> PlacementWrite:
    """Return the write that removes ``previous`` (a suspended job's plan) behind the same
    compare-and-swap test as every other write of the placement."""
    return PlacementWrite({}, {"placement": None}, _computed_from(previous))


def _computed_from(previous: StoredPlacement) -> dict[str, Any]:
    """Return the JSON patch ``test`` that the job's placement is still the one a write was
    computed from: its term (the lease term of the placer that wrote it), or no placement at
    all. A placer deposed meanwhile finds the new leader's term there and writes nothing."""
    if not previous.present:
        return {"op": "test", "path": "/status/placement", "value": None}
    return {"op": "test", "path": "/status/placement/term", "value": previous.raw.get("term")}
