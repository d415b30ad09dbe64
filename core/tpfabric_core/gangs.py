"""Which gang a pod made by another controller belongs to, its rank, and what it asks of the
fabric: read from what the owner already writes on its pods. Pure.

Three kinds of owner are read, each from the labels and annotations its own controller puts on
every pod it creates (checked against their sources):

- **LeaderWorkerSet** (``leaderworkerset.x-k8s.io``): one gang per group. The group's pods carry
  ``leaderworkerset.sigs.k8s.io/name`` and ``group-index``, the group size in the
  ``leaderworkerset.sigs.k8s.io/size`` annotation, and ``worker-index`` (the leader is 0). LWS's
  own pod webhook adds ``group-index`` to the leader and ``worker-index`` to the workers from the
  StatefulSet ordinal in the pod's name; webhooks run in no fixed order, so a missing label is
  read from the name the same way.
- **JobSet** (``jobset.x-k8s.io``): one gang per JobSet, or one per child Job when the JobSet asks
  for per-Job placement (``alpha.jobset.sigs.k8s.io/exclusive-topology``, or
  ``tpfabric.io/gang-per: job``). A pod cannot know its Job's parallelism, so the size and the
  ranks come from the owner objects (:attr:`GangMember.size` is None); the pod gives its order:
  ``job-global-index`` (or ``job-index``), then the Job's completion index.
- **Plain pods**: ``tpfabric.io/gang-name`` + ``tpfabric.io/gang-size`` (the shape of Kueue's
  ``pod-group-name`` / ``pod-group-total-count``, which are read too), rank from
  ``tpfabric.io/rank``, else an Indexed Job's completion index (:func:`_own_rank`), else the
  order of creation.
- **The upstream Workload API** (``scheduling.k8s.io`` PodGroup, Kubernetes 1.36+ behind the
  ``GenericWorkload`` gate): a pod whose ``spec.schedulingGroup.podGroupName`` names a PodGroup
  is one gang per PodGroup; the size (its gang policy's ``minCount``) and any topology
  constraint (a node label key) come from the PodGroup object (:attr:`GangMember.size` is
  None), the rank as a plain pod's.

The topology request: ``tpfabric.io/topology-level`` / ``-mode`` / ``max-wait-seconds``, else
the annotations users already have — Kueue's ``podset-required-topology`` /
``podset-preferred-topology`` and LWS's or JobSet's ``exclusive-topology`` (required) — whose
value is a node label key, mapped onto the level that has that key.

Bad input never refuses a pod: :func:`gang_of` returns the member with its problems (each naming
the label at fault), and the webhook admits such a pod unwired, with a warning, marked with
:data:`GANG_PROBLEM_LABEL` and its problems in :data:`GANG_PROBLEMS_ANNOTATION` (the operator
writes them into an Event on the pod).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tpfabric_core.input_limits import whole_number

__all__ = [
    "GANG_LABEL",
    "GANG_NAME_LABEL",
    "GANG_PROBLEMS_ANNOTATION",
    "GANG_PROBLEM_LABEL",
    "GANG_SIZE_LABEL",
    "NAMESPACE_OPT_IN",
    "NAMESPACE_OPT_IN_LABEL",
    "NAMESPACE_OPT_IN_VALUE",
    "RANK_LABEL",
    "GangMember",
    "GangSettings",
    "Near",
    "Problem",
    "TopologyAsk",
    "completion_index",
    "gang_of",
    "not_opted_in",
    "record_name",
    "scheduling_group",
]

# -- tpfabric's own keys -------------------------------------------------------------------------
GANG_NAME_LABEL = "tpfabric.io/gang-name"
GANG_SIZE_LABEL = "tpfabric.io/gang-size"
RANK_LABEL = "tpfabric.io/rank"
GANG_PER_ANNOTATION = "tpfabric.io/gang-per"  # "job": one gang per child Job of a JobSet
LEVEL_ANNOTATION = "tpfabric.io/topology-level"
MODE_ANNOTATION = "tpfabric.io/topology-mode"
MAX_WAIT_ANNOTATION = "tpfabric.io/max-wait-seconds"
#: placement near another gang (disaggregated serving: decode near prefill), at a level
NEAR_ANNOTATION = "tpfabric.io/near"
NEAR_LEVEL_ANNOTATION = "tpfabric.io/near-level"
NEAR_MODE_ANNOTATION = "tpfabric.io/near-mode"
#: what to do when a node under a running gang turns degraded (as TPJ's ``onDegradedLink``)
ON_DEGRADED_ANNOTATION = "tpfabric.io/on-degraded-link"
#: the webhook writes the gang record's name here (the placer finds a gang's pods by it)
GANG_LABEL = "tpfabric.io/gang"
#: a gang pod the webhook admitted unwired (its problems say why) carries this label set to
#: "true" and its problems, one a line, in the annotation: the operator tells it by an Event
GANG_PROBLEM_LABEL = "tpfabric.io/gang-problem"
GANG_PROBLEMS_ANNOTATION = "tpfabric.io/gang-problems"
#: a namespace opts in to gangs of other controllers with this label set to ``enabled``: only
#: there does the webhook take pods in, the operator keep Gang records and the placer plan them
NAMESPACE_OPT_IN_LABEL = "tpfabric.io/gangs"
NAMESPACE_OPT_IN_VALUE = "enabled"
NAMESPACE_OPT_IN = f"{NAMESPACE_OPT_IN_LABEL}={NAMESPACE_OPT_IN_VALUE}"


def not_opted_in(namespace: str) -> str:
    """Return what a gang in ``namespace``, which has not opted in, is told."""
    return (
        f"namespace {namespace!r} has not opted in to gangs of other controllers, so tpfabric "
        f"neither keeps a Gang record for these pods nor places them: label it with "
        f"`kubectl label namespace {namespace} {NAMESPACE_OPT_IN}` (docs/gangs.md), or remove "
        "the pods' tpfabric.io/gang label"
    )


# -- LeaderWorkerSet (api/leaderworkerset/v1/leaderworkerset_types.go) -------------------------
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"  # an annotation
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"  # an annotation
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
# -- DisaggregatedSet (LWS's api/disaggregatedset/v1): one LWS per role, pods labelled with it
DISAGG_ROLE = "disaggregatedset.x-k8s.io/role"
DISAGG_NAME = "disaggregatedset.x-k8s.io/name"

# -- JobSet (api/jobset/v1alpha2/jobset_types.go; labels and annotations both) ----------------
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
#: JobSet's own count of its restarts (``failurePolicy``: all its Jobs deleted and made again)
JOBSET_RESTARTS = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation and label

# -- Kueue (pod groups and TAS requests) --------------------------------------------------------
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"  # a label
KUEUE_POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"  # an annotation
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"

Kind = Literal["LeaderWorkerSet", "JobSet", "PodGroup", "WorkloadPodGroup"]
Mode = Literal["required", "preferred"]

#: the annotations users already have, in the order they are read: (key, the mode it implies)
_REQUEST_ANNOTATIONS: tuple[tuple[str, Mode], ...] = (
    (KUEUE_REQUIRED, "required"),
    (KUEUE_PREFERRED, "preferred"),
    (LWS_EXCLUSIVE, "required"),
    (JOBSET_EXCLUSIVE, "required"),
)
_NAME_MAX = 63  # the record's name is also a label value (GANG_LABEL)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with a pod's gang labels: the key at fault and what would fix it."""

    key: str
    message: str

    def words(self) -> str:
        """Return the problem in one line, naming the key."""
        return f"{self.key}: {self.message}"


@dataclass(frozen=True, slots=True)
class TopologyAsk:
    """What the owner asks of the fabric (None: the chart's default)."""

    level: str | None = None
    mode: Mode | None = None
    max_wait_seconds: int | None = None
    #: the annotation the level came from ("" when none did)
    source: str = ""


@dataclass(frozen=True, slots=True)
class Near:
    """Place the gang near another one (``tpfabric.io/near``): inside one domain of ``level``
    with some pod of ``target``, an owner's name (an LWS, a JobSet, a pod group), a Gang
    record's name, or a DisaggregatedSet role in the same namespace."""

    target: str
    level: str
    mode: Mode = "preferred"


@dataclass(frozen=True, slots=True)
class GangSettings:
    """What the cluster's tpfabric is configured with (the chart's values)."""

    #: level name -> node label key, e.g. {"leaf": "topology.tpfabric.io/leaf"}
    levels: Mapping[str, str]
    #: owner kinds whose pods are taken in without a tpfabric label
    owners: frozenset[str] = frozenset({"LeaderWorkerSet", "JobSet", "WorkloadPodGroup"})
    max_size: int = 1024


@dataclass(frozen=True, slots=True)
class GangMember:
    """One pod's place in its gang."""

    kind: Kind
    namespace: str
    #: the owner's name (an LWS, a JobSet) or the gang label's value (plain pods)
    owner: str
    #: the gang record's name (a DNS label, at most 63 characters)
    gang: str
    #: pods in the gang; None when the owner object says (a JobSet's Jobs' parallelism)
    size: int | None
    #: the pod's rank; None when it follows from ``order`` among the gang's pods
    rank: int | None
    #: sorts the gang's pods into ranks when ``rank`` is None (creation order comes after it)
    order: tuple[int, ...] = ()
    topology: TopologyAsk = field(default_factory=TopologyAsk)
    problems: tuple[Problem, ...] = ()
    near: Near | None = None
    #: a DisaggregatedSet's role (``prefill``, ``decode``) and the set, from its pod labels
    role: str = ""
    role_set: str = ""
    #: the pod has a controller (an owner reference with ``controller: true``), which makes it
    #: again when it is deleted; a bare pod deleted is gone
    controlled: bool = False


def record_name(*parts: str) -> str:
    """Return a gang record's name from its parts: a DNS label of at most 63 characters.

    Readable when it fits; else cut, with a short hash of the whole so two long names never meet.
    """
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(name) <= _NAME_MAX and name:
        return name
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:10]
    return f"{name[: _NAME_MAX - 11].rstrip('-')}-{digest}"


def _int(text: object) -> int | None:
    return whole_number(text)


def _ordinal(name: str) -> int | None:
    """Return a StatefulSet pod's ordinal: the number at the end of its name."""
    match = _ORDINAL.search(name)
    return int(match.group(1)) if match else None


def gang_of(
    meta: Mapping[str, Any],
    settings: GangSettings,
    *,
    namespace: str = "",
    spec: Mapping[str, Any] | None = None,
) -> GangMember | None:
    """Return the gang a pod belongs to (from its ``metadata``, and its ``spec`` for the Workload
    API's ``schedulingGroup``), or None when it opts into none.

    A pod with tpfabric's own gang label is a plain gang member whatever made it; else an owner
    kind that ``settings.owners`` enables. ``namespace``: the request's, when the pod's metadata
    has none yet (a pod being created).
    """
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    namespace = str(meta.get("namespace") or namespace or "default")
    name = str(meta.get("name") or "")
    controller = _controller(meta)
    if GANG_NAME_LABEL in labels or KUEUE_POD_GROUP in labels:
        member = _pod_group(labels, annotations, namespace, controller)
    elif LWS_NAME in labels and "LeaderWorkerSet" in settings.owners:
        member = _leader_worker_set(labels, annotations, namespace, name)
    elif JOBSET_NAME in labels and "JobSet" in settings.owners:
        member = _job_set(labels, annotations, namespace)
    elif scheduling_group(spec) and "WorkloadPodGroup" in settings.owners:
        group = scheduling_group(spec)
        member = _workload_pod_group(labels, annotations, namespace, controller, group)
    else:
        return None
    topology, problems = _topology(annotations, settings)
    near, near_problems = _near(annotations, settings)
    size_problems = _size_problems(member, labels, annotations, settings)
    return GangMember(
        kind=member.kind,
        namespace=member.namespace,
        owner=member.owner,
        gang=member.gang,
        size=member.size,
        rank=member.rank,
        order=member.order,
        topology=topology,
        problems=(*member.problems, *size_problems, *problems, *near_problems),
        near=near,
        role=str(labels.get(DISAGG_ROLE) or ""),
        role_set=str(labels.get(DISAGG_NAME) or ""),
        controlled=controller is not None,
    )


#: the level ``tpfabric.io/near`` means without ``near-level``: one spine (a few switch hops)
NEAR_DEFAULT_LEVEL = "spine"


def _near(
    annotations: Mapping[str, str], settings: GangSettings
) -> tuple[Near | None, list[Problem]]:
    """Return what ``tpfabric.io/near`` (with ``-level`` and ``-mode``) asks, and its problems."""
    target = str(annotations.get(NEAR_ANNOTATION) or "").strip()
    if not target:
        return None, []
    problems = []
    if not _DNS_LABEL.match(target):
        problems.append(
            Problem(NEAR_ANNOTATION, f"{target!r} is not a DNS label (the other gang's name)")
        )
    level = str(annotations.get(NEAR_LEVEL_ANNOTATION) or NEAR_DEFAULT_LEVEL)
    if level not in settings.levels and level != "cluster":
        known = ", ".join(sorted(settings.levels)) or "none"
        problems.append(
            Problem(NEAR_LEVEL_ANNOTATION, f"level {level!r} is not configured (levels: {known})")
        )
    mode_text = str(annotations.get(NEAR_MODE_ANNOTATION) or "preferred")
    modes: dict[str, Mode] = {"required": "required", "preferred": "preferred"}
    if mode_text not in modes:
        problems.append(
            Problem(NEAR_MODE_ANNOTATION, f"{mode_text!r} is neither required nor preferred")
        )
    if problems:
        return None, problems
    return Near(target=target, level=level, mode=modes[mode_text]), []


def _pod_group(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    namespace: str,
    controller: Mapping[str, Any] | None,
) -> GangMember:
    ours = GANG_NAME_LABEL in labels
    key = GANG_NAME_LABEL if ours else KUEUE_POD_GROUP
    value = str(labels[key])
    problems = []
    if not _DNS_LABEL.match(value) or len(value) > _NAME_MAX:
        problems.append(
            Problem(key, f"{value!r} is not a DNS label (lower case, digits, '-'; at most 63)")
        )
    size_key = GANG_SIZE_LABEL if ours else KUEUE_POD_GROUP_TOTAL
    size_text = labels.get(size_key, annotations.get(size_key))
    size = _int(size_text) if size_text is not None else None
    rank, rank_problems = _own_rank(labels, annotations, controller, size)
    problems.extend(rank_problems)
    return GangMember(
        kind="PodGroup",
        namespace=namespace,
        owner=value,
        gang=record_name(value) if not problems else value,
        size=size,
        rank=rank,
        problems=tuple(problems),
    )


def scheduling_group(spec: Mapping[str, Any] | None) -> str:
    """Return the PodGroup a pod's ``spec.schedulingGroup`` names ("" when none)."""
    group = (spec or {}).get("schedulingGroup") or {}
    return str(group.get("podGroupName") or "") if isinstance(group, Mapping) else ""


def _rank(labels: Mapping[str, str]) -> tuple[int | None, list[Problem]]:
    """Return the rank ``tpfabric.io/rank`` gives (None: none) and what is wrong with it."""
    text = labels.get(RANK_LABEL)
    rank = _int(text)
    if text is not None and rank is None:
        return None, [Problem(RANK_LABEL, f"{text!r} is not a whole number")]
    return rank, []


def completion_index(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> int | None:
    """Return the completion index the Job controller writes on an Indexed Job's pod (its label,
    else its annotation); None: not an Indexed Job's pod, or unreadable."""
    return _int(labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX)))


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the pod's controlling owner reference (None: a bare pod)."""
    refs = meta.get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller") is True), None)


def _own_rank(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    controller: Mapping[str, Any] | None,
    size: int | None,
) -> tuple[int | None, list[Problem]]:
    """Return a pod group's pod's own rank (None: it follows from the order of creation) and
    what is wrong with it.

    ``tpfabric.io/rank`` when given; else, for the pod of an Indexed Job (its controller a
    ``batch`` Job), its completion index, which the Job controller writes on every pod it makes,
    the same again on the pod it makes to replace one: below the group's ``size`` when the pod
    says it (a larger index, of a Job of more completions than the gang, ranks by creation).
    """
    rank, problems = _rank(labels)
    if RANK_LABEL in labels or controller is None:
        return rank, problems
    api = str(controller.get("apiVersion") or "")
    if controller.get("kind") != "Job" or api.partition("/")[0] != "batch":
        return None, []
    index = completion_index(labels, annotations)
    if index is None or (size is not None and index >= size):
        return None, []
    return index, []


def _workload_pod_group(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    namespace: str,
    controller: Mapping[str, Any] | None,
    group: str,
) -> GangMember:
    rank, problems = _own_rank(labels, annotations, controller, None)
    return GangMember(
        kind="WorkloadPodGroup",
        namespace=namespace,
        owner=group,
        gang=record_name(group),
        size=None,
        rank=rank,
        problems=tuple(problems),
    )


def _leader_worker_set(
    labels: Mapping[str, str], annotations: Mapping[str, str], namespace: str, name: str
) -> GangMember:
    owner = str(labels[LWS_NAME])
    worker = _int(labels.get(LWS_WORKER_INDEX))
    group = _int(labels.get(LWS_GROUP_INDEX))
    problems = []
    if worker is None:  # LWS's webhook has not run yet: a worker's ordinal is in its name
        worker = _ordinal(name)
    if group is None and worker == 0:  # the leader: <lws>-<group>
        group = _ordinal(name)
    if group is None:
        problems.append(Problem(LWS_GROUP_INDEX, "missing: the pod names no LWS group"))
    if worker is None:
        problems.append(Problem(LWS_WORKER_INDEX, "missing: the pod names no worker index"))
    return GangMember(
        kind="LeaderWorkerSet",
        namespace=namespace,
        owner=owner,
        gang=record_name(owner, str(group if group is not None else "x")),
        size=_int(annotations.get(LWS_SIZE)),
        rank=worker,
        problems=tuple(problems),
    )


def _job_set(
    labels: Mapping[str, str], annotations: Mapping[str, str], namespace: str
) -> GangMember:
    def read(key: str) -> str | None:
        value = labels.get(key, annotations.get(key))
        return None if value is None else str(value)

    owner = str(labels[JOBSET_NAME])
    job_index = _int(read(JOBSET_JOB_INDEX))
    global_index = _int(read(JOBSET_JOB_GLOBAL_INDEX))
    completion = completion_index(labels, annotations)
    replicated = read(JOBSET_REPLICATED_JOB) or ""
    per_job = annotations.get(GANG_PER_ANNOTATION) == "job" or bool(
        annotations.get(JOBSET_EXCLUSIVE)
    )
    problems = []
    if job_index is None:
        problems.append(Problem(JOBSET_JOB_INDEX, "missing: the pod names no Job of its JobSet"))
    if per_job:
        gang = record_name(owner, replicated, str(job_index if job_index is not None else "x"))
        order: tuple[int, ...] = (completion if completion is not None else 0,)
    else:
        gang = record_name(owner)
        first = global_index if global_index is not None else (job_index or 0)
        order = (first, completion if completion is not None else 0)
    return GangMember(
        kind="JobSet",
        namespace=namespace,
        owner=owner,
        gang=gang,
        size=None,
        rank=None,
        order=order,
        problems=tuple(problems),
    )


def _size_problems(
    member: GangMember,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    settings: GangSettings,
) -> list[Problem]:
    if member.kind in ("JobSet", "WorkloadPodGroup"):
        return []  # read from the owner objects
    key = {
        "LeaderWorkerSet": LWS_SIZE,
        "PodGroup": GANG_SIZE_LABEL if GANG_NAME_LABEL in labels else KUEUE_POD_GROUP_TOTAL,
    }[member.kind]
    text = labels.get(key, annotations.get(key))
    if text is None:
        return [Problem(key, "missing: a gang needs its size (the number of pods)")]
    if member.size is None:
        return [Problem(key, f"{text!r} is not a whole number")]
    if member.size < 1 or member.size > settings.max_size:
        return [Problem(key, f"{member.size} is outside 1..{settings.max_size}")]
    if member.rank is not None and member.rank >= member.size:
        return [Problem(RANK_LABEL, f"rank {member.rank} is not below the size {member.size}")]
    return []


def _topology(
    annotations: Mapping[str, str], settings: GangSettings
) -> tuple[TopologyAsk, list[Problem]]:
    problems: list[Problem] = []
    level: str | None = None
    mode: Mode | None = None
    source = ""
    by_key = {key: name for name, key in settings.levels.items()}
    if LEVEL_ANNOTATION in annotations:
        source, level = LEVEL_ANNOTATION, str(annotations[LEVEL_ANNOTATION])
        if level not in settings.levels:
            known = ", ".join(sorted(settings.levels)) or "none"
            problems.append(Problem(source, f"level {level!r} is not configured (levels: {known})"))
            level = None
    else:
        for key, implied in _REQUEST_ANNOTATIONS:
            if key not in annotations:
                continue
            source, label_key = key, str(annotations[key])
            level = by_key.get(label_key)
            if level is None:
                known = ", ".join(sorted(by_key)) or "none"
                problems.append(
                    Problem(key, f"no level has the node label {label_key!r} (keys: {known})")
                )
            else:
                mode = implied
            break
    if MODE_ANNOTATION in annotations:
        text = str(annotations[MODE_ANNOTATION])
        modes: dict[str, Mode] = {"required": "required", "preferred": "preferred"}
        if text in modes:
            mode = modes[text]
        else:
            problems.append(Problem(MODE_ANNOTATION, f"{text!r} is neither required nor preferred"))
    wait: int | None = None
    if MAX_WAIT_ANNOTATION in annotations:
        wait = _int(annotations[MAX_WAIT_ANNOTATION])
        if wait is None or wait > 604800:
            problems.append(
                Problem(MAX_WAIT_ANNOTATION, "must be a whole number of seconds, at most 604800")
            )
            wait = None
    return TopologyAsk(level=level, mode=mode, max_wait_seconds=wait, source=source), problems
