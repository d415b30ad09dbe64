"""The kopf operator of TensorParallelJob and of the Gang records of other controllers' gangs.

Run with ``python -m tpfabric_operator`` (flags, the Lease, metrics; :mod:`.__main__`); every
kopf handler is in :mod:`.handlers` (``kopf run -m tpfabric_operator.handlers`` runs them alone,
without the Lease). Its two halves, :mod:`.jobs` and :mod:`.gangs`, know nothing of each other;
each talks to the API server through its own adapter and pod watch. The gang webhook,
:mod:`.webhook`, runs as a component of its own. It never imports the scheduler components
(import-linter contracts: pyproject.toml).
"""
