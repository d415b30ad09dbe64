"""Serving groups through their life: readiness, degraded links, rollouts. Pure.

A LeaderWorkerSet group serves for weeks and is rolled; its Gang record shows, beside the
placer's plan, what a person running the fleet asks of it (:func:`record_life` decides them all
in one sync):

- **Ready**: True only when every pod of the group exists and is Ready (the leader and each
  worker), as LWS itself counts a group ready (``getReplicaStates``: the leader pod and the
  worker StatefulSet both ready);
- **Degraded**: a node under the group carries the fabric agent's ``degraded`` health, named
  with the rank and the agent's reasons (a straggler risk for every request the group serves);
- **Surge**: the group is one of the extra groups LWS adds during a rolling update
  (``maxSurge``): its group index is at or above the LWS's replicas, and LWS deletes it when the
  update ends, so while no domain has room it waits (never placed in part) and the rollout goes
  on replacing groups in place;
- **Moving**: with ``tpfabric.io/on-degraded-link: restart-elsewhere`` (on the LWS or its pod
  templates, as TPJ's ``onDegradedLink``), a degraded, ready group is moved at the next safe
  point: one group of an LWS at a time, and only while the LWS's other not-ready groups leave
  room under its ``maxUnavailable``. Moving deletes the group's leader pod: LWS makes the whole
  group again and the placer plans it away from the degraded node.

Decided: only LeaderWorkerSet groups are moved (their owner makes a deleted group again, whole);
a JobSet or a plain pod group on a degraded node is reported, not moved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api.placement import SURGE, placement_of_status
from tpfabric_core.gangs import LWS_GROUP_INDEX, ON_DEGRADED_ANNOTATION
from tpfabric_core.input_limits import whole_number
from tpfabric_core.rdma_default import rdma_condition
from tpfabric_core.timestamps import rfc3339
from tpfabric_operator.fabric_health import RankOnDegradedNode, room_elsewhere, straggler_message
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.gangs.waits import pods_created

__all__ = [
    "LwsView",
    "Move",
    "Moving",
    "RecordLife",
    "Unready",
    "condition",
    "group_ready",
    "lws_view",
    "merge_conditions",
    "move_decision",
    "others_unready",
    "record_life",
    "surge_message",
]

#: how long a move is taken to be under way (the group is made again, planned, bound and ready)
MOVE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class LwsView:
    """What the operator reads of a LeaderWorkerSet for its groups."""

    name: str
    replicas: int
    max_unavailable: int
    max_surge: int
    on_degraded_link: str  # "report" (default) or "restart-elsewhere"


def _scaled(value: Any, total: int, *, round_up: bool) -> int:
    """Return an ``IntOrString`` as LWS scales it (``GetScaledValueFromIntOrPercent``)."""
    if isinstance(value, int):
        return value
    text = str(value or "0").strip()
    percent = whole_number(text[:-1]) if text.endswith("%") else None
    if percent is not None:
        share = percent * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return whole_number(text) or 0


def lws_view(lws: Mapping[str, Any]) -> LwsView:
    """Return what a LeaderWorkerSet object says of its groups (LWS's defaults where unset:
    ``maxUnavailable`` 1, ``maxSurge`` 0)."""
    meta = lws.get("metadata") or {}
    spec = lws.get("spec") or {}
    given = spec.get("replicas")
    replicas = given if isinstance(given, int) else 1
    rolling = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    unavailable = _scaled(rolling.get("maxUnavailable", 1), replicas, round_up=False)
    surge = min(_scaled(rolling.get("maxSurge", 0), replicas, round_up=True), replicas)
    template = spec.get("leaderWorkerTemplate") or {}
    asked = str((meta.get("annotations") or {}).get(ON_DEGRADED_ANNOTATION) or "")
    for part in ("leaderTemplate", "workerTemplate"):
        annotations = ((template.get(part) or {}).get("metadata") or {}).get("annotations") or {}
        asked = asked or str(annotations.get(ON_DEGRADED_ANNOTATION) or "")
    return LwsView(
        name=str(meta.get("name") or ""),
        replicas=replicas,
        max_unavailable=unavailable,
        max_surge=surge,
        on_degraded_link=asked or "report",
    )


def group_index(labels: Mapping[str, str]) -> int | None:
    """Return an LWS pod's group index (None when it carries none)."""
    return whole_number(labels.get(LWS_GROUP_INDEX))


def surge_message(index: int | None, view: LwsView, *, waiting: bool = False) -> str:
    """Return the Surge condition's words for group ``index`` ("" when it is not a surge
    group); ``waiting``: no domain has room for it now."""
    if index is None or index < view.replicas:
        return ""
    words = (
        f"group {index} of LeaderWorkerSet {view.name!r} is a surge group of its rolling update "
        f"(replicas {view.replicas}, maxSurge {view.max_surge}): LWS deletes it when the update "
        "ends, and it holds no domain for itself while it waits"
    )
    if waiting:
        words += (
            "; the rollout waits for it: LWS replaces a group only once the groups above it are "
            "ready and updated (it counts from the highest index, a surge group's), and no domain "
            "has room for this one whole. To go on: free room for one group, or roll with "
            "maxSurge 0 (groups replaced in place return to the domain they leave)"
        )
    return words


def group_ready(ready: Sequence[bool], size: int) -> bool:
    """Return whether a group is ready: every one of its ``size`` pods exists and is Ready."""
    return len(ready) >= size and all(ready)


@dataclass(frozen=True, slots=True)
class Unready:
    """An LWS's other groups that are not ready now: how many, and the first few by name."""

    count: int
    shown: tuple[str, ...] = ()


#: the not-ready groups a Moving condition names
SHOWN_GROUPS = 3


def others_unready(
    view: LwsView, groups: Mapping[int, tuple[str, bool]], own: int | None
) -> Unready:
    """Return the LWS's groups other than group ``own`` that are not ready now.

    ``groups``: the other groups that have pods, by group index: (gang name, ready). Every
    index below the LWS's replicas with no pod at all counts too (LWS is making it again);
    those are counted, not walked one by one: an LWS may say 2^31 replicas.
    """
    not_ready = sorted(name for name, ready in groups.values() if not ready)
    present = sum(1 for index in groups if 0 <= index < view.replicas)
    own_absent = own is not None and 0 <= own < view.replicas and own not in groups
    absent = max(0, view.replicas - present - own_absent)
    shown = not_ready[:SHOWN_GROUPS]
    index = 0
    # the first len(groups) + 1 + SHOWN_GROUPS indexes hold enough absent ones to show
    while len(shown) < SHOWN_GROUPS and index < min(view.replicas, len(groups) + 1 + SHOWN_GROUPS):
        if index not in groups and index != own:
            shown.append(f"{view.name}-{index}")
        index += 1
    return Unready(len(not_ready) + absent, tuple(shown))


@dataclass(frozen=True, slots=True)
class Move:
    """Whether to move a degraded group now, and the Moving condition's words."""

    now: bool
    message: str


def move_decision(
    *,
    group: str,
    view: LwsView | None,
    degraded: bool,
    ready: bool,
    others_unready: Unready,
    moving: str | None,
    placed_back: Sequence[str] = (),
    no_room: str = "",
) -> Move | None:
    """Return what to do with a group on a degraded node (None: nothing to say).

    ``others_unready``: the LWS's other groups that are not ready now (:func:`others_unready`);
    ``moving``: the group of the same LWS being moved now (None when none); ``placed_back``: the
    degraded nodes this group was placed on again after its last move (no healthy domain had
    room for it then); ``no_room``: why the placer has no healthy room for the group elsewhere
    now ("" when it found some: :func:`tpfabric_operator.fabric_health.room_elsewhere`), so a
    move would leave the group waiting for room instead of serving slowly.
    """
    if not degraded or view is None or view.on_degraded_link != "restart-elsewhere":
        return None
    budget = view.max_unavailable
    if placed_back and moving != group:
        wait = (
            f"not moved again: its last move placed it back on degraded node(s) "
            f"{', '.join(placed_back)} (no healthy domain had room for the group whole); it is "
            "moved again only once the degraded nodes under it change"
        )
    elif moving is not None and moving != group:
        wait = f"waits: group {moving} of {view.name!r} is being moved (one at a time)"
    elif moving == group:
        wait = "being moved: LWS makes the group again, away from the degraded node"
    elif not ready:
        wait = "waits for the group to be ready (a group that is not ready is not moved)"
    elif budget == 0:
        wait = f"not moved: {view.name!r} allows no unavailable group (maxUnavailable 0)"
    elif others_unready.count + 1 > budget:
        shown = ", ".join(others_unready.shown)
        wait = (
            f"waits: {others_unready.count} other group(s) of {view.name!r} are not ready "
            f"({shown}); moving this one would pass maxUnavailable {budget}"
        )
    elif no_room:
        wait = f"not moved: {no_room}"
    else:
        return Move(
            True,
            "moving off the degraded node: its leader pod is deleted, LWS makes the group again "
            "and tpfabric plans it elsewhere",
        )
    return Move(False, wait)


def condition(kind: str, status: bool, reason: str, message: str) -> dict[str, str]:
    """Return a condition without its transition time (see :func:`merge_conditions`)."""
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
    }


def merge_conditions(
    new: Sequence[Mapping[str, str]], stored: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Return ``new`` with each ``lastTransitionTime`` kept from ``stored`` while its status is
    unchanged (else ``now``), as ``metav1.Condition`` asks."""
    before = {str(c.get("type")): c for c in stored if isinstance(c, Mapping)}
    merged = []
    for item in new:
        old = before.get(item["type"])
        since = (
            old.get("lastTransitionTime")
            if old is not None and old.get("status") == item["status"]
            else None
        )
        merged.append({**item, "lastTransitionTime": since or now})
    return merged


@dataclass(frozen=True, slots=True)
class Moving:
    """A group of a LeaderWorkerSet being moved off a degraded node (one per LWS at a time):
    since when (monotonic seconds), and the uids of the pods it had then (the move is over once
    the group is ready with none of them)."""

    group: str
    since: float
    uids: frozenset[str]


@dataclass(frozen=True, slots=True)
class RecordLife:
    """What a Gang record's conditions say after one sync, and what becomes of its moves."""

    #: Ready, RDMA, Degraded, Surge, Moving: each with its transition time
    conditions: list[dict[str, Any]]
    #: no change of the group's life can come without an event of its own (no degraded node
    #: under it, whose recovery is no event of the gang's; not a surge group)
    settled: bool
    #: the move of this group is over (made again, or timed out): its LWS may move another
    move_over: bool = False
    #: the degraded nodes the group was placed back on after its last move (None: none kept)
    placed_back: frozenset[str] | None = None
    #: the leader pod to delete to move the group now (None: no move now)
    move_leader: GangPod | None = None


def record_life(
    first: GangPod,
    pods: Sequence[GangPod],
    size: int,
    stored: Mapping[str, Any],
    *,
    degraded: list[RankOnDegradedNode],
    lws: LwsView | None,
    unready: Unready,
    moving: Moving | None,
    placed_back: frozenset[str] | None,
    now: float,
    monotonic: float,
) -> RecordLife:
    """Return the record's conditions (Ready, Degraded, Surge, Moving) and whether to move a
    degraded LWS group now.

    ``stored``: the record's status as read; ``degraded``: its pods on degraded nodes; ``lws``:
    what its LeaderWorkerSet says (None: not an LWS group, or the LWS is gone); ``unready``: that
    LWS's other groups not ready now; ``moving``: the group of that LWS being moved;
    ``placed_back``: what this group's last move left it on; ``now``: the wall clock,
    ``monotonic``: the monotonic one (what ``moving.since`` counts in).
    """
    member = first.member
    ready = group_ready([p.ready for p in pods], size)
    not_ready = [p.name for p in pods if not p.ready]
    conditions = [
        condition(
            "Ready",
            ready,
            "GroupReady" if ready else "PodsNotReady",
            f"{sum(p.ready for p in pods)}/{size} pods ready"
            + (f" (not ready: {', '.join(sorted(not_ready)[:3])})" if not_ready else ""),
        )
    ]
    conditions.append(pods_created(pods, size))  # a gang short of pods says so
    transport = rdma_condition(p.rdma for p in pods)
    if transport is not None:  # the RDMA the pods got (the gang webhook's decision), and why
        conditions.append(transport)
    had_degraded = any(c.get("type") == "Degraded" for c in stored.get("conditions") or [])
    if degraded or had_degraded:
        conditions.append(
            condition(
                "Degraded",
                bool(degraded),
                "LinkDegraded" if degraded else "LinksHealthy",
                straggler_message(degraded)
                if degraded
                else "no node under the group is degraded now",
            )
        )
    placement = placement_of_status(stored)
    index = group_index(first.labels) if lws is not None else None
    surge = surge_message(index, lws, waiting=placement.waiting) if lws is not None else ""
    if surge:
        conditions.append(condition(SURGE, True, "RollingUpdate", surge))
    degraded_nodes = frozenset(r.node for r in degraded)
    move_over = False
    if moving is not None and moving.group == member.gang:
        made_again = ready and not any(p.uid in moving.uids for p in pods)
        if made_again or monotonic - moving.since > MOVE_SECONDS:
            move_over, moving = True, None
            if made_again and degraded_nodes:
                placed_back = degraded_nodes
    if placed_back not in (None, degraded_nodes):
        placed_back = None  # other nodes went degraded (or recovered): judged afresh
    leader = None
    if lws is not None:
        move = move_decision(
            group=member.gang,
            view=lws,
            degraded=bool(degraded),
            ready=ready,
            others_unready=unready,
            moving=moving.group if moving is not None else None,
            placed_back=sorted(placed_back or ()),
            no_room=room_elsewhere(placement.healthy_room, degraded) if degraded else "",
        )
        if move is not None:
            if move.now:
                leader = next((p for p in pods if p.rank == 0), None)
            conditions.append(condition("Moving", move.now, "DegradedLink", move.message))
    merged = merge_conditions(conditions, stored.get("conditions") or [], rfc3339(now))
    return RecordLife(
        merged,
        settled=not degraded and not surge,
        move_over=move_over,
        placed_back=placed_back,
        move_leader=leader,
    )
