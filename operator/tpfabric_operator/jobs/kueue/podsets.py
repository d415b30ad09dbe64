"""What a Kueue admission decides for a job's worker pods: pure.

Kueue's job reconciler starts an admitted job with ``RunWithPodSetsInfo``: the pod template gets
the node labels and tolerations of the ResourceFlavors the quota was charged to, and the
labels, annotations, node selector and tolerations of every Ready admission check's
``podSetUpdates`` (a ProvisioningRequest's capacity, for one); on suspend
``RestorePodSetsInfo`` takes them off again. A TensorParallelJob's template is never changed:
the operator applies :class:`PodSetInfo` to each worker it creates, and a suspended job has no
workers, so nothing is left to restore.

A topology assignment (a ClusterQueue whose flavor has a ``topologyName``: Kueue's TAS) is a
hard constraint of the plan: every worker gets a required node affinity on the assignment's
lowest level (``In`` its domains). The placer honours required node affinity when it plans, so
the gang is placed inside the domains Kueue accounted, and Kueue's books and the nodes the
workers run on agree. Within them tpfabric still picks the ranks' order and rails. The workers
also carry Kueue's TAS annotation (as Kueue's own jobs do), so Kueue does not count them a second
time as non-TAS pods. Kueue's ``kueue.x-k8s.io/topology`` scheduling gate is not added: the
placer releases the gang, Kueue's ungater has nothing to do.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.placement.steering import narrow_affinity

__all__ = ["PodSetInfo", "admitted_pod_set", "flavor_names", "topology_domains"]

POD_SET = "workers"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"


@dataclass(slots=True)
class PodSetInfo:
    """What an admission adds to each worker pod."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    #: (the assignment's lowest level's node label, its domains): Kueue's TAS
    topology: tuple[str, tuple[str, ...]] | None = None
    #: why the admission cannot be applied (a conflict); the job then creates no pod
    conflict: str = ""

    def add(self, selector: Mapping[str, Any] | None, tolerations: list[Any] | None) -> None:
        """Add node labels to the selector and tolerations (no repeats)."""
        self.node_selector.update({str(k): str(v) for k, v in (selector or {}).items()})
        self.tolerations += [t for t in tolerations or [] if t not in self.tolerations]

    def words(self) -> str:
        """Return what the admission puts on the workers, in a few words (for the status)."""
        parts = []
        if self.node_selector:
            parts.append(
                "nodes " + ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
            )
        if self.topology:
            key, domains = self.topology
            shown = ",".join(domains[:4]) + (f",+{len(domains) - 4}" if len(domains) > 4 else "")
            parts.append(f"topology {key} in {shown}")
        return "; ".join(parts)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Return the worker pod ``manifest`` with the admission applied (a copy)."""
        pod = copy.deepcopy(manifest)
        meta, spec = pod["metadata"], pod["spec"]
        meta["labels"] = {**self.labels, **(meta.get("labels") or {})}
        meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
        if self.node_selector:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **self.node_selector}
        if self.tolerations:
            existing = list(spec.get("tolerations") or [])
            spec["tolerations"] = existing + [t for t in self.tolerations if t not in existing]
        if self.topology is not None:
            key, domains = self.topology
            expressions = [{"key": key, "operator": "In", "values": list(domains)}]
            spec["affinity"] = narrow_affinity(spec.get("affinity"), expressions)
        return pod


def flavor_names(workload: Mapping[str, Any]) -> list[str]:
    """Return the ResourceFlavors the workers' pod set was admitted to (sorted, no repeats)."""
    names: set[str] = set()
    for assignment in _assignments(workload):
        names.update(str(f) for f in (assignment.get("flavors") or {}).values())
    return sorted(names)


def _assignments(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    admission = (workload.get("status") or {}).get("admission") or {}
    return [
        a for a in admission.get("podSetAssignments") or [] if a.get("name", POD_SET) == POD_SET
    ]


def _value(values: Mapping[str, Any], index: int) -> str:
    if values.get("universal") is not None:
        return str(values["universal"])
    individual = values.get("individual") or {}
    roots = individual.get("roots") or []
    return f"{individual.get('prefix') or ''}{roots[index]}{individual.get('suffix') or ''}"


def topology_domains(assignment: Mapping[str, Any]) -> tuple[str, list[tuple[str, int]]] | None:
    """Return (lowest level key, [(domain, pods)]) of a v1beta2 ``topologyAssignment``, or None.

    The compact form: ``levels`` from the highest to the lowest, ``slices`` of ``domainCount``
    domains whose values per level are one ``universal`` value or ``individual`` roots with an
    optional prefix and suffix, and pod counts the same way.
    """
    levels = list(assignment.get("levels") or [])
    if not levels:
        return None
    domains: list[tuple[str, int]] = []
    for piece in assignment.get("slices") or []:
        count = int(piece.get("domainCount") or 0)
        per_level = piece.get("valuesPerLevel") or []
        if len(per_level) != len(levels):
            continue
        pods = piece.get("podCounts") or {}
        for index in range(count):
            try:
                value = _value(per_level[-1], index)
                counted = (
                    int(pods["universal"])
                    if pods.get("universal") is not None
                    else int((pods.get("individual") or [])[index])
                )
            except (IndexError, KeyError, TypeError, ValueError):
                continue
            domains.append((value, counted))
    return levels[-1], domains


def _merge(into: dict[str, str], extra: Mapping[str, Any], what: str, source: str) -> str:
    for key, value in extra.items():
        if key in into and into[key] != str(value):
            return f"{what} {key}={into[key]} conflicts with {source}'s {key}={value}"
        into[key] = str(value)
    return ""


def admitted_pod_set(
    workload: Mapping[str, Any],
    flavors: Mapping[str, Mapping[str, Any]],
    template_selector: Mapping[str, str],
) -> PodSetInfo:
    """Return what the admission of ``workload`` adds to each worker.

    ``flavors``: the ResourceFlavor objects by name (those of :func:`flavor_names`);
    ``template_selector``: the job template's own ``nodeSelector``, which an admission may add to
    but never contradict (Kueue refuses such a start too).
    """
    info = PodSetInfo()
    selector = {str(k): str(v) for k, v in template_selector.items()}
    for name in flavor_names(workload):
        flavor = flavors.get(name)
        if flavor is None:
            info.conflict = f"ResourceFlavor {name} of the admission is not found"
            return info
        flavor_spec = flavor.get("spec") or {}
        info.conflict = _merge(
            selector, flavor_spec.get("nodeLabels") or {}, "nodeSelector", f"flavor {name}"
        )
        if info.conflict:
            return info
        info.add(flavor_spec.get("nodeLabels"), flavor_spec.get("tolerations"))
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if check.get("state") != "Ready":
            continue
        for update in check.get("podSetUpdates") or []:
            if update.get("name") != POD_SET:
                continue
            source = f"admission check {check.get('name')}"
            for what, into, extra in (
                ("nodeSelector", selector, update.get("nodeSelector") or {}),
                ("label", info.labels, update.get("labels") or {}),
                ("annotation", info.annotations, update.get("annotations") or {}),
            ):
                info.conflict = _merge(into, extra, what, source)
                if info.conflict:
                    return info
            info.add(update.get("nodeSelector"), update.get("tolerations"))
    for assignment in _assignments(workload):
        topology = assignment.get("topologyAssignment")
        decoded = topology_domains(topology) if topology else None
        if decoded is not None and decoded[1]:
            key, domains = decoded
            info.topology = (key, tuple(sorted({d for d, _ in domains})))
            info.annotations.update(_tas_marker(workload))
    return info


def _tas_marker(workload: Mapping[str, Any]) -> dict[str, str]:
    """Return the annotation that tells Kueue a worker is a TAS pod, as ``RunWithPodSetsInfo``
    sets it: the pod set's topology request, or "unconstrained" for an implied one. Kueue counts
    a pod without it as non-TAS usage of its node, on top of the workload's assignment: the
    same GPUs counted twice."""
    pod_set: Mapping[str, Any] = next(
        (p for p in (workload.get("spec") or {}).get("podSets") or [] if p.get("name") == POD_SET),
        {},
    )
    request = pod_set.get("topologyRequest") or {}
    if request.get("required"):
        return {REQUIRED_TOPOLOGY: str(request["required"])}
    if request.get("preferred"):
        return {PREFERRED_TOPOLOGY: str(request["preferred"])}
    return {UNCONSTRAINED_TOPOLOGY: "true"}
