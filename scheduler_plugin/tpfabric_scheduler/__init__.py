"""The kube-scheduler HTTP extender (filter, prioritize) and the gang placer.

It keeps an in-memory snapshot of nodes, pods and jobs from watches and never lists the cluster
per request; it never imports the operator (import-linter contract). Start at :mod:`.placer`
(the cycle, as numbered steps); each guarantee it keeps is a module of :mod:`.policy`, and
:mod:`.kube` is its one adapter to the API server.
"""
