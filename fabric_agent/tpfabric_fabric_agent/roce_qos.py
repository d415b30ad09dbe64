"""What a RoCE port's netdev shows of its QoS: ECN per priority and the trust state from sysfs,
the PFC-enabled priorities from DCB netlink (:class:`~tpfabric_core.fabric.roce_contract.
NetdevQos`).

- sysfs (NVIDIA's mlx5 of MLNX_OFED / DOCA-OFED; the upstream driver has none of these files):
  ``<netdev>/ecn/roce_np/enable/<prio>`` and ``ecn/roce_rp/enable/<prio>`` (``1`` on), and
  ``<netdev>/qos/trust`` (``pcp`` or ``dscp``);
- PFC: the kernel shows it only through DCB netlink: an ``RTM_GETDCB`` request with command
  ``DCB_CMD_IEEE_GET`` for the interface; the answer's nested ``DCB_ATTR_IEEE`` holds
  ``DCB_ATTR_IEEE_PFC``, a ``struct ieee_pfc`` (include/uapi/linux/dcbnl.h) whose second byte,
  ``pfc_en``, is the bitmap of PFC-enabled priorities (what ``mlnx_qos`` prints as "PFC
  configuration ... enabled"). Netlink sees the interfaces of the agent's network namespace:
  the host's only when the agent runs with ``hostNetwork`` (the chart's
  ``fabricAgent.hostNetwork``); otherwise the interface is not there and PFC is unknown.

:func:`decode_ieee_pfc` is the pure part (bytes in, priorities out); :class:`DcbNetlink` sends
the request with the standard library's ``socket`` (no tool, no extra package).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path

from tpfabric_core.fabric.roce_contract import NetdevQos

__all__ = [
    "DcbNetlink",
    "PfcReader",
    "dcb_request",
    "decode_ieee_pfc",
    "read_netdev_qos",
]

#: returns the PFC-enabled priorities of a netdev, or why they are unknown
PfcReader = Callable[[str], "frozenset[int] | str"]

_RTM_GETDCB = 78
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_DCB_CMD_IEEE_GET = 21
_DCB_ATTR_IFNAME = 1
_DCB_ATTR_IEEE = 13
_DCB_ATTR_IEEE_PFC = 2
_NLA_F_NESTED = 1 << 15
_PRIORITIES = range(8)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ecn(netdev: Path, point: str) -> dict[int, bool] | None:
    folder = netdev / "ecn" / point / "enable"
    if not folder.is_dir():
        return None
    states = {prio: _read(folder / str(prio)) for prio in _PRIORITIES}
    return {prio: text == "1" for prio, text in states.items() if text is not None}


def read_netdev_qos(netdev: Path, pfc: PfcReader) -> NetdevQos:
    """Return what ``netdev`` (its sysfs folder) shows of ECN and trust, and ``pfc``'s answer
    for its name."""
    trust = _read(netdev / "qos" / "trust")
    enabled = pfc(netdev.name)
    return NetdevQos(
        netdev=netdev.name,
        ecn_np=_ecn(netdev, "roce_np"),
        ecn_rp=_ecn(netdev, "roce_rp"),
        trust=trust.lower() if trust in ("pcp", "dscp", "PCP", "DSCP") else None,
        pfc=enabled if isinstance(enabled, frozenset) else None,
        pfc_unknown="" if isinstance(enabled, frozenset) else enabled,
    )


def dcb_request(ifname: str, sequence: int = 1) -> bytes:
    """Return the netlink message asking the IEEE DCB settings of ``ifname``."""
    name = ifname.encode() + b"\0"
    attribute = struct.pack("=HH", 4 + len(name), _DCB_ATTR_IFNAME) + name
    attribute += b"\0" * (-len(attribute) % 4)
    body = struct.pack("=BBH", socket.AF_UNSPEC, _DCB_CMD_IEEE_GET, 0) + attribute
    header = struct.pack("=IHHII", 16 + len(body), _RTM_GETDCB, _NLM_F_REQUEST, sequence, 0)
    return header + body


def _attributes(data: bytes) -> dict[int, bytes]:
    found, offset = {}, 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4 or offset + length > len(data):
            break
        found[kind & ~_NLA_F_NESTED] = data[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    return found


def decode_ieee_pfc(message: bytes) -> frozenset[int] | str:
    """Return the PFC-enabled priorities of a DCB netlink answer, or why it has none."""
    if len(message) < 20:
        return "a DCB netlink answer too short to read"
    length, kind = struct.unpack_from("=IH", message, 0)
    if kind == _NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", message, 16)
        return f"DCB netlink refused: {os.strerror(-code) if code < 0 else code}"
    if kind != _RTM_GETDCB:
        return f"unexpected netlink answer (type {kind})"
    top = _attributes(message[20 : min(length, len(message))])
    ieee = top.get(_DCB_ATTR_IEEE)
    if ieee is None:
        return "the driver answers no IEEE DCB settings (DCBX not in IEEE mode?)"
    pfc = _attributes(ieee).get(_DCB_ATTR_IEEE_PFC)
    if pfc is None or len(pfc) < 2:
        return "the driver reports no PFC settings"
    bitmap = pfc[1]  # struct ieee_pfc { __u8 pfc_cap; __u8 pfc_en; ... }
    return frozenset(prio for prio in _PRIORITIES if bitmap >> prio & 1)


class DcbNetlink:
    """Reads PFC through DCB netlink, in the agent's network namespace."""

    def __init__(self, timeout: float = 2.0) -> None:
        self.timeout = timeout

    def __call__(self, ifname: str) -> frozenset[int] | str:
        """Return the PFC-enabled priorities of ``ifname``, or why they are unknown."""
        if not Path("/sys/class/net", ifname).exists():
            return (
                f"{ifname} is not in the agent's network namespace (run it with hostNetwork: "
                "the chart's fabricAgent.hostNetwork)"
            )
        try:
            with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
                sock.settimeout(self.timeout)
                sock.send(dcb_request(ifname))
                return decode_ieee_pfc(sock.recv(65536))
        except OSError as err:
            return f"DCB netlink unreadable: {err.strerror or err}"
