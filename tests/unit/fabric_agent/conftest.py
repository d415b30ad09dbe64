"""The fabric agent's tests also run on the init program's host trees (the DGX H100 and the other
layouts of ``tests/unit/rdma_init/rdma_host_builder.py``): one picture of a node for both."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rdma_init"))
