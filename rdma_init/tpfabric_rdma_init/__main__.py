"""``python -m tpfabric_rdma_init``: run the init program; must never do more than call ``main``."""

from __future__ import annotations

from tpfabric_rdma_init.cli import main

raise SystemExit(main())
