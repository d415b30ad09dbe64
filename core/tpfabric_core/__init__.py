"""tpfabric core: the fabric model, file formats, label codec, API models and placement engine.

Everything here is pure: data in, data out. It must never import a Kubernetes client, kopf, an
HTTP or gRPC stack, or start a process (enforced by the import-linter contracts in pyproject.toml).
"""
