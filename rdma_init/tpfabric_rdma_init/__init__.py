"""The RDMA init container of every worker pod: HCA discovery, GPUDirect checks, NCCL config."""
