"""The fabric agent: a DaemonSet that watches one node's HCA ports and PCIe links and publishes
the node's live fabric health (condition ``FabricHealthy``, label ``topology.tpfabric.io/health``,
annotation ``topology.tpfabric.io/fabric-health``, Prometheus metrics).

Reading sysfs and judging are core's (:mod:`tpfabric_core.fabric.sysfs_links`,
:mod:`tpfabric_core.fabric.link_judgement`, :mod:`tpfabric_core.fabric.fabric_condition`); this
package is the loop, the one API adapter and the metrics. It writes nothing but its own node.
"""
