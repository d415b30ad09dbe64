"""The kopf operator of TensorParallelJob: child objects, status, failures, deletion.

Run with ``kopf run -m tpfabric_operator``. It talks to the API server only through one adapter
module and never imports the scheduler components (import-linter contract).
"""
