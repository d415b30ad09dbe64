"""The fabric's contract, declared once: link layer, service levels, traffic classes, ECMP tiers.

One model for every reader: the chart's ``fabric.profile`` values (its ``values.schema.json``
fragment is generated from :class:`FabricProfile` by :func:`values_schema`), the operator's
``TPFABRIC_FABRIC_PROFILE`` and the gang webhook's ``--fabric-profile`` (both JSON, parsed by
:func:`parse_fabric_profile`, which names the field and the fix of a bad value), and the
``rdma-init`` container, which gets :func:`init_argument`'s canonical JSON and applies it per pod.

What the profile says, and what ``rdma-init`` makes of it on a pod whose fabric ports carry that
link layer:

- ``infiniband.adaptiveRoutingServiceLevels`` (OpenSM's ``ar_sl_mask``) and ``serviceLevel``:
  ``NCCL_IB_SL`` (the service level, by default the lowest AR-enabled one) and
  ``NCCL_IB_ADAPTIVE_ROUTING=1`` when that level is AR-enabled;
- ``roce.trafficClass`` / ``fifoTrafficClass`` (the lossless class, ``DSCP << 2``, and NCCL's
  control-message class; ``pfcPriority`` and ``dscp`` say what they stand for and are checked
  against it): ``NCCL_IB_TC`` / ``NCCL_IB_FIFO_TC``;
- ``ecmp.levels``: the plan levels (``tpfabric.io/plan-level``) whose gangs cross a tier that
  hashes flows by ECMP: ``NCCL_IB_QPS_PER_CONNECTION`` / ``NCCL_IB_SPLIT_DATA_ON_QPS``;
- ``sharp``: whether the fabric runs SHARP (reported; collectives offload needs the SHARP plugin
  in the image, which tpfabric does not ship);
- ``nccl.railPlane``: write ``<hca>:<port>:<rail>:<plane>`` in ``NCCL_IB_HCA`` where the pod's
  NCCL is known to take them.

Pure: parses and validates, never reads a file or the environment.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from tpfabric_core.errors import InputError

__all__ = [
    "LINK_LAYERS",
    "EcmpTiers",
    "FabricProfile",
    "InfinibandContract",
    "NcclFields",
    "RoceContract",
    "init_argument",
    "parse_fabric_profile",
    "values_schema",
    "with_values_schema",
]

LINK_LAYERS = ("infiniband", "roce")
_LEVEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class InfinibandContract(_Model):
    """The service levels of an InfiniBand fabric (OpenSM / UFM)."""

    adaptive_routing_service_levels: list[int] = Field(
        default_factory=list,
        description="Service levels on which the subnet manager enables adaptive routing "
        "(OpenSM's ar_sl_mask as a list, e.g. [1] for 0x0002).",
        json_schema_extra={"items": {"type": "integer", "minimum": 0, "maximum": 15}},
    )
    service_level: int | None = Field(
        default=None,
        ge=0,
        le=15,
        description="The service level NCCL uses (NCCL_IB_SL); default: the lowest "
        "adaptive-routing one.",
    )

    @model_validator(mode="after")
    def _levels_in_range(self) -> InfinibandContract:
        for index, level in enumerate(self.adaptive_routing_service_levels):
            if not 0 <= level <= 15:
                raise ValueError(
                    f"adaptiveRoutingServiceLevels[{index}]: {level} is not a service level (0-15)"
                )
        return self

    def chosen_service_level(self) -> int | None:
        """Return the SL NCCL should use: the declared one, else the lowest AR-enabled one."""
        if self.service_level is not None:
            return self.service_level
        return min(self.adaptive_routing_service_levels, default=None)


class RoceContract(_Model):
    """The lossless class of a RoCE fabric: the traffic classes NCCL marks its packets with."""

    traffic_class: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="The lossless traffic class (NCCL_IB_TC): the DSCP the NICs trust, shifted "
        "left by 2 (DSCP 26 -> 104; add 2 for ECT(0) where the fabric wants it).",
    )
    fifo_traffic_class: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="Traffic class of NCCL's control messages (NCCL_IB_FIFO_TC, NCCL >= 2.22); "
        "default: trafficClass.",
    )
    dscp: int | None = Field(
        default=None,
        ge=0,
        le=63,
        description="The DSCP trafficClass stands for (checked: trafficClass >> 2).",
    )
    pfc_priority: int | None = Field(
        default=None,
        ge=0,
        le=7,
        description="The PFC priority the NICs map that DSCP to (documentation; "
        "`tpfabric topology profile --mlnx-qos` reads it).",
    )

    @model_validator(mode="after")
    def _dscp_matches(self) -> RoceContract:
        if self.dscp is not None and self.traffic_class is None:
            raise ValueError(f"dscp {self.dscp} given without trafficClass: set trafficClass "
                             f"{self.dscp << 2}")  # fmt: skip
        if (
            self.dscp is not None
            and self.traffic_class is not None
            and self.traffic_class >> 2 != self.dscp
        ):
            raise ValueError(
                f"trafficClass {self.traffic_class} carries DSCP {self.traffic_class >> 2}, not "
                f"dscp {self.dscp}: set trafficClass {self.dscp << 2} (or "
                f"{(self.dscp << 2) | 2} with ECT(0))"
            )
        return self


class EcmpTiers(_Model):
    """Where the fabric hashes flows by ECMP, and how NCCL spreads its traffic there."""

    levels: list[str] = Field(
        default_factory=list,
        description="Plan levels (tpfabric.io/plan-level) whose gangs cross an ECMP tier: "
        "every level above the leaf on a RoCE Clos, e.g. [spine, block, cluster].",
    )
    qps_per_connection: int = Field(
        default=4,
        ge=1,
        le=128,
        description="NCCL_IB_QPS_PER_CONNECTION for those gangs (more flows for the hash).",
    )
    split_data_on_qps: bool = Field(
        default=False,
        description="NCCL_IB_SPLIT_DATA_ON_QPS for those gangs (false: each message on one QP).",
    )

    @model_validator(mode="after")
    def _level_names(self) -> EcmpTiers:
        for index, level in enumerate(self.levels):
            if not _LEVEL.match(level) or level in ("node", "leaf"):
                raise ValueError(
                    f"levels[{index}]: {level!r} is not a level above the leaf; name the "
                    "topology levels above it (spine, block, ...) or cluster"
                )
        return self


class NcclFields(_Model):
    """Which optional NCCL fields the profile allows ``rdma-init`` to write."""

    rail_plane: bool = Field(
        default=True,
        description="Write <hca>:<port>:<rail>:<plane> in NCCL_IB_HCA where the pod's NCCL is "
        "known to take them (NCCL >= 2.30.7); never for an image of unknown NCCL version.",
    )


class FabricProfile(_Model):
    """The fabric's contract (chart value ``fabric.profile``); empty: nothing declared."""

    link_layer: Literal["", "infiniband", "roce"] = Field(
        default="",
        description="The compute fabric's link layer: infiniband, roce, or empty (nothing "
        "declared: rdma-init writes no SL, traffic class or ECMP setting).",
    )
    infiniband: InfinibandContract = Field(default_factory=InfinibandContract)
    roce: RoceContract = Field(default_factory=RoceContract)
    ecmp: EcmpTiers = Field(default_factory=EcmpTiers)
    sharp: bool = Field(
        default=False,
        description="The fabric runs SHARP (in-network reductions); reported by rdma-init.",
    )
    nccl: NcclFields = Field(default_factory=NcclFields)

    @model_validator(mode="after")
    def _contract_of_its_link_layer(self) -> FabricProfile:
        ib_set = self.infiniband != InfinibandContract()
        roce_set = self.roce != RoceContract()
        if ib_set and self.link_layer != "infiniband":
            raise ValueError(
                f"infiniband: service levels declared for linkLayer {self.link_layer or 'unset'}"
                "; set linkLayer: infiniband, or remove them"
            )
        if roce_set and self.link_layer != "roce":
            raise ValueError(
                f"roce: traffic classes declared for linkLayer {self.link_layer or 'unset'}; "
                "set linkLayer: roce, or remove them"
            )
        if (
            self.link_layer == "roce"
            and self.roce.fifo_traffic_class is not None
            and (self.roce.traffic_class is None)
        ):
            raise ValueError("roce.fifoTrafficClass given without roce.trafficClass; set both")
        return self

    @property
    def declared(self) -> bool:
        """Return whether the profile declares anything (an empty one changes no pod)."""
        return self != FabricProfile()


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(str(item))
    return ".".join(parts)


_FIXES = {
    "less_than_equal": "use a value in range",
    "greater_than_equal": "use a value in range",
    "literal_error": "use one of the listed values",
    "extra_forbidden": "remove it (a typo?)",
}


def parse_fabric_profile(text: str | None, where: str) -> FabricProfile:
    """Return the profile of a JSON text (empty or None: nothing declared).

    ``where`` names the setting (``TPFABRIC_FABRIC_PROFILE``, ``--fabric-profile``); an
    :class:`InputError` names it, the field (``fabric.profile.roce.trafficClass``) and the fix.
    """
    if text is None or not text.strip():
        return FabricProfile()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(where, f"not JSON ({err.msg})", "give the chart's fabric.profile as "
                         "JSON (helm renders it with toJson)") from err  # fmt: skip
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object (fabric.profile)")
    try:
        return FabricProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        path = _field_path(tuple(first["loc"]))
        field = f"fabric.profile.{path}" if path else "fabric.profile"
        message = str(first["msg"]).removeprefix("Value error, ")
        fix = _FIXES.get(str(first["type"]))
        raise InputError(f"{where}: {field}", message, fix) from err


def init_argument(profile: FabricProfile) -> str | None:
    """Return the canonical JSON ``rdma-init --fabric-profile`` reads, None when undeclared."""
    if not profile.declared:
        return None
    return json.dumps(profile.model_dump(by_alias=True), sort_keys=True, separators=(",", ":"))


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Return ``schema`` with refs inlined, titles and defaults dropped, nullables as type lists,
    and every object closed (``additionalProperties: false``), as the chart's schema is."""
    if "$ref" in schema:
        return _structural(copy.deepcopy(defs[schema["$ref"].rsplit("/", 1)[1]]), defs)
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1 and len(schema["anyOf"]) == 2:
            merged = {**_structural(branches[0], defs)}
            merged["type"] = [merged["type"], "null"]
            if "description" in schema:
                merged["description"] = schema["description"]
            return merged
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "default", "$defs"):
            continue
        if key == "properties":
            out[key] = {name: _structural(child, defs) for name, child in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def values_schema() -> dict[str, Any]:
    """Return the chart's ``values.schema.json`` fragment for ``fabric`` (``profile`` inside)."""
    raw = FabricProfile.model_json_schema(by_alias=True)
    profile = _structural(raw, raw.get("$defs", {}))
    profile["description"] = (
        "The fabric's contract (docs/fabric-profile.md), applied per pod by rdma-init."
    )
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"profile": profile},
    }


def with_values_schema(chart_schema_text: str) -> str:
    """Return the chart's ``values.schema.json`` text with its ``fabric`` property generated
    from :class:`FabricProfile` (placed before ``scheduler`` when new); the rest is unchanged."""
    schema = json.loads(chart_schema_text)
    properties: dict[str, Any] = schema["properties"]
    fragment = values_schema()
    fragment["description"] = "The fabric's contract; see fabric.profile."
    if "fabric" not in properties:
        reordered: dict[str, Any] = {}
        for key, value in properties.items():
            if key == "scheduler":
                reordered["fabric"] = fragment
            reordered[key] = value
        reordered.setdefault("fabric", fragment)
        properties = reordered
    else:
        properties["fabric"] = fragment
    schema["properties"] = properties
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
