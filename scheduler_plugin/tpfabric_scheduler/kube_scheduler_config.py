"""The KubeSchedulerConfiguration of the tpfabric scheduler process.

``extenders`` sit at the top level of a KubeSchedulerConfiguration and apply to every profile of
that kube-scheduler process, so tpfabric runs its own kube-scheduler with one profile,
``tpfabric-scheduler``, beside the cluster's default scheduler (which stays untouched).
``percentageOfNodesToScore: 100`` makes the scheduler send every feasible node to the extender;
the planned domain is also enforced by the pod's own node affinity, so a partial node list can
never move a worker out of its domain. Used by the local cluster launcher and the Helm chart.

``DefaultPreemption`` (kube-scheduler's only PostFilter plugin) is off in this profile. It
preempts per pod: a released worker whose planned node another pod has taken would evict
lower-priority pods there -- a running member of another gang, which then restarts whole --
while the placer re-plans the waiting gang within its bind bound anyway. A gang either fits
whole or waits; no running gang ever loses a member to a waiting one. Workers keep whatever
``preemptionPolicy`` their PriorityClass gives them (the Priority admission plugin refuses a
pod that sets its own), which only matters to the default scheduler's profiles, never this one.

``clientConnection`` raises kube-scheduler's client rate limit from the built-in 50 QPS (burst
100) to ``CLIENT_QPS``/``CLIENT_BURST``: every bind is one API write, so at 50/s a burst of gangs
(1,100 workers) spends 22 s in the scheduler's own rate limiter while the API server idles. This
kube-scheduler only schedules tpfabric workers, which the placer releases a gang at a time; the
API server's priority and fairness still guards everything else.
"""

from __future__ import annotations

from typing import Any

from tpfabric_core.api import SCHEDULER_NAME

__all__ = ["CLIENT_BURST", "CLIENT_QPS", "SCHEDULER_NAME", "scheduler_configuration"]

CLIENT_QPS = 200
CLIENT_BURST = 400


def scheduler_configuration(
    extender_url: str,
    *,
    weight: int = 10,
    timeout: str = "5s",
    scheduler_name: str = SCHEDULER_NAME,
    qps: int = CLIENT_QPS,
    burst: int = CLIENT_BURST,
) -> dict[str, Any]:
    """Return the KubeSchedulerConfiguration dict for a scheduler with our extender."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": qps, "burst": burst},
        "percentageOfNodesToScore": 100,
        "profiles": [
            {
                "schedulerName": scheduler_name,
                "percentageOfNodesToScore": 100,
                # no preemption by this scheduler: gangs are whole or not at all (see module doc)
                "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
            }
        ],
        "extenders": [
            {
                "urlPrefix": extender_url.rstrip("/"),
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": weight,
                "nodeCacheCapable": True,
                "enableHTTPS": extender_url.startswith("https://"),
                "httpTimeout": timeout,
                # workers must never be scheduled without the extender's domain checks
                "ignorable": False,
            }
        ],
    }
