"""The TensorParallelJob half of the operator: one reconcile per job, as a short script.

:mod:`.reconcile` reads the job, its pods (:mod:`.pod_cache`) and its Service, asks
:mod:`.decide` what to do (an :class:`.job_state.Intent`), carries it out
(:mod:`.apply_intent`) and patches the operator-owned status once (:mod:`.job_status`).
Nothing here registers a kopf handler (:mod:`tpfabric_operator.handlers` does) or imports the
gang half (:mod:`tpfabric_operator.gangs`).
"""
