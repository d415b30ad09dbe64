"""What the link reader hands the link judge: one HCA port, one PCIe link, the counters watched.

The first stage of a node's link-health pipeline, as data: the fabric agent reads these from sysfs
(:mod:`tpfabric_fabric_agent.link_read`), :mod:`.link_judge` judges series of them and
:mod:`.link_publish` says how the verdict is published. Plain frozen records and names only: this
module reads no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "CONGESTION_COUNTERS",
    "CONGESTION_HW_COUNTERS",
    "ERROR_COUNTERS",
    "HW_COUNTERS",
    "NETDEV_COUNTERS",
    "RETRANSMISSION_COUNTERS",
    "WATCHED_COUNTERS",
    "PcieLink",
    "PortSample",
]

#: The error counters the agent watches, by their sysfs names.
ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
)
#: Driver counters of ``hw_counters/`` the agent watches (mlx5 names; absent ones are left out).
HW_COUNTERS = ("rnr_nak_retry_err", "local_ack_timeout_err", "roce_slow_restart")
#: Driver counters of ``hw_counters/`` that count what silent retransmission leaves behind
#: (mlx5 names, kernel Documentation/ABI and NVIDIA's "Understanding mlx5 Linux counters"):
#: NAK sequence errors received, out-of-sequence packets received, implied NAKs, duplicate
#: requests received and RoCE adaptive retransmissions. Judged as a link fault.
RETRANSMISSION_COUNTERS = (
    "packet_seq_err",
    "out_of_sequence",
    "implied_nak_seq_err",
    "duplicate_request",
    "roce_adp_retrans",
)
#: Congestion as the driver counts it (``hw_counters/``): CNPs sent as notification point, CNPs
#: handled as reaction point, ECN-marked RoCE packets received. Recorded, never judged: they say
#: how loaded the path is, not that the link is faulty.
CONGESTION_HW_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets")
#: Congestion of every link layer: ``counters/port_xmit_wait`` (ticks with data to send and no
#: credit to send it, IBTA PortXmitWait) and the RoCE counters above.
CONGESTION_COUNTERS = ("port_xmit_wait", *CONGESTION_HW_COUNTERS)
#: Counters of the port's netdev: ``carrier_changes`` (a link that went down and up between two
#: reads) and ``statistics/rx_crc_errors`` (Ethernet FCS errors, mlx5e's PHY/MAC count).
NETDEV_COUNTERS = ("carrier_changes", "rx_crc_errors")
#: Every counter the agent reads per port, in the order it reports them.
WATCHED_COUNTERS = (
    *ERROR_COUNTERS,
    *HW_COUNTERS,
    *RETRANSMISSION_COUNTERS,
    *CONGESTION_COUNTERS,
    *NETDEV_COUNTERS,
)


@dataclass(frozen=True, slots=True)
class PortSample:
    """One HCA port as sysfs shows it at one moment."""

    hca: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED (the text after ``4: ``)
    phys_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None
    width: int | None  # lanes: 4 for ``4X``
    link_layer: str = "InfiniBand"
    counters: dict[str, int] = field(default_factory=dict)
    #: watched counters the driver does not expose on this port: unknown, never zero
    unread: frozenset[str] = frozenset()
    #: the port's GUID (16 hex digits) where sysfs shows it, and its netdev's name
    guid: str | None = None
    netdev: str | None = None

    @property
    def where(self) -> str:
        """Return ``mlx5_3 port 1``, the name messages use."""
        return f"{self.hca} port {self.port}"

    @property
    def up(self) -> bool:
        """Return whether the port carries traffic: ACTIVE, and physically LinkUp (or no
        ``phys_state`` file to say otherwise)."""
        return self.state.upper() == "ACTIVE" and self.phys_state.lower() in ("linkup", "unknown")


@dataclass(frozen=True, slots=True)
class PcieLink:
    """The PCIe link of one HCA or GPU: what it trained at and what it can do."""

    bdf: str
    role: str  # "hca" or "gpu"
    name: str  # mlx5_3 for an HCA, the bus id for a GPU
    speed_gts: float | None
    max_speed_gts: float | None
    width: int | None
    max_width: int | None
    #: what the upstream port the device trains with can do (the slot); None when unread
    path_max_speed_gts: float | None = None
    path_max_width: int | None = None
