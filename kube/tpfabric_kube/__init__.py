"""tpfabric kube: the Kubernetes API-client plumbing the operator and the placer share.

- :mod:`.list_watch`: an informer's list-in-pages and list-then-watch loop;
- :mod:`.request_timeouts`: a default timeout for every request of a synchronous client;
- :mod:`.leader_election`: leader election on a ``coordination.k8s.io/v1`` Lease.

None of it opens a connection itself: each caller brings its client's calls. Core may not import
this package (an import-linter contract in pyproject.toml), and this package imports no component.
"""
