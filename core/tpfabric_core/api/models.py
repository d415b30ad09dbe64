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
    "GANG_GATE",
    "GROUP",
    "JOB_LABEL",
    "KIND",
    "LEVELS",
    "PLURAL",
    "SCHEDULER_NAME",
    "VERSION",
    "WORKER_INDEX_LABEL",
    "Condition",
    "DomainReason",
    "FailurePolicy",
    "Placement",
    "RdmaSpec",
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
    max_wait_seconds: Annotated[int, Field(ge=0, le=604800)] | None = None
    """With mode `preferred`: wait up to this long for a domain at `level` before relaxing to the
    next level (like Slurm's `--switches=N@time`). Unset: relax at once."""


class RdmaSpec(_Model):
    """RDMA devices for each worker and the GPUDirect RDMA policy."""

    resource_name: Annotated[str, Field(pattern=RESOURCE_NAME_PATTERN, max_length=253)] = "rdma/ib"
    """Extended resource the RDMA device plugin advertises, e.g. `rdma/ib` or
    `nvidia.com/hostdev`."""
    count: Annotated[int, Field(ge=0, le=64)] = 8
    """RDMA devices (HCAs) requested per worker; 0 runs over TCP."""
    gpu_direct: Literal["required", "preferred", "disabled"] = "preferred"
    """`required`: the init container fails the pod when GPUDirect RDMA cannot work.
    `preferred`: fall back to TCP with a warning. `disabled`: plain sockets."""


class FailurePolicy(_Model):
    """How the job reacts when a worker fails or its node goes away."""

    replace_failed_workers: bool = True
    """Replace a failed or deleted worker pod, in the same domain when capacity exists."""
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 3
    """Worker replacements allowed before the job is marked Failed."""
    backoff_seconds: Annotated[int, Field(ge=0, le=3600)] = 10
    """Delay before a replacement is created."""


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
    """RDMA devices and GPUDirect policy."""
    nccl: dict[Annotated[str, Field(pattern=NCCL_KEY_PATTERN)], str] = Field(default_factory=dict)
    """NCCL environment overrides, merged over what the init container derives."""
    template: PodTemplate
    """Template of every worker pod."""
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    """Reaction to failed workers."""
    suspend: bool = False
    """Suspended jobs keep no pods; resuming plans the gang again."""

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
        return self


class Condition(_Model):
    """A status condition, as `metav1.Condition`."""

    model_config = ConfigDict(extra="ignore")

    type: str
    """Admitted, Placed, Ready, Degraded, Failed or Succeeded."""
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
    released_at: str | None = None
    """When worker pods were last released to the scheduler (RFC 3339); a released pod not
    bound within the placer's bind bound drops the plan."""
    replaced_ranks: dict[str, str] = Field(default_factory=dict)
    """Ranks re-planned onto a new node for a replacement worker: rank -> uid of that pod."""
    waiting_since: str | None = None
    """When the whole gang first waited for a domain (RFC 3339); bounds `maxWaitSeconds`."""
    reasons: list[DomainReason] = Field(default_factory=list)
    """While waiting: why each candidate domain cannot take the job."""


class TensorParallelJobStatus(_Model):
    """Observed state, written by the operator and the placer."""

    model_config = ConfigDict(extra="ignore")

    phase: (
        Literal["Pending", "Waiting", "Placed", "Running", "Succeeded", "Failed", "Suspended"]
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
    """Worker replacements so far."""
    workers_created: bool = False
    """Whether the whole set of worker pods was created once (a missing worker is then lost)."""
    last_failure_time: str | None = None
    """When a worker was last lost or failed (RFC 3339); starts the replacement backoff."""
    placement: Placement | None = None
    """The persisted gang plan, or why the job waits."""
    conditions: list[Condition] = Field(default_factory=list)
    """Admitted, Placed, Ready, Degraded, Failed, Succeeded."""
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
