"""``tpfabric diagnose``'s pure half: read what a job says of its slow ranks, join each rank to the
links it uses, and say what those links counted.

- :mod:`.json_documents`: a file of JSON documents, each with the line it starts on;
- :mod:`.nccl_ras`, :mod:`.nccl_inspector`, :mod:`.straggler_report`, :mod:`.serve_trace`: the
  job-side inputs in their published formats (NCCL RAS JSON, NCCL Inspector output,
  nvidia-resiliency-ext straggler reports, ``tpfabric bench serve --trace``);
- :mod:`.spikes`: when a latency spikes, how much, and whether on a period;
- :mod:`.rdma_summary`: the pod's GPU -> HCA pairing ``rdma-init`` leaves in its termination
  message;
- :mod:`.fabric_path`: a port GUID -> its leaf switch port -> that leaf's uplinks, on the
  discovery graph;
- :mod:`.diagnosis`: the join and the findings.

Pure: text and objects in, findings out. No file, clock or network access here.
"""
