"""The fabric agent: a DaemonSet that watches one node's HCA ports and PCIe links and publishes
the node's live fabric health (condition ``FabricHealthy``, label ``topology.tpfabric.io/health``,
annotation ``topology.tpfabric.io/fabric-health``, Prometheus metrics).

Read -> judge -> publish: this package reads sysfs (:mod:`.link_read`, into core's
:mod:`tpfabric_core.fabric.link_samples`); judging and what is published are core's
(:mod:`tpfabric_core.fabric.link_judge`, :mod:`tpfabric_core.fabric.link_publish`). Besides the
reader, this package is the loop, the one API adapter and the metrics. It writes nothing but its
own node.
"""
