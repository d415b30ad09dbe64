"""The ``tpfabric`` command line: local cluster, toolchain, demo (and later topology, bench)."""
