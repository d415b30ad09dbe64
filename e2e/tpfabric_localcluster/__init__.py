"""The local control plane: Kubernetes binaries built from Go modules and a process launcher.

A real etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local processes on
127.0.0.1, with fake GPU nodes managed by kwok. The same launcher backs the pytest fixtures, the
demo and the benchmarks. It is a development and test tool: never imported by the operator or the
scheduler components.
"""
