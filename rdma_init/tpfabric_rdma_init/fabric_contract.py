"""The fabric's contract applied to one pod: service level, traffic classes, ECMP spreading and
rail/plane identity in NCCL, each key with the reason it is written (or not).

The profile comes from the chart (``fabric.profile``, validated by the operator or the gang
webhook against ``tpfabric_core.fabric_profile``) as one JSON object (``--fabric-profile``);
:func:`read_profile` reads that canonical form and checks it again, because a hand-run
``rdma-init`` gets it from a flag. What applies depends on the pod:

- InfiniBand ports and a declared service level: ``NCCL_IB_SL``, and
  ``NCCL_IB_ADAPTIVE_ROUTING=1`` when the subnet manager enables adaptive routing on it;
- RoCE ports and a declared lossless class: ``NCCL_IB_TC`` and ``NCCL_IB_FIFO_TC`` (the latter
  only for an NCCL that reads it, >= 2.22);
- neither when the job sets per-communicator traffic classes itself (pod annotation
  ``tpfabric.io/traffic-class: per-communicator``: NCCL's ``ncclConfig_t.trafficClass``);
- a plan whose level (``tpfabric.io/plan-level``, written by the placer) is one of the
  profile's ECMP levels: ``NCCL_IB_QPS_PER_CONNECTION`` and ``NCCL_IB_SPLIT_DATA_ON_QPS``. No
  plan level (a pod the placer did not annotate): unknown, so nothing is written and the
  report says so; NCCL's defaults are right for a single leaf and only slower across ECMP;
- ``<hca>:<port>:<rail>[:<plane>]`` in ``NCCL_IB_HCA`` only for an NCCL known to read them
  (:data:`~tpfabric_rdma_init.nccl_versions.RAIL_PLANE_SINCE`); never for an image whose NCCL
  version is unknown.

A profile declared for the other link layer than the pod's ports is a warning, never a key.
Pure: values in, settings and reasons out; standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpfabric_rdma_init.affinity import FabricSelection, NicPort, RailAssignment
from tpfabric_rdma_init.nccl_versions import (
    RAIL_PLANE_SINCE,
    NcclVersion,
    knows,
    version_text,
)

__all__ = [
    "PER_COMMUNICATOR",
    "PLAN_LEVEL_ANNOTATION",
    "TRAFFIC_CLASS_ANNOTATION",
    "ContractSettings",
    "FabricContract",
    "ProfileError",
    "apply_contract",
    "rail_plane_hca",
    "read_profile",
]

PLAN_LEVEL_ANNOTATION = "tpfabric.io/plan-level"
TRAFFIC_CLASS_ANNOTATION = "tpfabric.io/traffic-class"
PER_COMMUNICATOR = "per-communicator"
_LINK_LAYERS = {"infiniband": "InfiniBand", "roce": "Ethernet"}


class ProfileError(ValueError):
    """The fabric profile cannot be used; ``str()`` names the field and the fix."""


@dataclass(frozen=True)
class FabricContract:
    """The profile's values this program acts on (see ``tpfabric_core.fabric_profile``)."""

    link_layer: str = ""
    ar_service_levels: tuple[int, ...] = ()
    service_level: int | None = None
    traffic_class: int | None = None
    fifo_traffic_class: int | None = None
    ecmp_levels: tuple[str, ...] = ()
    qps_per_connection: int = 4
    split_data_on_qps: bool = False
    sharp: bool = False
    rail_plane: bool = True

    @property
    def chosen_service_level(self) -> int | None:
        """Return the SL to use: the declared one, else the lowest AR-enabled one."""
        if self.service_level is not None:
            return self.service_level
        return min(self.ar_service_levels, default=None)

    @property
    def chosen_fifo_class(self) -> int | None:
        """Return NCCL's control-message class: the declared one, else the lossless class."""
        return (
            self.fifo_traffic_class if self.fifo_traffic_class is not None else (self.traffic_class)
        )


def _int(data: Mapping[str, Any], key: str, top: int, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ProfileError(f"--fabric-profile: {where}.{key} must be an integer 0..{top}, "
                           f"not {value!r}")  # fmt: skip
    return value


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ProfileError(f"--fabric-profile: fabric.profile.{key} must be an object")
    return value


def read_profile(text: str | None) -> FabricContract:
    """Return the contract of the profile JSON (empty or None: nothing declared)."""
    if text is None or not text.strip():
        return FabricContract()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProfileError(f"--fabric-profile: not JSON ({err.msg}); pass the chart's "
                           "fabric.profile as one JSON object") from err  # fmt: skip
    if not isinstance(data, dict):
        raise ProfileError("--fabric-profile: expected a JSON object (the chart's fabric.profile)")
    link = data.get("linkLayer") or ""
    if link not in ("", *_LINK_LAYERS):
        raise ProfileError(f"--fabric-profile: fabric.profile.linkLayer {link!r} is none of "
                           "infiniband, roce")  # fmt: skip
    ib, roce, ecmp = (_section(data, k) for k in ("infiniband", "roce", "ecmp"))
    levels = ib.get("adaptiveRoutingServiceLevels") or []
    if not isinstance(levels, list):
        raise ProfileError("--fabric-profile: fabric.profile.infiniband."
                           "adaptiveRoutingServiceLevels must be a list of 0..15")  # fmt: skip
    found = {
        _int({f"adaptiveRoutingServiceLevels[{i}]": x}, f"adaptiveRoutingServiceLevels[{i}]",
             15, "fabric.profile.infiniband")
        for i, x in enumerate(levels)
    }  # fmt: skip
    ar = tuple(sorted(level for level in found if level is not None))
    qps = ecmp.get("qpsPerConnection", 4)
    if isinstance(qps, bool) or not isinstance(qps, int) or not 1 <= qps <= 128:
        raise ProfileError(f"--fabric-profile: fabric.profile.ecmp.qpsPerConnection must be "
                           f"1..128, not {qps!r}")  # fmt: skip
    return FabricContract(
        link_layer=link,
        ar_service_levels=ar,
        service_level=_int(ib, "serviceLevel", 15, "fabric.profile.infiniband"),
        traffic_class=_int(roce, "trafficClass", 255, "fabric.profile.roce"),
        fifo_traffic_class=_int(roce, "fifoTrafficClass", 255, "fabric.profile.roce"),
        ecmp_levels=tuple(str(level) for level in ecmp.get("levels") or ()),
        qps_per_connection=qps,
        split_data_on_qps=bool(ecmp.get("splitDataOnQps", False)),
        sharp=bool(data.get("sharp", False)),
        rail_plane=bool(_section(data, "nccl").get("railPlane", True)),
    )


@dataclass
class ContractSettings:
    """What the contract adds to one pod's NCCL config, and why each key is there or not."""

    settings: dict[str, str] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    """key -> why it is written."""
    not_written: dict[str, str] = field(default_factory=dict)
    """key -> why it is not."""
    warnings: list[str] = field(default_factory=list)

    def put(self, key: str, value: str, why: str) -> None:
        """Write ``key`` with its reason."""
        self.settings[key] = value
        self.written[key] = why

    def skip(self, key: str, why: str) -> None:
        """Say why ``key`` is not written."""
        self.not_written[key] = why


def _service_level(contract: FabricContract, out: ContractSettings, per_comm: bool) -> None:
    level = contract.chosen_service_level
    if level is None:
        return
    if per_comm:
        out.skip("NCCL_IB_SL", f"the job sets per-communicator traffic classes "
                 f"({TRAFFIC_CLASS_ANNOTATION}: {PER_COMMUNICATOR})")  # fmt: skip
        return
    source = (
        "the profile's infiniband.serviceLevel"
        if contract.service_level is not None
        else "the lowest adaptive-routing service level of the profile"
    )
    out.put("NCCL_IB_SL", str(level), f"SL {level}: {source}")
    if level in contract.ar_service_levels:
        why = f"the subnet manager enables adaptive routing on SL {level} (ar_sl_mask)"
        out.put("NCCL_IB_ADAPTIVE_ROUTING", "1", why)
    else:
        out.skip("NCCL_IB_ADAPTIVE_ROUTING", f"SL {level} is not among the profile's adaptive-"
                 f"routing service levels {list(contract.ar_service_levels)}")  # fmt: skip


def _traffic_class(
    contract: FabricContract, out: ContractSettings, per_comm: bool, version: NcclVersion | None
) -> None:
    if contract.traffic_class is None:
        return
    if per_comm:
        for key in ("NCCL_IB_TC", "NCCL_IB_FIFO_TC"):
            out.skip(key, f"the job sets per-communicator traffic classes "
                     f"({TRAFFIC_CLASS_ANNOTATION}: {PER_COMMUNICATOR})")  # fmt: skip
        return
    tc = contract.traffic_class
    out.put("NCCL_IB_TC", str(tc),
            f"the lossless class of the profile (DSCP {tc >> 2}, ECN bits {tc & 3})")  # fmt: skip
    fifo = contract.chosen_fifo_class
    if not knows(version, "NCCL_IB_FIFO_TC"):
        out.skip("NCCL_IB_FIFO_TC", f"the pod's NCCL ({version_text(version)}) predates "
                 "NCCL_IB_FIFO_TC (2.22.3); set annotation tpfabric.io/nccl-version for an "
                 "image with a newer NCCL")  # fmt: skip
        return
    why = (
        "the profile's roce.fifoTrafficClass"
        if contract.fifo_traffic_class is not None
        else ("the lossless class (the profile names no other for NCCL's control messages)")
    )
    out.put("NCCL_IB_FIFO_TC", str(fifo), why)


def _ecmp(contract: FabricContract, out: ContractSettings, plan_level: str | None) -> None:
    if not contract.ecmp_levels:
        return
    keys = ("NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS")
    if plan_level is None:
        for key in keys:
            out.skip(key, f"the plan's level is unknown (no {PLAN_LEVEL_ANNOTATION} annotation); "
                     "NCCL's default, right within a leaf, is kept")  # fmt: skip
        return
    if plan_level not in contract.ecmp_levels:
        for key in keys:
            out.skip(key, f"the plan holds the gang within one {plan_level}: it crosses no ECMP "
                     f"tier (ECMP levels {list(contract.ecmp_levels)})")  # fmt: skip
        return
    why = f"the plan spans a {plan_level}, whose paths cross an ECMP tier: more flows to hash"
    out.put("NCCL_IB_QPS_PER_CONNECTION", str(contract.qps_per_connection), why)
    out.put("NCCL_IB_SPLIT_DATA_ON_QPS", "1" if contract.split_data_on_qps else "0",
            "the profile's ecmp.splitDataOnQps")  # fmt: skip


def rail_plane_hca(rails: RailAssignment, selection: FabricSelection) -> str:
    """Return ``NCCL_IB_HCA`` with ``:<rail>[:<plane>]`` after each port (exact match).

    One port per GPU: the port's rail is its fabric rail. Several ports per GPU (planes): the
    ports of one GPU share one rail (the GPU's place in rail order) and the k-th is plane k, as
    NCCL's ``=mlx5_0:1:0:0,mlx5_1:1:0:1`` (one rail, two planes).
    """
    ports_of: dict[str, list[NicPort]] = {}
    for pair in selection.pairs:
        ports_of.setdefault(pair.gpu, []).append(NicPort(pair.hca, pair.port))
    counts = {len(ports) for ports in ports_of.values()}
    kept = set(rails.endpoints)
    if len(counts) == 1 and counts.pop() > 1:
        groups = sorted(ports_of.values(), key=lambda ps: min(rails.rail_of(p) or 0 for p in ps))
        fields: dict[NicPort, str] = {}
        for rail, ports in enumerate(groups):
            for plane, port in enumerate(ports):
                fields[port] = f"{rail}:{plane}"
        entries = [f"{port}:{fields[port]}" for port in rails.endpoints if port in fields]
    else:
        entries = [f"{port}:{rail}" for rail, port in rails.rails if port in kept]
    return "=" + ",".join(entries)


def apply_contract(
    contract: FabricContract,
    *,
    link_layers: Sequence[str],
    transport: str,
    plan_level: str | None,
    traffic_class_mode: str | None,
    version: NcclVersion | None,
    rails: RailAssignment,
    selection: FabricSelection,
) -> ContractSettings:
    """Return the contract's NCCL settings for a pod whose fabric ports run ``link_layers``."""
    out = ContractSettings()
    if transport not in ("ib", "ib-no-gdr"):
        return out
    per_comm = (traffic_class_mode or "").strip() == PER_COMMUNICATOR
    layers = set(link_layers)
    wanted = _LINK_LAYERS.get(contract.link_layer)
    if wanted is not None and layers and layers != {wanted}:
        out.warnings.append(
            f"the fabric profile declares linkLayer {contract.link_layer} but this pod's fabric "
            f"ports run {', '.join(sorted(layers))}: no service level or traffic class written "
            "(check fabric.profile.linkLayer, or the node's ports)"
        )
    elif wanted == "InfiniBand":
        _service_level(contract, out, per_comm)
    elif wanted == "Ethernet":
        _traffic_class(contract, out, per_comm, version)
    _ecmp(contract, out, plan_level)
    if contract.rail_plane and rails.endpoints:
        if version is not None and version >= RAIL_PLANE_SINCE:
            out.put("NCCL_IB_HCA", rail_plane_hca(rails, selection),
                    f"the pod's NCCL {version_text(version)} reads <hca>:<port>:<rail>:<plane> "
                    f"(since {version_text(RAIL_PLANE_SINCE)})")  # fmt: skip
        else:
            out.skip("NCCL_IB_HCA rail/plane fields", f"the pod's NCCL "
                     f"({version_text(version)}) is not known to read them (needs "
                     f">= {version_text(RAIL_PLANE_SINCE)})")  # fmt: skip
    return out
