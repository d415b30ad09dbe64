"""What the chart must give the extender and its kube-scheduler: their memory at scale, measured.

:func:`run_sizing` brings up a local control plane (real etcd, kube-apiserver,
kube-controller-manager, the default kube-scheduler and kwok) with ``nodes`` kwok nodes of
``uniform_fabric``, stops kwok and kube-controller-manager once the nodes are Ready (the caches are
measured, not kubelets), and creates ``pods`` pods bound to them (the pods of
:class:`~tpfabric_bench._fake_apiserver.ClusterShape` as their creators submit them: 5-10 KB each
once the API server has defaulted them; the TensorParallelJob workers of running jobs, gated workers
of waiting jobs, DaemonSet, Deployment and finished batch pods). Only then does it start the real
extender/placer process (``python -m tpfabric_scheduler``, as the chart runs it) and tpfabric's
kube-scheduler (the chart's configuration), so each lists the whole cluster at start, as after a
roll-out. Once the extender is ready (its informers listed) and both have settled, it reads the
resident memory (``VmRSS``) and its peak (``VmHWM``, the list included) of each, and of the
cluster's default kube-scheduler (the same caches, no extender) beside them.

This module measures; it must never be imported by the product or assert on a number.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psutil
from rich.table import Table

from tpfabric_bench._fake_apiserver import ClusterShape, api_pod, as_submitted
from tpfabric_bench._harness import local_cluster, start_placer, vm_hwm_mib, wait
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_scheduler.kube_scheduler_config import SCHEDULER_NAME, scheduler_configuration

__all__ = ["run_sizing", "sizing_table"]

NAMESPACE = "bench-sizing"
SCHEDULER_COMPONENT = "kube-scheduler-tpfabric"
SETTLE_SECONDS = 20.0
CREATE_CONCURRENCY = 16


def _submitted(shape: ClusterShape, k: int) -> dict[str, Any]:
    """Return pod ``k`` of ``shape`` as its creator submits it (bound by ``nodeName``, or
    pending for tpfabric's scheduler when it has no node)."""
    pod = api_pod(shape, k)
    meta = pod["metadata"]
    spec = as_submitted(pod["spec"])
    if pod["spec"].get("nodeName"):
        spec["nodeName"] = pod["spec"]["nodeName"]
    if pod["spec"].get("schedulerName") == SCHEDULER_NAME:
        spec["schedulerName"] = SCHEDULER_NAME
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": meta.get("labels") or {},
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if not k.startswith("kubectl.kubernetes.io/")
            },
        },
        "spec": spec,
    }


def _memory_of(pid: int) -> dict[str, float]:
    """Return ``rss`` and ``hwm`` (the kernel's peak) of ``pid`` in MiB (empty if gone)."""
    with suppress(psutil.Error):
        return {
            "rss": round(psutil.Process(pid).memory_info().rss / 2**20, 1),
            "hwm": vm_hwm_mib(pid) or 0.0,
        }
    return {}


def run_sizing(*, nodes: int, pods: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Return the memory of the extender and of kube-scheduler with ``nodes`` nodes and
    ``pods`` pods (a local control plane; see the module docstring)."""
    from kubernetes import client  # noqa: PLC0415

    shape = ClusterShape(pods, nodes)
    result: dict[str, Any] = {"nodes": nodes, "pods": pods}
    with local_cluster(uniform_fabric(nodes), NAMESPACE, log, result, ready_timeout=3600) as (
        cluster,
        api,
    ):
        core = client.CoreV1Api(api)
        bodies = [_submitted(shape, k) for k in range(pods)]
        namespaces = sorted({b["metadata"]["namespace"] for b in bodies})
        for namespace in namespaces:
            with suppress(client.ApiException):
                core.create_namespace({"metadata": {"name": namespace}})
        wait(
            lambda: all(core.list_namespaced_service_account(n).items for n in namespaces),
            120,
            "the namespaces' default service accounts",
        )
        # what is measured is caches, not kubelets: 5,000 simulated kubelets (and the node
        # lifecycle controller that would mark them NotReady without them) slowed pod creation
        # tenfold on 2 cores. The nodes stay as they were, Ready; the pods stay bound, Pending
        for simulator in ("kwok", "kube-controller-manager"):
            cluster.stop_component(simulator)
        log(f"sizing: creating {pods:,} pods on {nodes:,} nodes")
        started = time.perf_counter()

        def create(body: dict[str, Any]) -> None:
            namespace = body["metadata"]["namespace"]
            core.create_namespaced_pod(namespace, body, _preload_content=False).read()

        with concurrent.futures.ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
            for _ in pool.map(create, bodies):
                pass
        result["create_s"] = round(time.perf_counter() - started, 1)
        del bodies
        log(f"sizing: {pods:,} pods created in {result['create_s']} s; starting the extender")
        started = time.perf_counter()
        port = start_placer(cluster, timeout=1800)  # ready: every informer has listed
        result["extender_ready_s"] = round(time.perf_counter() - started, 1)
        cluster.start_scheduler(
            SCHEDULER_COMPONENT, scheduler_configuration(f"http://127.0.0.1:{port}")
        )
        log(f"sizing: extender ready in {result['extender_ready_s']} s; settling")
        time.sleep(SETTLE_SECONDS)
        state = cluster.state()
        pids = {
            "extender": state.components["tpfabric-extender"].pid,
            "kube-scheduler (tpfabric)": state.components[SCHEDULER_COMPONENT].pid,
            "kube-scheduler (default)": state.components["kube-scheduler"].pid,
            "kube-apiserver": state.components["kube-apiserver"].pid,
        }
        result["memory_mib"] = {name: _memory_of(pid) for name, pid in pids.items()}
    return result


def sizing_table(result: dict[str, Any]) -> Table:
    """Return the rich table of the sizing run."""
    table = Table(
        "process",
        "RSS MiB",
        "peak MiB (the start-up list included)",
        title=(
            f"(e) memory with {result['nodes']:,} nodes and {result['pods']:,} pods, each process "
            f"started after the pods existed (pods created in {result['create_s']:.0f} s)"
        ),
    )
    for name, memory in result["memory_mib"].items():
        table.add_row(name, f"{memory.get('rss', 0):,.0f}", f"{memory.get('hwm', 0):,.0f}")
    return table
