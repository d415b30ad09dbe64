"""Every ``TPFABRIC_*`` knob of the operator, in one place: its variable, default, bounds and
meaning: one truth per fact. Read once, at import, from the environment the chart
or the local control plane gives the process.

A value that cannot be read stops the operator at start with the variable, the value and what
it must be; no knob is read anywhere else. :data:`KNOBS` lists them for the docs
(docs/install.md, "Operator settings"), which a unit test keeps in step.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpfabric_core.errors import InputError
from tpfabric_core.fabric_profile import init_argument, parse_fabric_profile
from tpfabric_core.placement.pod_fit import label_selector

__all__ = [
    "CREATE_CONCURRENCY",
    "DEGRADED_LINK_BANDWIDTH",
    "EXPECTED_REPAIR_SECONDS",
    "FABRIC_PROFILE",
    "GANG_IDLE_SECONDS",
    "GANG_SHORT_NOTICE_SECONDS",
    "GANG_SYNC_SECONDS",
    "HANDLER_THREADS",
    "INIT_IMAGE",
    "KNOBS",
    "KUEUE_QUEUE_REQUIREMENT",
    "LOG_LEVEL",
    "PLAN_DEFER_SECONDS",
    "PLAN_WAIT_SECONDS",
    "RDMA_RESOURCE",
    "RECONCILE_SECONDS",
    "SUSPECT_SWITCH_NODES",
    "Knob",
    "QueueRequirement",
    "SettingsError",
    "queue_requirement",
    "read",
]


def _every_namespace(_labels: Mapping[str, str]) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class QueueRequirement:
    """Whether a job must name a queue, as Kueue's Configuration says: with
    ``manageJobsWithoutQueueName`` (``without_queue_name``), Kueue suspends a job of its
    integrations that has no queue label, in the namespaces its ``managedJobsNamespaceSelector``
    selects (``namespaces``, a test of a namespace's labels), and never admits it: it runs only
    once it names a LocalQueue. Kueue's default selector leaves out ``kube-system`` and Kueue's
    own namespace. Jobs that have a queue label are Kueue's wherever they are."""

    without_queue_name: bool = False
    namespaces: Callable[[Mapping[str, str]], bool] = _every_namespace

    def applies(self, namespace_labels: Mapping[str, str]) -> bool:
        """Return whether a job without a queue label in a namespace labelled so must wait."""
        return self.without_queue_name and self.namespaces(namespace_labels)


class SettingsError(ValueError):
    """A ``TPFABRIC_*`` variable whose value cannot be used."""


@dataclass(frozen=True, slots=True)
class Knob:
    """One setting: its environment variable, default, least value (numbers) and meaning."""

    env: str
    default: str
    meaning: str
    kind: type = float
    minimum: float = 0.0
    maximum: float = math.inf


KNOBS: tuple[Knob, ...] = (
    Knob(
        "TPFABRIC_RECONCILE_SECONDS",
        "2",
        "how often every job is reconciled at the latest (its pod changes wake it sooner)",
        minimum=0.01,
    ),
    Knob("TPFABRIC_RDMA_INIT_IMAGE", "tpfabric/rdma-init:0.1.0", "the rdma-init image", str),
    Knob(
        "TPFABRIC_RDMA_RESOURCE",
        "rdma/ib",
        "the extended resource the nodes' RDMA device plugin advertises (the chart's "
        "rdma.resourceName), for jobs whose spec.rdma.resourceName is unset",
        str,
    ),
    Knob(
        "TPFABRIC_CREATE_CONCURRENCY",
        "16",
        "worker pods created at the same time, over every job",
        int,
        minimum=1,
    ),
    Knob(
        "TPFABRIC_PLAN_WAIT_SECONDS",
        "2",
        "how long a gang larger than the create concurrency waits for its plan after its first "
        "worker, so that its other workers are born released",
    ),
    Knob(
        "TPFABRIC_PLAN_DEFER_SECONDS",
        "5",
        "how long a smaller gang's other workers wait for its plan before they are created gated",
    ),
    Knob(
        "TPFABRIC_HANDLER_THREADS",
        "0",
        "reconciles running at the same time (kopf's threads); 0: kopf's default",
        int,
    ),
    Knob(
        "TPFABRIC_SUSPECT_SWITCH_NODES",
        "3",
        "nodes under one rail switch degraded on its rail at once that make the switch suspect",
        int,
        minimum=1,
    ),
    Knob(
        "TPFABRIC_GANG_SYNC_SECONDS",
        "10",
        "how often each Gang record is brought in step with its pods at the latest",
        minimum=0.01,
    ),
    Knob(
        "TPFABRIC_EXPECTED_REPAIR_SECONDS",
        "14400",
        "how long a degraded link is expected to stay degraded (onDegradedLink: "
        "restart-when-it-pays weighs running slow for this long against a restart)",
        minimum=1,
    ),
    Knob(
        "TPFABRIC_DEGRADED_LINK_BANDWIDTH",
        "0.5",
        "the fraction of its rate a degraded link is taken to keep when the fabric agent could "
        "not measure it (errors, not a lower rate); weighed by restart-when-it-pays",
        minimum=0.01,
        maximum=1,
    ),
    Knob("TPFABRIC_LOG_LEVEL", "INFO", "the log level (--log-level overrides it)", str),
    Knob(
        "TPFABRIC_GANG_IDLE_SECONDS",
        "30",
        "how long a pod group's record stays after its last pod is gone",
    ),
    Knob(
        "TPFABRIC_GANG_SHORT_NOTICE_SECONDS",
        "60",
        "how long a gang may be short of pods before a Warning Event on each of its pods says "
        "how many exist and which ranks are missing (its record's PodsCreated condition says "
        "it at once)",
    ),
    Knob(
        "TPFABRIC_FABRIC_PROFILE",
        "",
        "the fabric's contract as JSON (the chart's fabric.profile): service levels, traffic "
        "classes, ECMP levels, passed to every worker's rdma-init",
        str,
    ),
    Knob(
        "TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME",
        "false",
        "Kueue's manageJobsWithoutQueueName, as Kueue's Configuration says it: true holds a job "
        "without a kueue.x-k8s.io/queue-name label suspended (never run) in the namespaces "
        "TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR selects",
        bool,
    ),
    Knob(
        "TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR",
        json.dumps(
            {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "kueue-system"],
                    }
                ]
            },
            separators=(",", ":"),
        ),
        "Kueue's managedJobsNamespaceSelector (a label selector, as JSON): the namespaces where "
        "manageJobsWithoutQueueName holds jobs without a queue; the default is Kueue's own for "
        "a Kueue in kueue-system",
        str,
    ),
)


def read(knob: Knob, environ: Mapping[str, str]) -> float | int | str | bool:
    """Return ``knob``'s value in ``environ`` (its default when unset or empty)."""
    raw = environ.get(knob.env, "").strip() or knob.default
    if knob.kind is str:
        return raw
    if knob.kind is bool:
        if raw.lower() not in ("true", "false"):
            raise SettingsError(
                f"{knob.env}={raw!r} is not true or false (default {knob.default}: {knob.meaning})"
            )
        return raw.lower() == "true"
    try:
        value: float | int = knob.kind(raw)
    except ValueError:
        what = "a whole number" if knob.kind is int else "a number"
        raise SettingsError(
            f"{knob.env}={raw!r} is not {what} (default {knob.default}: {knob.meaning})"
        ) from None
    if value < knob.minimum:
        raise SettingsError(
            f"{knob.env}={raw!r} is below {knob.minimum:g} (default {knob.default}: {knob.meaning})"
        )
    if value > knob.maximum:
        raise SettingsError(
            f"{knob.env}={raw!r} is above {knob.maximum:g} (default {knob.default}: {knob.meaning})"
        )
    return value


def queue_requirement(environ: Mapping[str, str]) -> QueueRequirement:
    """Return Kueue's ``manageJobsWithoutQueueName`` and ``managedJobsNamespaceSelector`` as
    ``environ`` mirrors them (the operator cannot read Kueue's Configuration)."""
    knobs = {k.env: k for k in KNOBS}
    manage = read(knobs["TPFABRIC_KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME"], environ)
    knob = knobs["TPFABRIC_KUEUE_MANAGED_JOBS_NAMESPACE_SELECTOR"]
    raw = str(read(knob, environ))
    try:
        selects = label_selector(json.loads(raw))
    except ValueError as err:  # LabelSelectorError too
        raise SettingsError(
            f"{knob.env}={raw[:200]!r} is not a label selector as JSON: {err} (default "
            f"{knob.default}: {knob.meaning})"
        ) from None
    return QueueRequirement(without_queue_name=bool(manage), namespaces=selects)


_VALUES = {knob.env: read(knob, os.environ) for knob in KNOBS}

RECONCILE_SECONDS = float(_VALUES["TPFABRIC_RECONCILE_SECONDS"])
INIT_IMAGE = str(_VALUES["TPFABRIC_RDMA_INIT_IMAGE"])
RDMA_RESOURCE = str(_VALUES["TPFABRIC_RDMA_RESOURCE"])
CREATE_CONCURRENCY = int(_VALUES["TPFABRIC_CREATE_CONCURRENCY"])
PLAN_WAIT_SECONDS = float(_VALUES["TPFABRIC_PLAN_WAIT_SECONDS"])
PLAN_DEFER_SECONDS = float(_VALUES["TPFABRIC_PLAN_DEFER_SECONDS"])
HANDLER_THREADS = int(_VALUES["TPFABRIC_HANDLER_THREADS"])
SUSPECT_SWITCH_NODES = int(_VALUES["TPFABRIC_SUSPECT_SWITCH_NODES"])
GANG_SYNC_SECONDS = float(_VALUES["TPFABRIC_GANG_SYNC_SECONDS"])
GANG_IDLE_SECONDS = float(_VALUES["TPFABRIC_GANG_IDLE_SECONDS"])
GANG_SHORT_NOTICE_SECONDS = float(_VALUES["TPFABRIC_GANG_SHORT_NOTICE_SECONDS"])
LOG_LEVEL = str(_VALUES["TPFABRIC_LOG_LEVEL"])
EXPECTED_REPAIR_SECONDS = float(_VALUES["TPFABRIC_EXPECTED_REPAIR_SECONDS"])
DEGRADED_LINK_BANDWIDTH = float(_VALUES["TPFABRIC_DEGRADED_LINK_BANDWIDTH"])


def fabric_profile(text: str) -> str | None:
    """Return rdma-init's ``--fabric-profile`` for the operator's profile JSON (None: none
    declared); SettingsError naming the field and the fix."""
    try:
        return init_argument(parse_fabric_profile(text, "TPFABRIC_FABRIC_PROFILE"))
    except InputError as err:
        raise SettingsError(str(err)) from None


FABRIC_PROFILE = fabric_profile(str(_VALUES["TPFABRIC_FABRIC_PROFILE"]))
KUEUE_QUEUE_REQUIREMENT = queue_requirement(os.environ)
