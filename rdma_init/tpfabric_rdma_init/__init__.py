"""The RDMA init container of every worker pod: HCA discovery, GPUDirect checks, NCCL config.

Runs before the main container (``python -m tpfabric_rdma_init``) and leaves its results on a
shared volume: ``nccl.conf``, ``nccl.env``, ``lib/libnccl.so.2`` and ``rdma-init-report.json``.
Standard library only, so the init image stays small: it must never import tpfabric_core or any
third-party package.
"""
