#!/usr/bin/env bash
# Build the binaries a kind node image needs, without a registry: everything from the Go module
# proxy (plus Kubernetes' pause.c and gcc), cached per version in the tpfabric cache:
#   ~/.cache/tpfabric/bin/<name>-<version>/...   (TPFABRIC_CACHE / XDG_CACHE_HOME respected)
# Prints the cache folder of every group, one `name=folder` a line, on stdout.
#   e2e/kind/node-binaries.sh
# Versions: those kind's base image pins (images/base/Dockerfile of the pinned kind), CoreDNS the
# one kubeadm of the pinned Kubernetes deploys, and the Kubernetes version of
# e2e/toolchain/kubernetes/go.mod. Builds run one at a time (2 shared cores: parallel builds only
# thrash). A group is built into <folder>.partial and renamed when complete.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${TPFABRIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpfabric}
export PATH="$("$ROOT/e2e/toolchain/bootstrap-go.sh"):$PATH"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath"

# shellcheck source=e2e/kind/versions.sh
source "$HERE/versions.sh"

# apt_install PACKAGE...: Debian's packages (refreshing the package lists once if need be).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$@" >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "$@" >&2; }
}
log() { printf 'node-binaries: %s\n' "$*" >&2; }

# build NAME VERSION FUNCTION: run FUNCTION with $OUT set to a fresh partial folder, once.
build() {
  local name=$1 version=$2 fn=$3 final partial started
  final="$CACHE/bin/$name-$version"
  if [[ ! -f $final/.complete ]]; then
    partial="$final.partial"
    rm -rf "$partial"
    mkdir -p "$partial"
    started=$(date +%s)
    log "building $name $version into $final"
    OUT=$partial "$fn" "$version" >&2
    touch "$partial/.complete"
    rm -rf "$final"
    mv "$partial" "$final"
    log "  $name: done in $(( $(date +%s) - started ))s"
  fi
  echo "$name=$final"
}

static_install() { CGO_ENABLED=0 GOBIN=$OUT go install -ldflags='-s -w' "$@"; }

build_kubernetes_node() {
  # kubelet, kubeadm, kube-proxy from the same wrapper module as the control-plane binaries.
  local version=$1 major minor flags=(-s -w)
  IFS=. read -r major minor _ <<<"${version#v}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=("-X $pkg.gitVersion=$version" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor"
            "-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=1970-01-01T00:00:00Z")
  done
  # The wrapper's go.sum lacks sums of modules only the node binaries import: -mod=mod adds them
  # in a scratch copy, never in the repo.
  local work
  work=$(mktemp -d)
  cp "$ROOT/e2e/toolchain/kubernetes/go.mod" "$ROOT/e2e/toolchain/kubernetes/go.sum" "$work/"
  (cd "$work" && CGO_ENABLED=0 go build -mod=mod -ldflags="${flags[*]}" -o "$OUT/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy)
  rm -rf "$work"
}

build_containerd() {
  static_install -tags 'no_aufs no_zfs no_btrfs no_devmapper' \
    "github.com/containerd/containerd/v2/cmd/containerd@$1" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$1" \
    "github.com/containerd/containerd/v2/cmd/ctr@$1"
}

build_runc() {
  # seccomp needs cgo and libseccomp (the node image has libseccomp2, Debian's like the host).
  if [[ ! -e /usr/include/seccomp.h ]]; then
    log "installing libseccomp-dev (runc's seccomp support)"
    apt_install libseccomp-dev
  fi
  CGO_ENABLED=1 GOBIN=$OUT go install -tags seccomp -ldflags='-s -w' "github.com/opencontainers/runc@$1"
}

build_crictl() { static_install "sigs.k8s.io/cri-tools/cmd/crictl@$1"; }

build_cni_plugins() {
  static_install "github.com/containernetworking/plugins/plugins/ipam/host-local@$1" \
    "github.com/containernetworking/plugins/plugins/main/loopback@$1" \
    "github.com/containernetworking/plugins/plugins/main/ptp@$1" \
    "github.com/containernetworking/plugins/plugins/meta/portmap@$1"
}

build_coredns() { static_install "github.com/coredns/coredns@$1"; }

build_pause() {
  # Kubernetes' own pause.c, from the k8s.io/kubernetes module, linked statically.
  local dir
  dir=$(cd "$ROOT/e2e/toolchain/kubernetes" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | jq -r .Dir)
  gcc -Os -static -DVERSION="$1" -o "$OUT/pause" "$dir/build/pause/linux/pause.c"
  strip "$OUT/pause"
}

if ! command -v gcc >/dev/null || ! command -v jq >/dev/null; then
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null \
    || { log "needs gcc and jq: apt-get install gcc libc6-dev jq"; exit 1; }
  log "installing gcc and jq"
  apt_install gcc libc6-dev jq
fi

build kubernetes-node "$KUBERNETES_VERSION" build_kubernetes_node
build containerd "$CONTAINERD_VERSION" build_containerd
build runc "$RUNC_VERSION" build_runc
build crictl "$CRICTL_VERSION" build_crictl
build cni-plugins "$CNI_PLUGINS_VERSION" build_cni_plugins
build coredns "$COREDNS_VERSION" build_coredns
build pause "$PAUSE_VERSION" build_pause
