"""A fake RDMA device plugin for kind: the kubelet device-plugin API v1beta1 over real gRPC.

Advertises N fake HCAs (``mlx5_0`` ...) with NUMA topology and health under a configurable
resource name, and backs each with a sysfs/devfs-like tree that the RDMA init container reads, so
a kind cluster exercises the same code paths as a GPU node. It must never touch real RDMA devices.
"""
