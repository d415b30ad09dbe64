"""The gang webhook, a component of its own: ``python -m tpfabric_operator.webhook``.

:mod:`.admission` (pure) decides what a gang pod gets at its creation; :mod:`.server` answers
kube-apiserver's AdmissionReviews over TLS; :mod:`.certs` makes and rotates the serving
certificate without cert-manager; :mod:`.node_offers` is the one list+watch it keeps (the nodes,
for a gang pod's default RDMA devices); ``__main__`` runs it. It imports nothing of the
operator's two halves: it runs as many replicas as wanted, without leader election.
"""
