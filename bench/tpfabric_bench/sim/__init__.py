"""A communication-aware simulation of a GPU cluster: placement changes how long jobs run.

Pure and deterministic: seeded traces, simulated time only (the wall clock only times the placer),
no I/O beyond reading and writing trace CSVs. :mod:`.constants` holds every figure the model uses,
:mod:`.model` turns a job's shape and placement into a step time (compute, tensor-, pipeline- and
data-parallel communication, uplink contention), :mod:`.trace` generates and reads job traces,
:mod:`.cluster` builds the fabric and measures fragmentation, :mod:`.faults` makes links degrade
during a run and prices a restart, :mod:`.engine` replays a trace with one placer and measures what
users feel (completion times, waits, communication share). It is a model for comparing placers side
by side, never a prediction of a real cluster.
"""
