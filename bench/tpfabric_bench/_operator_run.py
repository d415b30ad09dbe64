"""What the operator benchmark runs and measures, shared by its measurement, its tables and the
benchmarks built on its harness (gangs, fleet): the fabric's leaf size, the sampled components,
the kube-scheduler of each phase and the stages of a gang.
"""

from __future__ import annotations

__all__ = ["COMPONENTS", "NODES_PER_LEAF", "SCHEDULER", "STAGES"]

NODES_PER_LEAF = 8
COMPONENTS = (
    "tpfabric-operator",
    "tpfabric-extender",
    "kube-scheduler-tpfabric",
    "kube-scheduler",
    "kube-apiserver",
    "kube-controller-manager",
    "etcd",
    "kwok",
)
#: the phase's scheduler: the default one schedules the plain pods, tpfabric's the workers
SCHEDULER = {
    "baseline": "kube-scheduler",
    # the gangs benchmark's arm of pods wired by hand: no tpfabric, the default scheduler
    "wired": "kube-scheduler",
    "tpfabric": "kube-scheduler-tpfabric",
}
#: the stages of a gang, in order, and what each one measures
STAGES = (
    ("created", "operator: create call → all workers exist"),
    ("planned", "placer: → Planned"),
    ("released", "placer: → all workers ungated"),
    ("bound", "kube-scheduler: → all workers bound"),
    ("pods_running", "kwok (the kubelet): → all workers Running"),
    ("running", "operator: → job Running (status)"),
)
