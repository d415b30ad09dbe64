"""TensorParallelJob (``tpfabric.io/v1alpha1``, short name ``tpj``): spec and status models.

Field descriptions here become the CRD's ``kubectl explain`` text; cross-field rules are written
twice on purpose, once as CEL (``x-kubernetes-validations``, enforced by the API server at
admission) and once as pydantic validators (enforced when the operator reads an object), and a
test holds the two to the same examples. Nothing here talks to a cluster.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "ATTEMPT_LABEL",
    "GANG_GATE",
    "GROUP",
    "JOB_LABEL",
    "KIND",
    "LEVELS",
    "MAX_NAME_LENGTH",
    "PLURAL",
    "SCHEDULER_NAME",
    "VERSION",
    "WORKER_INDEX_LABEL",
    "Condition",
    "DomainReason",
    "FailurePolicy",
    "FailureRule",
    "LastFailure",
    "Launcher",
    "Placement",
    "RdmaSpec",
    "RefusedNode",
    "RestartCost",
    "TensorParallelJob",
    "TensorParallelJobSpec",
    "TensorParallelJobStatus",
    "TopologyPolicy",
]

GROUP: Final = "tpfabric.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "tpfabric.io/v1alpha1"
KIND: Final = "TensorParallelJob"
PLURAL = "tensorparalleljobs"
# The contract between the operator (which creates worker pods) and the gang placer/extender
# (which plans and steers them): one definition for both sides.
#: Label naming a worker pod's TensorParallelJob.
JOB_LABEL: Final = "tpfabric.io/job-name"
#: Label holding a worker pod's index, which is also its rank in the plan.
WORKER_INDEX_LABEL: Final = "tpfabric.io/worker-index"
#: Label holding the attempt (gang restart count) a worker pod was created for.
ATTEMPT_LABEL: Final = "tpfabric.io/attempt"
#: Scheduling gate that holds worker pods until their whole gang has a plan.
GANG_GATE: Final = "tpfabric.io/gang"
#: schedulerName of worker pods: the kube-scheduler profile that calls the extender.
SCHEDULER_NAME: Final = "tpfabric-scheduler"

#: The default topology levels, smallest first (the canonical label scheme's); a cluster's
#: tpfabric may be configured with others (the scheduler's ``--levels``).
LEVELS = ("leaf", "spine", "block")

RESOURCE_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
NCCL_KEY_PATTERN = r"^NCCL_[A-Z0-9_]+$"

# CEL: the same rules as the pydantic validators below (tests hold them together).
CEL_TP_FITS_NODES = (
    "self.tensorParallelSize % self.gpusPerWorker == 0 || "
    "self.gpusPerWorker % self.tensorParallelSize == 0"
)
CEL_WORLD_DIVISIBLE = (
    "(self.workers * self.gpusPerWorker) % (self.tensorParallelSize * self.pipelineParallelSize)"
    " == 0"
)
CEL_RESTART_COST_GIVEN = (
    "!has(self.onDegradedLink) || self.onDegradedLink != 'restart-when-it-pays' || "
    "has(self.restartCost)"
)
CEL_REPLACE_NEEDS_ELASTIC = (
    "!has(self.failurePolicy) || !has(self.failurePolicy.restartStrategy) || "
    "self.failurePolicy.restartStrategy != 'ReplaceWorker' || "
    "(has(self.launcher) && has(self.launcher.rendezvous) && self.launcher.rendezvous == 'c10d')"
)
#: the longest job name whose worker hostnames (``<name>-worker-<index>``, index < 1024) fit in
#: 63 characters
MAX_NAME_LENGTH: Final = 50
CEL_NAME_FITS = f"size(self.metadata.name) <= {MAX_NAME_LENGTH}"
#: a failure rule must match on something (the twin of ``FailureRule._matches_something``)
CEL_RULE_MATCHES_SOMETHING = " || ".join(
    f"(has(self.{field}) && size(self.{field}) > 0)"
    for field in ("onExitCodes", "onPodConditions", "onReasons")
)
#: what a worker pod is made of cannot change while the job may run: a replacement (ReplaceWorker)
#: would run the new spec beside workers of the old one. A suspended job (before or after the
#: update) keeps no pods, so it may change (as JobSet allows pod template changes only while
#: suspended; Kueue adds node selectors and tolerations to a suspended job's template).
MUTABLE_WHILE_SUSPENDED = ("template", "rdma", "launcher")
CEL_SUSPENDED = "(has(oldSelf.suspend) && oldSelf.suspend) || (has(self.suspend) && self.suspend)"
CEL_IMMUTABLE_SHAPE = (
    "self.workers == oldSelf.workers && self.gpusPerWorker == oldSelf.gpusPerWorker && "
    "self.tensorParallelSize == oldSelf.tensorParallelSize && "
    "self.pipelineParallelSize == oldSelf.pipelineParallelSize"
)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


class RestartCost(_Model):
    """What `onDegradedLink: restart-when-it-pays` weighs: the job's slowdown on a degraded link
    against what restarting it elsewhere costs."""

    inter_node_comm_share: Annotated[float, Field(ge=0, le=1)]
    """Share of a healthy step the job spends in collectives across nodes, not hidden behind
    compute (from a profile: NCCL's timings, Nsight Systems). A link keeping a fraction `f` of
    its rate stretches that share of every step by `1/f` (a ring runs at its slowest link)."""
    checkpoint_interval_seconds: Annotated[int, Field(ge=1, le=604800)] = 1800
    """How often the job checkpoints: a restart redoes the work since the last checkpoint, taken
    as half this interval (its expectation: when the job last checkpointed is not known)."""
    restore_seconds: Annotated[int, Field(ge=0, le=86400)] = 600
    """From stopping the workers to the first step again: rescheduling, starting the workers,
    loading the checkpoint."""


class TopologyPolicy(_Model):
    """Where the workers of the job may go in the fabric."""

    mode: Literal["required", "preferred"] = "preferred"
    """`required`: all workers inside one domain of `level`, else wait. `preferred`: the smallest
    domain that fits, climbing levels when `level` cannot hold the job."""
    level: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")] = "leaf"
    """Topology level of the domain: a level name the cluster's tpfabric is configured with (by
    default `block`, `spine`, `leaf`, where `leaf` is one switch hop on every rail; see
    `--levels`), or `cluster` for the whole cluster."""
    rail_aligned: bool = True
    """Keep the workers on shared rail leaves and tell NCCL not to cross rails."""
    avoid_degraded: Literal["avoid", "penalize", "ignore"] = "avoid"
    """What to do with nodes whose fabric links are degraded."""
    on_degraded_link: Literal["ignore", "report", "restart-elsewhere", "restart-when-it-pays"] = (
        "report"
    )
    """What to do when a node that runs a rank turns degraded (the fabric agent's
    `FabricHealthy` condition and `topology.tpfabric.io/health` label): `report` sets the job's
    `Degraded` condition and posts an Event naming the rank, node, port and reason (straggler
    risk); `restart-elsewhere` also recreates the workers away from the node through the
    failure policy's restart path (not charged to `maxRestarts`); `restart-when-it-pays` does so
    only while running slow is expected to lose more time than the restart costs, weighed with
    `restartCost` (the condition says both sides); `ignore` does neither."""
    restart_cost: RestartCost | None = None
    """What a restart costs this job and how much a slow link slows it; required by
    `onDegradedLink: restart-when-it-pays`."""
    max_wait_seconds: Annotated[int, Field(ge=0, le=604800)] | None = None
    """With mode `preferred`: wait up to this long for a domain at `level` before relaxing to the
    next level (like Slurm's `--switches=N@time`). Unset: relax at once."""

    @model_validator(mode="after")
    def _restart_cost_given(self) -> TopologyPolicy:
        if self.on_degraded_link == "restart-when-it-pays" and self.restart_cost is None:
            raise ValueError(
                "onDegradedLink restart-when-it-pays needs restartCost.interNodeCommShare (the "
                "share of a step spent in collectives across nodes) to weigh a restart"
            )
        return self


class RdmaSpec(_Model):
    """RDMA devices for each worker and the GPUDirect RDMA policy."""

    resource_name: Annotated[str, Field(pattern=RESOURCE_NAME_PATTERN, max_length=253)] | None = (
        None
    )
    """Extended resource the RDMA device plugin advertises, e.g. `rdma/ib`,
    `rdma/rdma_shared_device_a` or `nvidia.com/hostdev`. Unset: the cluster's (the chart's
    `rdma.resourceName`)."""
    count: Annotated[int, Field(ge=0, le=64)] | None = None
    """RDMA devices (HCAs) requested per worker; 0 runs over TCP. Unset: a job of more than one
    worker gets what most GPU nodes that could hold a worker offer for its GPUs (none when they
    offer none: the `RDMA` condition then says so); a job of one worker gets none."""
    gpu_direct: Literal["required", "preferred", "disabled"] = "preferred"
    """`required`: the init container fails the pod when GPUDirect RDMA cannot work.
    `preferred`: fall back to TCP with a warning. `disabled`: plain sockets."""


class FailureRule(_Model):
    """One rule of `failurePolicy.rules`: when it matches a failed worker, `action` applies."""

    action: Literal["FailJob", "Restart", "RestartIgnoreLimit", "Ignore"]
    """`FailJob`: the job fails at once. `Restart`: restart as `restartStrategy` says, charged
    against `maxRestarts`. `RestartIgnoreLimit`: restart without charging `maxRestarts` (still
    after the backoff). `Ignore`: the worker is not restarted, nothing is charged, and the job
    goes on without it; for `successPolicy: AllWorkers` it counts as finished (at least one
    worker must succeed)."""
    on_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=list, max_length=64
    )
    """Matches when a container of the worker (init containers included) exited with one of
    these codes. Empty: no exit code condition."""
    on_pod_conditions: list[Annotated[str, Field(max_length=316)]] = Field(
        default_factory=list, max_length=16
    )
    """Matches when the worker pod carries one of these conditions with status True, e.g.
    `DisruptionTarget` (preempted, evicted, its node drained). Empty: no condition clause."""
    on_reasons: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=16
    )
    """Matches the failure's reason: `OOMKilled`, `InitContainerFailed`, `Error`, `Evicted` (a
    running pod deleted with a `DisruptionTarget` condition), `Deleted` (a running pod deleted),
    `Lost` (the pod disappeared), or the kubelet's own (`OutOfnvidia.com/gpu`,
    `UnexpectedAdmissionError`, ... when it refused the pod)."""

    @model_validator(mode="after")
    def _matches_something(self) -> FailureRule:
        if not (self.on_exit_codes or self.on_pod_conditions or self.on_reasons):
            raise ValueError("a rule needs onExitCodes, onPodConditions or onReasons")
        return self


class FailurePolicy(_Model):
    """How the job reacts when a worker fails or its node goes away."""

    restart_strategy: Literal["RecreateGang", "ReplaceWorker"] = "RecreateGang"
    """`RecreateGang`: any loss restarts the whole gang together: every pod of the attempt is
    stopped, the job waits until all are gone, then creates a new attempt (static rendezvous
    needs every rank to start again). `ReplaceWorker`: only the lost worker is replaced; only
    sound with an elastic rendezvous (`launcher.rendezvous: c10d`)."""
    replace_failed_workers: bool = True
    """Restart after a failed or deleted worker at all; `false` fails the job on the first loss."""
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 3
    """Restarts allowed before the job fails (`RestartsExhausted`). One restart is charged per
    incident, for either `restartStrategy`: an incident is every loss the operator sees at once
    (a node that takes two workers with it is one incident, and so is a gang restart); losses a
    rule or the defaults below do not charge (`RestartIgnoreLimit`, `Ignore`) are free."""
    backoff_seconds: Annotated[int, Field(ge=0, le=3600)] = 10
    """Delay after every loss before the restart is created."""
    rules: list[FailureRule] = Field(default_factory=list, max_length=32)
    """Ordered rules; the first that matches a failed worker decides. Without a match:
    `DisruptionTarget` -> `RestartIgnoreLimit`, a worker the kubelet refused because another
    pod had taken the node's devices first (reason `OutOf<resource>`, e.g.
    `OutOfnvidia.com/gpu`) -> `RestartIgnoreLimit`, anything else -> `Restart`."""
    keep_failed_pods: bool = True
    """Keep the failed pods of the last failed attempt (renamed out of the gang) for
    `kubectl logs`; older ones are deleted."""


class Launcher(_Model):
    """How the worker processes are started: the environment the operator gives them."""

    kind: Literal["torchrun", "none"] = "torchrun"
    """`torchrun`: `PET_*` variables so that a plain `torchrun train.py` forms the job
    (`PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK`, `PET_MASTER_ADDR`, `PET_MASTER_PORT`).
    `none`: only the generic variables (`NODE_RANK`, `NNODES`, `MASTER_ADDR`, ...)."""
    rendezvous: Literal["static", "c10d"] = "static"
    """`static`: rank 0 is the master (`--node-rank` fixed per worker). `c10d`: elastic
    rendezvous on worker 0 (`PET_RDZV_BACKEND=c10d`, `PET_RDZV_ENDPOINT`, `PET_RDZV_ID`: one per
    job and, under `RecreateGang`, per attempt), which `restartStrategy: ReplaceWorker`
    requires."""


class PodTemplate(_Model):
    """A pod template (`metadata` and `spec` as in a Deployment); at least one container."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, Any] = Field(default_factory=dict)
    """Labels and annotations copied to every worker pod."""
    spec: dict[str, Any]
    """The pod spec of every worker; its `containers` list must not be empty."""

    @field_validator("spec")
    @classmethod
    def _has_containers(cls, spec: dict[str, Any]) -> dict[str, Any]:
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError("spec.containers must list at least one container")
        return spec


class TensorParallelJobSpec(_Model):
    """The desired job: workers, parallelism, topology, RDMA, NCCL and the worker pod template."""

    workers: Annotated[int, Field(ge=1, le=1024)]
    """Worker pods, one per node (each worker owns `gpusPerWorker` GPUs)."""
    gpus_per_worker: Annotated[int, Field(ge=1, le=64)] = 8
    """`nvidia.com/gpu` requested by every worker."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=65536)]
    """GPUs in one tensor-parallel group; must divide `gpusPerWorker` or be a multiple of it."""
    pipeline_parallel_size: Annotated[int, Field(ge=1, le=1024)] = 1
    """Pipeline stages; `tensorParallelSize * pipelineParallelSize` must divide the GPUs of
    the job (the rest is data parallelism)."""
    topology: TopologyPolicy = Field(default_factory=TopologyPolicy)
    """Placement policy in the fabric."""
    rdma: RdmaSpec = Field(default_factory=RdmaSpec)
    """RDMA devices and GPUDirect policy; can change only while the job is suspended."""
    nccl: dict[Annotated[str, Field(pattern=NCCL_KEY_PATTERN)], str] = Field(default_factory=dict)
    """NCCL environment overrides, merged over what the init container derives."""
    template: PodTemplate
    """Template of every worker pod; can change only while the job is suspended (a replaced
    worker would otherwise run it beside workers of the old one)."""
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    """Reaction to failed workers."""
    success_policy: Literal["AllWorkers", "Rank0", "AnyWorker"] = "AllWorkers"
    """When the job has succeeded: every worker exited 0 (`AllWorkers`), worker 0 did (`Rank0`),
    or any worker did (`AnyWorker`). Workers still running then are stopped."""
    active_deadline_seconds: Annotated[int, Field(ge=1, le=31536000)] | None = None
    """Seconds the job may run (counted from `status.startTime`, reset by a suspend) before it
    fails with reason `DeadlineExceeded` and its pods are stopped. Unset: no limit."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=31536000)] | None = None
    """Delete the job (and by garbage collection its pods) this long after it Succeeded or
    Failed. Unset: keep it."""
    launcher: Launcher = Field(default_factory=Launcher)
    """The launcher whose environment the workers get; can change only while the job is
    suspended."""
    suspend: bool = False
    """Suspended jobs keep no pods; resuming plans the gang again. `template`, `rdma` and
    `launcher` may change while the job is suspended, or in the update that suspends it."""

    @model_validator(mode="after")
    def _parallelism_fits(self) -> TensorParallelJobSpec:
        tp, gpus = self.tensor_parallel_size, self.gpus_per_worker
        if tp % gpus and gpus % tp:
            raise ValueError(
                f"tensorParallelSize {tp} must divide gpusPerWorker {gpus} or be a multiple of it"
            )
        world = self.workers * gpus
        if world % (tp * self.pipeline_parallel_size):
            raise ValueError(
                f"tensorParallelSize x pipelineParallelSize ({tp} x "
                f"{self.pipeline_parallel_size}) must divide the job's {world} GPUs"
            )
        if (
            self.failure_policy.restart_strategy == "ReplaceWorker"
            and self.launcher.rendezvous != "c10d"
        ):
            raise ValueError(
                "failurePolicy.restartStrategy ReplaceWorker needs launcher.rendezvous c10d: "
                "with a static rendezvous the surviving workers cannot take a new one in"
            )
        return self


class Condition(_Model):
    """A status condition, as `metav1.Condition`."""

    model_config = ConfigDict(extra="ignore")

    type: str
    """Admitted, WorkersCreated, Suspended, Placed, Ready, Degraded, Failed, Succeeded, RDMA
    (whether the workers got RDMA devices, and why: False with `NotRequested` or
    `NodesOfferNone` runs over TCP), or InvalidSpec (True while the spec is one the operator
    cannot act on; not terminal)."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = ""
    """One CamelCase word for machines."""
    message: str = ""
    """What happened and what would fix it, for people."""
    last_transition_time: str | None = None
    """When `status` last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The `metadata.generation` this condition was computed for."""


class DomainReason(_Model):
    """Why one candidate domain could not take the job (shown while the job waits)."""

    model_config = ConfigDict(extra="ignore")

    level: str
    """Topology level of the domain."""
    domain: str
    """Domain id (a node label value)."""
    reason: str
    """The shortfall, e.g. `needs 4 nodes with 8 free GPUs, 2 fit (1 cordoned, 1 degraded)`."""


class RefusedNode(_Model):
    """A node kube-scheduler's own filters refused for the gang's workers (pod affinity, host
    ports, volumes...): the placer plans the gang without it until the refusal expires."""

    model_config = ConfigDict(extra="ignore")

    node: str
    """The refused node."""
    reason: str
    """What kube-scheduler said of the worker it could not bind there."""
    since: str
    """When the refusal was seen (RFC 3339); forgotten 10 minutes later."""


class HealthyRoom(_Model):
    """Whether the placer found room for the whole gang off its degraded nodes (for
    `onDegradedLink: restart-elsewhere` and `restart-when-it-pays`: the operator restarts a job
    away from degraded nodes only into room the placer found)."""

    model_config = ConfigDict(extra="ignore")

    found: bool
    """Whether a plan of the whole gang, with its own pods gone and every degraded node kept
    off, exists now."""
    degraded_nodes: list[str] = Field(default_factory=list)
    """The degraded nodes under the gang that the answer is for."""
    message: str = ""
    """Where the room is, or why there is none."""
    since: str | None = None
    """When the placer first gave this answer (RFC 3339); it looks again every 10 seconds and
    writes only a changed answer."""


class Placement(_Model):
    """The gang plan the placer persisted: survives restarts of every component."""

    model_config = ConfigDict(extra="ignore")

    state: Literal["Planned", "Waiting", "Replanning", "Invalid"] | None = None
    """`Planned`: the gang has a plan and its pods were released to the scheduler. `Waiting`:
    no domain can take the whole gang yet; `reasons` says why. `Replanning`: the plan could no
    longer be honoured (a worker did not bind within the bound, or no node of the domain can
    take a replacement); the released pods were deleted, the operator recreates them gated and
    the gang is planned again. `Invalid`: the job can never be planned as written (e.g. a
    topology level the cluster is not configured with); `message` says what to change."""
    message: str = ""
    """One line for people: the plan, or why the job waits and what would let it run."""
    level: str | None = None
    """Topology level of the chosen domain."""
    domain: str | None = None
    """The chosen domain (node label value at `level`)."""
    domain_labels: dict[str, str] = Field(default_factory=dict)
    """Label key -> value of every level from the top down to `level`: the exact domain, as node
    selectors match it."""
    nodes: list[str] = Field(default_factory=list)
    """Node of each rank, in rank order."""
    hops: int | None = None
    """Most switch hops between two workers on the same rail."""
    modelled_allreduce_us: float | None = None
    """Modelled all-reduce time of the placement (a model, not a measurement)."""
    planned_at: str | None = None
    """When the plan was made (RFC 3339)."""
    attempt: int | None = None
    """The attempt (`status.attempt`; for the Gang record of a LeaderWorkerSet group, a JobSet,
    or a pod group whose pods have a controller and their own rank, the number the gang webhook
    gives its pods) whose worker pods the plan was made for: the placer plans a gang once its
    first worker exists and releases the others as they are created (born released, or
    released as they appear); a pod of a later attempt is a replacement. Absent when the pods
    carry no `tpfabric.io/attempt` label (a bare pod group's or one ranked by creation, or a
    JobSet's pods admitted before the gang webhook saw their JobSet): such a gang is planned
    once all its workers exist."""
    released_at: str | None = None
    """When worker pods were last released to the scheduler (RFC 3339); a released pod not
    bound within the placer's bind bound drops the plan."""
    replaced_ranks: dict[str, str] = Field(default_factory=dict)
    """Ranks re-planned onto a new node for a replacement worker: rank -> uid of that pod."""
    waiting_since: str | None = None
    """When the whole gang first waited for a domain (RFC 3339); bounds `maxWaitSeconds`."""
    reasons: list[DomainReason] = Field(default_factory=list)
    """While waiting: why each candidate domain cannot take the job."""
    term: int | None = None
    """The lease term of the placer that wrote this placement (the placer Lease's
    `leaseTransitions` when it took the lease): a placer's write is refused unless the
    placement it computed from is still there, so a deposed placer never overwrites its
    successor's plan."""
    previous_nodes: list[str] = Field(default_factory=list)
    """While the gang has no plan: the nodes of its last plan, by rank (a plan dropped, a group
    its owner made again). The next plan prefers the domain holding most of them, and those
    nodes inside it, when the smallest level that fits has room there."""
    near: str | None = None
    """A Gang asked to be near another (`spec.near`): whether the plan is, and where, e.g.
    `near 'prefill' in spine 's1' (required)`."""
    healthy_room: HealthyRoom | None = None
    """While the running gang has a worker on a degraded node and asks to move off it: whether
    there is healthy room for it elsewhere now."""
    refused_nodes: list[RefusedNode] = Field(default_factory=list)
    """Nodes kube-scheduler's own filters refused for this gang's released workers (they did
    not bind within the bind bound although the placer saw room): the gang is planned without
    them for 10 minutes, so a plan kube-scheduler cannot bind is not rebuilt identically."""


class LastFailure(_Model):
    """The most recent failure of a worker: what the restart (or the job's failure) was for."""

    model_config = ConfigDict(extra="ignore")

    worker: int
    """Index (rank) of the worker that failed or was lost."""
    reason: str
    """`Error`, `OOMKilled`, `Killed`, `InitContainerFailed`, `Evicted`, `Deleted`, `Lost`, or the
    pod's own status reason."""
    message: str = ""
    """What happened, e.g. `container trainer exited 137 (OOMKilled)`."""
    exit_code: int | None = None
    """Exit code of the container that failed, when one did."""
    pod: str = ""
    """The failed pod (kept for `kubectl logs` when `keepFailedPods`)."""
    time: str
    """When the failure was seen (RFC 3339)."""


class TensorParallelJobStatus(_Model):
    """Observed state, written by the operator and the placer."""

    model_config = ConfigDict(extra="ignore")

    phase: (
        Literal[
            "Pending",
            "Waiting",
            "Placed",
            "Running",
            "Restarting",
            "Succeeded",
            "Failed",
            "Suspended",
        ]
        | None
    ) = None
    """Lifecycle phase."""
    ready: str | None = None
    """Ready workers over all workers, e.g. `3/4` (for `kubectl get`)."""
    workers_ready: int = 0
    """Workers whose pods are Ready."""
    workers_total: int = 0
    """Workers of the job."""
    restarts: int = 0
    """Restarts charged against `maxRestarts` so far (one per incident)."""
    attempt: int = 0
    """The current attempt of the gang: bumped by each gang restart; pod names carry it."""
    start_time: str | None = None
    """When the workers were first created for this run (RFC 3339); reset by a suspend."""
    completion_time: str | None = None
    """When the job Succeeded or Failed (RFC 3339)."""
    restarting_workers: list[int] = Field(default_factory=list)
    """Workers whose restart is charged and whose new pods are not created yet (after the
    backoff, and once every pod of the older attempt is gone)."""
    succeeded_workers: list[int] = Field(default_factory=list)
    """Workers that exited 0 (never started again, even when their pods are later deleted)."""
    last_failure: LastFailure | None = None
    """The last worker failure."""
    workers_created: bool = False
    """Whether the whole set of worker pods was created once (a missing worker is then lost)."""
    last_failure_time: str | None = None
    """When a worker was last lost or failed (RFC 3339); starts the replacement backoff."""
    moved_off_nodes: list[str] = Field(default_factory=list)
    """Degraded nodes the job was restarted away from (`onDegradedLink: restart-elsewhere` or
    `restart-when-it-pays`) that are still degraded. A job the placer could only put back on
    them (no healthy room, with `avoidDegraded: penalize` or `ignore`) is not restarted again
    while its degraded nodes are all among these; a node leaves the list once it is healthy."""
    placement: Placement | None = None
    """The persisted gang plan, or why the job waits."""
    conditions: list[Condition] = Field(default_factory=list)
    """Admitted, WorkersCreated, Suspended, Placed, Ready, Degraded, Failed, Succeeded and,
    after an invalid spec, InvalidSpec."""
    observed_generation: int | None = None
    """The `metadata.generation` the status describes."""


class TensorParallelJob(_Model):
    """A tensor-parallel job: a gang of GPU worker pods placed together in the fabric."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["tpfabric.io/v1alpha1"] = API_VERSION
    kind: Literal["TensorParallelJob"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TensorParallelJobSpec
    status: TensorParallelJobStatus | None = None

    @model_validator(mode="after")
    def _name_fits_hostnames(self) -> TensorParallelJob:
        name = str(self.metadata.get("name") or "")
        if len(name) > MAX_NAME_LENGTH:
            raise ValueError(
                f"metadata.name {name!r} has {len(name)} characters; at most {MAX_NAME_LENGTH} "
                "keep the worker hostnames (<name>-worker-<index>) within 63"
            )
        return self
