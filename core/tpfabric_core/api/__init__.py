"""The ``tpfabric.io/v1alpha1`` TensorParallelJob API as pydantic models: the single source of the
CRD (``crd.py`` generates it) and of the validation the operator applies to what it reads."""

from tpfabric_core.api.models import (
    API_VERSION,
    GANG_GATE,
    GROUP,
    JOB_LABEL,
    KIND,
    PLURAL,
    SCHEDULER_NAME,
    VERSION,
    WORKER_INDEX_LABEL,
    Condition,
    DomainReason,
    FailurePolicy,
    Placement,
    RdmaSpec,
    TensorParallelJob,
    TensorParallelJobSpec,
    TensorParallelJobStatus,
    TopologyPolicy,
)

__all__ = [
    "API_VERSION",
    "GANG_GATE",
    "GROUP",
    "JOB_LABEL",
    "KIND",
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
