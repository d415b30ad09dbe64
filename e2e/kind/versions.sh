# Versions of the kind e2e's own builds (sourced by e2e/kind/*.sh). Kubernetes comes from
# e2e/toolchain/kubernetes/go.mod, the kind CLI from GO_INSTALL_TOOLS in
# e2e/tpfabric_localcluster/toolchain.py; the runtime pieces are those kind's base image pins
# (images/base/Dockerfile of that kind release), CoreDNS and pause those kubeadm deploys.
# shellcheck shell=bash disable=SC2034
_versions_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# the require line of MODULE in GO_MOD: `require M vX` or `\tM vX` inside a require block
_require() { sed -nE "s#^(require)?[[:space:]]*$1[[:space:]]+(v[^[:space:]]+).*#\\2#p" "$2" | head -n1; }
KUBERNETES_VERSION=$(_require k8s.io/kubernetes "$_versions_root/e2e/toolchain/kubernetes/go.mod")
KIND_VERSION=$(sed -n 's/.*"kind": ("sigs.k8s.io\/kind", "\(v[^"]*\)").*/\1/p' \
  "$_versions_root/e2e/tpfabric_localcluster/toolchain.py")
ETCD_VERSION=$(_require go.etcd.io/etcd/server/v3 "$_versions_root/e2e/toolchain/etcd/go.mod")
CONTAINERD_VERSION=v2.3.4
RUNC_VERSION=v1.4.3
CRICTL_VERSION=v1.36.0
CNI_PLUGINS_VERSION=v1.9.1
COREDNS_VERSION=v1.14.6
PAUSE_VERSION=3.10.2
DEBIAN_SUITE=bookworm
unset _versions_root
unset -f _require
