"""The NCCL topology file of a Hyper-V VM, written from the pairing (GPUDirect RDMA on Azure).

On Hyper-V every GPU and every NIC sits alone below its own VMBus host bridge, so NCCL, reading
sysfs, sees each GPU and NIC meet only at the CPU (``PHB``) and does not use GPUDirect RDMA
between them. The pairing (NUMA node, then bus order: the k-th GPU of a NUMA node with its k-th
NIC) knows which ones share a physical switch; this file says so to NCCL the way Azure's own
``ndv5-topo.xml`` does: one ``<cpu numaid>`` per NUMA node, under it one virtual PCIe switch
(``ffff:ff:NN.0``, class ``0x060400``) per group of GPUs and the NICs they are paired with.

NCCL fills every attribute left out for a device it finds in sysfs (by bus id); the virtual
switches exist nowhere, so they carry vendor/device ids of 0 and the link speed and width of
their GPU (sysfs ``max_link_speed``/``max_link_width``; left out when unreadable: NCCL then
assumes PCIe Gen3 x16). Pure: builds text; standard library only.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from tpfabric_rdma_init.affinity import FabricSelection
from tpfabric_rdma_init.discovery import HostInventory, PciLocation

__all__ = ["VIRTUAL_SWITCH_DOMAIN", "render_vm_topology"]

VIRTUAL_SWITCH_DOMAIN = "ffff:ff"
_GPU_CLASS = "0x030200"
_NIC_CLASS = "0x020700"
_BRIDGE_CLASS = "0x060400"


def _link(attributes: dict[str, str], pci: PciLocation | None) -> dict[str, str]:
    if pci is not None and pci.link_speed:
        attributes["link_speed"] = pci.link_speed
    if pci is not None and pci.link_width is not None:
        attributes["link_width"] = str(pci.link_width)
    return attributes


def render_vm_topology(inventory: HostInventory, selection: FabricSelection) -> str:
    """Return the topology XML that puts each GPU and its paired NICs below one virtual switch."""
    gpus = {gpu.bdf: gpu for gpu in inventory.gpus}
    hcas = {hca.name: hca for hca in inventory.hcas}
    nics_of: dict[str, list[str]] = {}
    for pair in selection.pairs:
        names = nics_of.setdefault(pair.gpu, [])
        if pair.hca not in names:
            names.append(pair.hca)
    groups: dict[tuple[str, ...], list[str]] = {}
    for gpu in sorted(nics_of):
        groups.setdefault(tuple(nics_of[gpu]), []).append(gpu)
    system = ET.Element("system", version="1")
    cpus: dict[int, ET.Element] = {}
    placed: set[str] = set()

    def numa_of(bdf: str) -> int:
        pci = gpus[bdf].pci
        return pci.numa_node if pci is not None and pci.numa_node is not None else 0

    ordered = sorted(groups.items(), key=lambda item: (numa_of(item[1][0]), item[1][0]))
    for number, (nics, members) in enumerate(ordered, start=1):
        first = gpus[members[0]].pci
        numa = numa_of(members[0])
        if numa not in cpus:
            cpus[numa] = ET.SubElement(system, "cpu", numaid=str(numa))
        bridge = ET.SubElement(cpus[numa], "pci", _link({
            "busid": f"{VIRTUAL_SWITCH_DOMAIN}:{number:02x}.0", "class": _BRIDGE_CLASS,
            "vendor": "0x0000", "device": "0x0000",
            "subsystem_vendor": "0x0000", "subsystem_device": "0x0000"}, first))  # fmt: skip
        for bdf in members:
            ET.SubElement(bridge, "pci", _link({"busid": bdf, "class": _GPU_CLASS},
                                               gpus[bdf].pci))  # fmt: skip
        for name in nics:
            nic = hcas[name].pci
            if nic is None or nic.bdf in placed:
                continue
            placed.add(nic.bdf)
            ET.SubElement(bridge, "pci", _link({"busid": nic.bdf, "class": _NIC_CLASS}, nic))
    ET.indent(system)
    return ET.tostring(system, encoding="unicode") + "\n"
