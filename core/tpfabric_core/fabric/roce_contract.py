"""The node against the fabric's contract: where the fabric profile says RoCE is lossless on a
priority, each RoCE port's netdev must run PFC and ECN on that priority and trust DSCP.

The fabric agent reads, per RoCE fabric port's netdev (:class:`NetdevQos`):

- ECN per priority, as notification point and reaction point: sysfs
  ``<netdev>/ecn/roce_np/enable/<prio>`` and ``ecn/roce_rp/enable/<prio>`` (NVIDIA's mlx5 driver
  of MLNX_OFED / DOCA-OFED; the upstream driver has no such files: unknown);
- the trust state: sysfs ``<netdev>/qos/trust`` (``pcp`` or ``dscp``, the same driver; absent
  upstream: unknown);
- the PFC-enabled priorities: DCB netlink (``RTM_GETDCB``, ``DCB_CMD_IEEE_GET``, the
  ``pfc_en`` bitmap of ``DCB_ATTR_IEEE_PFC``), which is all the kernel shows of PFC; the agent
  reads it when it shares the host's network namespace, else it is unknown.

:func:`judge_contract` compares them with the profile (``roce.pfcPriority``; ``roce.dscp`` or
``roce.trafficClass`` for the trust), and the agent publishes the node condition
``FabricContractMet``: ``True``/``SettingsMatch``, ``False``/``SettingsMismatch`` with a message
naming each mismatch (``PFC off on priority 3 on ens1f0np0``), or ``Unknown``/
``SettingsUnreadable`` when nothing mismatched but something could not be read. A node whose
condition is ``False`` is treated by the placer like a degraded node. Nothing is published
when the profile declares nothing to check (an InfiniBand fabric, no profile).

Pure: the profile and what was read in, the verdict and the condition out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.fabric.node_condition import condition_to_write, message_of
from tpfabric_core.fabric_profile import FabricProfile

__all__ = [
    "CONTRACT_CONDITION",
    "ContractVerdict",
    "NetdevQos",
    "contract_condition_patch",
    "judge_contract",
]

CONTRACT_CONDITION = "FabricContractMet"


@dataclass(frozen=True, slots=True)
class NetdevQos:
    """What a RoCE port's netdev shows of its QoS; None where it could not be read (and why)."""

    netdev: str
    ecn_np: Mapping[int, bool] | None = None
    ecn_rp: Mapping[int, bool] | None = None
    trust: str | None = None
    pfc: frozenset[int] | None = None
    #: why the PFC state is unknown, when it is
    pfc_unknown: str = ""


@dataclass(frozen=True, slots=True)
class ContractVerdict:
    """The node's ``FabricContractMet`` condition: status, reason, message."""

    status: str
    reason: str
    message: str
    mismatches: tuple[str, ...] = ()
    unknowns: tuple[str, ...] = ()


def judge_contract(profile: FabricProfile, netdevs: Sequence[NetdevQos]) -> ContractVerdict | None:
    """Return the node's condition against ``profile``, None when the profile declares nothing
    a node shows (not RoCE, or neither a PFC priority nor a DSCP) or the node has no RoCE
    fabric port."""
    roce = profile.roce
    if profile.link_layer != "roce" or not netdevs:
        return None
    priority = roce.pfc_priority
    dscp = roce.dscp if roce.dscp is not None else (
        roce.traffic_class >> 2 if roce.traffic_class is not None else None
    )  # fmt: skip
    if priority is None and dscp is None:
        return None
    mismatches: list[str] = []
    unknowns: list[str] = []
    for qos in netdevs:
        if priority is not None:
            _check_priority(qos, priority, mismatches, unknowns)
        if dscp is not None:
            if qos.trust is None:
                unknowns.append(f"trust state of {qos.netdev} not in sysfs")
            elif qos.trust != "dscp":
                mismatches.append(
                    f"trust {qos.trust}, not dscp, on {qos.netdev} (the profile marks RoCE with "
                    f"DSCP {dscp})"
                )
    if mismatches:
        return ContractVerdict(
            "False", "SettingsMismatch", message_of(mismatches), tuple(mismatches), tuple(unknowns)
        )
    if unknowns:
        return ContractVerdict(
            "Unknown", "SettingsUnreadable", message_of(unknowns), (), tuple(unknowns)
        )
    checked = [f"PFC and ECN on priority {priority}"] if priority is not None else []
    if dscp is not None:
        checked.append("trust dscp")
    names = ", ".join(q.netdev for q in netdevs)
    return ContractVerdict(
        "True", "SettingsMatch", f"{' and '.join(checked)} on every RoCE fabric port ({names})"
    )


def _check_priority(
    qos: NetdevQos, priority: int, mismatches: list[str], unknowns: list[str]
) -> None:
    """Add what ``qos`` shows of PFC and ECN on ``priority`` to the lists."""
    name = qos.netdev
    if qos.pfc is None:
        unknowns.append(f"PFC of {name} unknown ({qos.pfc_unknown or 'not read'})")
    elif priority not in qos.pfc:
        mismatches.append(f"PFC off on priority {priority} on {name}")
    for point, states in (("notification point", qos.ecn_np), ("reaction point", qos.ecn_rp)):
        if states is None:
            unknowns.append(f"ECN ({point}) of {name} not in sysfs")
        elif not states.get(priority, False):
            mismatches.append(f"ECN ({point}) off on priority {priority} on {name}")


def contract_condition_patch(
    verdict: ContractVerdict, current: Mapping[str, Any] | None, now: str
) -> dict[str, Any] | None:
    """Return the ``FabricContractMet`` condition to write, or None when ``current`` (the node's
    condition as read) already says the same."""
    return condition_to_write(
        CONTRACT_CONDITION,
        status=verdict.status,
        reason=verdict.reason,
        message=verdict.message,
        current=current,
        now=now,
    )
