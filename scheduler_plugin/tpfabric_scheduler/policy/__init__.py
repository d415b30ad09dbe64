"""The placer's policies: one module per guarantee of ``docs/how-it-works.md``.

Each decides for one gang and returns what to do (a
:class:`~tpfabric_scheduler.intent.PlacementIntent`): the placement to write, the pods to release
or delete, the Events to record. None talks to the API server or imports its client: the cycle
(:mod:`tpfabric_scheduler.placer`) applies what they return (:mod:`tpfabric_scheduler.apply`).
What a policy may change is the cycle's own state (its snapshot, its holds) and the placer's
memories it is handed (:class:`~tpfabric_scheduler.work.PlacerMemory`), never the store.
"""
