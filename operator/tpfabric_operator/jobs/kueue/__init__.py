"""A TensorParallelJob as a Kueue workload: Kueue's external-framework contract, kept by the job's
reconcile.

:mod:`.workload` (pure) makes the job's ``Workload`` and reads Kueue's verdict on it;
:mod:`.podsets` (pure) says what an admission adds to the workers (flavors, pod-set updates, a
TAS topology assignment); :mod:`.sync` is the reconcile's part with Kueue, the one module here
that reads and writes (through the job's adapter, :mod:`tpfabric_operator.jobs.kube`). Only
TensorParallelJobs are Kueue workloads of tpfabric's, so this package lives in the job half.
"""
