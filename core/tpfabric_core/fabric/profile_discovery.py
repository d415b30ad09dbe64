"""Fill the fabric profile from the fabric's own settings: the subnet manager's configuration
(OpenSM / NVIDIA UFM ``opensm.conf``) and, on RoCE, the NICs' QoS as ``mlnx_qos -i <if>`` prints
it.

- ``opensm.conf`` (``key value`` lines, ``#`` comments, as ``opensm -c`` writes it):
  ``ar_sl_mask`` (bit *n*: adaptive routing on SL *n*; NVIDIA's OpenSM, default ``0xFFFF``),
  ``ar_mode`` (0: adaptive routing off), ``routing_engine`` (reported), ``sharp_enabled``
  (UFM's; 2 = enabled) -> ``linkLayer: infiniband`` and ``adaptiveRoutingServiceLevels``;
- ``mlnx_qos -i <if>``: the trust state (``dscp`` is needed to mark by DSCP), the PFC-enabled
  priorities and the dscp2prio map -> the lossless priority, a DSCP that maps to it (26, RoCE's
  conventional AF31, when it does; else the lowest) and ``trafficClass = DSCP << 2``.

Anything the files cannot tell is left out and said in :attr:`Discovered.notes`; nothing is
guessed between two lossless priorities. Pure: text in, values out; :class:`InputError` names
the file, the line and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.errors import InputError

__all__ = ["Discovered", "from_mlnx_qos", "from_opensm_conf"]

ROCE_DSCP = 26
"""AF31, the DSCP RoCE v2 traffic is conventionally marked with (priority 3 in the default map)."""


@dataclass
class Discovered:
    """Profile values found in a file, and what the file said or could not say."""

    profile: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise InputError(where, f"{text!r} is not a number", "write it as 0x0002 or 2") from None


def from_opensm_conf(text: str, source: str) -> Discovered:
    """Return the InfiniBand part of the profile from an OpenSM/UFM configuration file."""
    found = Discovered()
    values: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition(" ")
        values[key] = (value.strip(), number)
    found.profile["linkLayer"] = "infiniband"
    if "routing_engine" in values:
        found.notes.append(f"routing engine: {values['routing_engine'][0]}")
    mode = values.get("ar_mode")
    if mode is not None and _int(mode[0], f"{source}:{mode[1]}") == 0:
        found.profile["infiniband"] = {"adaptiveRoutingServiceLevels": []}
        found.notes.append("adaptive routing is off (ar_mode 0): no adaptive-routing service level")
    elif "ar_sl_mask" in values:
        mask_text, line_number = values["ar_sl_mask"]
        mask = _int(mask_text, f"{source}:{line_number}")
        if not 0 <= mask <= 0xFFFF:
            raise InputError(f"{source}:{line_number}", f"ar_sl_mask {mask_text} is not 16 bits",
                             "one bit per service level, 0x0000-0xFFFF")  # fmt: skip
        levels = [sl for sl in range(16) if mask >> sl & 1]
        found.profile["infiniband"] = {"adaptiveRoutingServiceLevels": levels}
        found.notes.append(f"ar_sl_mask {mask_text}: adaptive routing on SL {levels}")
    else:
        found.notes.append(
            "no ar_sl_mask (upstream OpenSM has no adaptive routing; NVIDIA's defaults to "
            "0xFFFF): adaptive-routing service levels not filled"
        )
    sharp = values.get("sharp_enabled")
    if sharp is not None:
        found.profile["sharp"] = _int(sharp[0], f"{source}:{sharp[1]}") == 2
    return found


_DSCP_ROW = re.compile(r"^prio:\s*(\d)\s+dscp:\s*([\d,\s]+)$")


def _pfc_priorities(lines: list[str], source: str) -> list[int]:
    for index, line in enumerate(lines):
        if line.strip().startswith("enabled") and index and "priority" in lines[index - 1]:
            flags = line.split()[1:]
            if len(flags) != 8 or any(flag not in ("0", "1") for flag in flags):
                where = f"{source}:{index + 1}"
                problem = f"PFC line {line.strip()!r} is not 8 flags"
                raise InputError(where, problem, "give the output of mlnx_qos -i <if> unchanged")
            return [priority for priority, flag in enumerate(flags) if flag == "1"]
    raise InputError(source, "no 'PFC configuration' block", "give the output of mlnx_qos -i <if>")


def from_mlnx_qos(text: str, source: str, dscp: int | None = None) -> Discovered:
    """Return the RoCE part of the profile from ``mlnx_qos -i <if>`` output; ``dscp`` chooses
    the DSCP where the file alone cannot (several lossless priorities)."""
    found = Discovered()
    lines = text.splitlines()
    trust = next((ln.split(":", 1)[1].strip() for ln in lines if "trust state" in ln), None)
    found.profile["linkLayer"] = "roce"
    if trust != "dscp":
        found.notes.append(
            f"priority trust state is {trust or 'not shown'}, not dscp: NCCL_IB_TC marks DSCP, "
            "which these NICs do not classify by (mlnx_qos -i <if> --trust dscp)"
        )
    lossless = _pfc_priorities(lines, source)
    priority_of: dict[int, int] = {}
    for line in lines:
        if match := _DSCP_ROW.match(line.strip()):
            for value in match.group(2).replace(" ", "").strip(",").split(","):
                priority_of[int(value)] = int(match.group(1))
    roce: dict[str, Any] = {}
    if dscp is not None:
        chosen = dscp
    elif len(lossless) == 1:
        mapped = sorted(d for d, p in priority_of.items() if p == lossless[0])
        chosen = ROCE_DSCP if ROCE_DSCP in mapped else (mapped[0] if mapped else -1)
    else:
        found.notes.append(
            f"PFC is on for priorities {lossless}: which carries RDMA cannot be told from this "
            "file; pass --dscp with the DSCP your RoCE traffic is marked with"
        )
        found.profile["roce"] = roce
        return found
    if chosen < 0 or chosen > 63:
        raise InputError("--dscp", f"{chosen} is not a DSCP", "give 0-63")
    priority = priority_of.get(chosen)
    if priority is None or priority not in lossless:
        found.notes.append(
            f"DSCP {chosen} maps to priority {priority}, which has no PFC (lossless priorities: "
            f"{lossless}): traffic class not filled"
        )
        found.profile["roce"] = roce
        return found
    roce.update({"trafficClass": chosen << 2, "dscp": chosen, "pfcPriority": priority})
    found.notes.append(f"DSCP {chosen} -> priority {priority} (PFC on): trafficClass {chosen << 2}")
    found.profile["roce"] = roce
    return found
