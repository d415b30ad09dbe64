"""The gang half of the operator: one Gang record per gang another controller made.

A LeaderWorkerSet's group, a JobSet, a ``scheduling.k8s.io`` PodGroup or a plain pod group
labelled by the gang webhook gets a Gang record, which the placer plans as it plans a
TensorParallelJob. :mod:`.sync` is one sync of one gang, as a short script: it reads
(:mod:`.kube`, the pods from :mod:`.pods`), asks :mod:`.decide` what to do (who owns the gang and
how large it is, :mod:`.owners`; the record, its ranks and status, :mod:`.records`; its life as
a serving group, :mod:`.serving`; the gangs near it, :mod:`.near`; when an idle record goes,
:mod:`.idle`) and writes the answer in one place (:mod:`.apply_intent`). What it keeps between
syncs is one :class:`.state.GangState`. Nothing here registers a kopf handler
(:mod:`tpfabric_operator.handlers` does) or imports the job half (:mod:`tpfabric_operator.jobs`).
"""
