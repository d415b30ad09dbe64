#!/usr/bin/env bash
# Build, without a registry, the kind node image of the pinned Kubernetes version and the
# Debian/Python base of tpfabric's own images; print their names on stdout:
#   NODE_IMAGE=tpfabric-kind/node:<kubernetes>-<key>
#   PYTHON_BASE_IMAGE=tpfabric-kind/python:<suite>-<key>
# Needs a Docker engine (e2e/kind/docker-engine.sh), root (debootstrap), Go (bootstrapped).
#
# Everything comes from sources this repo pins: the binaries from the Go module proxy
# (e2e/kind/node-binaries.sh), root filesystems from Debian's mirror (debootstrap), kind's base
# image files from the pinned kind module. Caches, keyed by versions and by these scripts:
#   ~/.cache/tpfabric/bin/<name>-<version>/        binaries (node-binaries.sh)
#   ~/.cache/tpfabric/rootfs/<name>-<key>.tar       debootstrap root filesystems
#   Docker's image store                            images, tagged with the key
# The node image holds every image kubeadm needs (apiserver, controller-manager, scheduler,
# kube-proxy, etcd, CoreDNS, pause). Not built: kind's kindnetd (its dependency is not served by
# the Go module proxy) and local-path-provisioner; their tags name a stand-in that only prints
# that, so that `kind build node-image` finds every image it expects. The e2e wires the pod
# network itself (e2e/kind/run.sh: ptp CNI plus routes) and needs no storage provisioner.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${TPFABRIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpfabric}
DOCKER=${DOCKER:-docker}
# shellcheck source=e2e/kind/versions.sh
source "$HERE/versions.sh"
export PATH="$("$ROOT/e2e/toolchain/bootstrap-go.sh"):$PATH"

# apt_install PACKAGE...: Debian's packages (refreshing the package lists once if need be).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$@" >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "$@" >&2; }
}
log() { printf 'node-image: %s\n' "$*" >&2; }
has_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

# The key of every cached image: the versions and the scripts that build them.
KEY=$(cat "$HERE/versions.sh" "$HERE/node-image.sh" "$HERE/node-binaries.sh" | sha256sum | cut -c1-10)
NODE_IMAGE=tpfabric-kind/node:$KUBERNETES_VERSION-$KEY
PYTHON_BASE_IMAGE=tpfabric-kind/python:$DEBIAN_SUITE-$KEY
BASE_IMAGE=tpfabric-kind/base:$KIND_VERSION-$KEY

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# rootfs NAME PACKAGES: the cached debootstrap tarball of a minimal Debian with PACKAGES.
rootfs() {
  local name=$1 packages=$2 tar
  tar="$CACHE/rootfs/$name-$DEBIAN_SUITE-$(sha256sum <<<"$packages" | cut -c1-10).tar"
  if [[ ! -f $tar ]]; then
    command -v debootstrap >/dev/null || {
      log "installing debootstrap"
      apt_install debootstrap
    }
    local started dir mirror
    started=$(date +%s)
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    dir="$WORK/rootfs-$name"
    log "debootstrap $DEBIAN_SUITE ($name) from $mirror"
    debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$dir" "$mirror" >&2 \
      || { tail -n 30 "$dir/debootstrap/debootstrap.log" >&2 || true; return 1; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    mkdir -p "$CACHE/rootfs"
    tar --numeric-owner -C "$dir" -cf "$tar.partial" .
    mv "$tar.partial" "$tar"
    rm -rf "$dir"
    log "  $name rootfs: done in $(( $(date +%s) - started ))s"
  fi
  echo "$tar"
}

# import TAR IMAGE: `docker import` unless the image exists.
import_rootfs() { has_image "$2" || "$DOCKER" import "$1" "$2" >/dev/null; }

build_python_base() {
  has_image "$PYTHON_BASE_IMAGE" && return
  local tar
  tar=$(rootfs python "python3,python3-venv,python3-pip,ca-certificates")
  import_rootfs "$tar" "$PYTHON_BASE_IMAGE-rootfs"
  mkdir -p "$WORK/python"
  # Stands in for python:3.11-slim: `python` on PATH, pip installs allowed (no PEP 668 marker).
  cat >"$WORK/python/Dockerfile" <<EOF
FROM $PYTHON_BASE_IMAGE-rootfs
RUN ln -sf python3 /usr/bin/python && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
    && python -c 'import ensurepip, venv, ssl; print("python", __import__("sys").version)'
ENV LANG=C.UTF-8
CMD ["python3"]
EOF
  "$DOCKER" build -q -t "$PYTHON_BASE_IMAGE" "$WORK/python" >/dev/null
  "$DOCKER" rmi "$PYTHON_BASE_IMAGE-rootfs" >/dev/null
}

build_base() {
  # kind's base image (images/base/Dockerfile of the pinned kind), on Debian $DEBIAN_SUITE.
  has_image "$BASE_IMAGE" && return
  local kind_src tar ctx=$WORK/base
  kind_src=$(cd "$ROOT/e2e/toolchain/kubernetes" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
  tar=$(rootfs kind-base "systemd,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs")
  import_rootfs "$tar" "$BASE_IMAGE-rootfs"
  mkdir -p "$ctx/bin" "$ctx/cni"
  cp -r "$kind_src/images/base/files" "$ctx/files"
  chmod -R u+w "$ctx/files"
  cp "${BIN[containerd]}"/{containerd,containerd-shim-runc-v2,ctr} "${BIN[crictl]}/crictl" "$ctx/bin/"
  cp "${BIN[runc]}/runc" "$ctx/runc"
  cp "${BIN[cni-plugins]}"/{host-local,loopback,ptp,portmap} "$ctx/cni/"
  cat >"$ctx/Dockerfile" <<EOF
FROM $BASE_IMAGE-rootfs
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/LICENSES/ /LICENSES/
COPY files/etc/ /etc/
COPY bin/ /usr/local/bin/
COPY runc /usr/local/sbin/runc
COPY cni/ /opt/cni/bin/
RUN chmod 0755 /usr/local/bin/* /kind /kind/bin /kind/bin/* /usr/local/sbin/runc /opt/cni/bin/* \\
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \\
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
    && ln -sf /usr/lib/systemd/systemd /sbin/init \\
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
    && systemctl mask systemd-binfmt.service \\
    && mkdir -p /etc/kubernetes/manifests \\
    && ctr oci spec \\
       | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
    && containerd --version && runc --version && crictl --version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  "$DOCKER" build -q -t "$BASE_IMAGE" "$ctx" >/dev/null
  "$DOCKER" rmi "$BASE_IMAGE-rootfs" >/dev/null
}

# scratch_image TAG BINARY...: an image FROM scratch holding BINARY (the first is the entrypoint).
scratch_image() {
  local tag=$1 ctx
  shift
  ctx=$(mktemp -d -p "$WORK")
  cp "$@" "$ctx/"
  {
    echo "FROM scratch"
    echo "COPY . /usr/local/bin/"
    echo "ENTRYPOINT [\"/usr/local/bin/$(basename "$1")\"]"
  } >"$ctx/Dockerfile"
  "$DOCKER" build -q -t "$tag" "$ctx" >/dev/null
}

# save_archive FILE TAG...: `docker save` TAGs as `kind build node-image` reads archives: it
# takes the tags of the first of `manifest.json` and `repositories` it meets, and of manifest.json
# only its first image; so `repositories` goes first, and names are in full (docker.io/...).
save_archive() {
  local file=$1
  shift
  "$DOCKER" save -o "$file.short" "$@"
  python3 - "$file.short" "$file" <<'PY'
import io, json, sys, tarfile

def full(tag):
    first = tag.split("/")[0]
    if "/" in tag and ("." in first or ":" in first or first == "localhost"):
        return tag
    return "docker.io/" + (tag if "/" in tag else "library/" + tag)

def rewritten(member, raw):
    if member.name == "manifest.json":
        doc = json.loads(raw)
        for entry in doc:
            entry["RepoTags"] = [full(t) for t in entry.get("RepoTags") or []]
    else:
        doc = {full(repo + ":x")[:-2]: tags for repo, tags in json.loads(raw).items()}
    data = json.dumps(doc).encode()
    member.size = len(data)
    return member, io.BytesIO(data)

with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], "w") as dst:
    members = src.getmembers()
    order = sorted(members, key=lambda m: m.name != "repositories")
    for member in order:
        data = src.extractfile(member) if member.isfile() else None
        if member.name in ("manifest.json", "repositories"):
            member, data = rewritten(member, data.read())
        dst.addfile(member, data)
PY
  rm -f "$file.short"
}

build_node() {
  has_image "$NODE_IMAGE" && return
  build_base
  local tmp=$WORK/node k8s=$WORK/node/kubernetes/server/bin kind_src stub
  mkdir -p "$k8s"
  echo "$KUBERNETES_VERSION" >"$WORK/node/kubernetes/version"
  cp "${BIN[kubernetes-node]}"/{kubeadm,kubelet} "${BIN[kubernetes]}/kubectl" "$k8s/"
  local reg=registry.k8s.io
  for name in kube-apiserver kube-controller-manager kube-scheduler; do
    scratch_image "$reg/$name:$KUBERNETES_VERSION" "${BIN[kubernetes]}/$name"
    save_archive "$k8s/$name.tar" "$reg/$name:$KUBERNETES_VERSION"
  done
  # kube-proxy needs iptables/conntrack: on the node's own Debian base (shares its layers).
  mkdir -p "$WORK/proxy"
  cp "${BIN[kubernetes-node]}/kube-proxy" "$WORK/proxy/"
  printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT ["/usr/local/bin/kube-proxy"]\n' \
    "$BASE_IMAGE" >"$WORK/proxy/Dockerfile"
  "$DOCKER" build -q -t "$reg/kube-proxy:$KUBERNETES_VERSION" "$WORK/proxy" >/dev/null
  # The images kubeadm and kind expect besides those four, saved into kube-proxy.tar: kind takes
  # every tag of every archive as built. etcd is the local control plane's pinned etcd.
  local etcd_tag coredns_tag pause_tags=() extra=()
  kind_src=$(cd "$ROOT/e2e/toolchain/kubernetes" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
  etcd_tag=$(sed -n 's/^\s*DefaultEtcdVersion = "\(.*\)"/\1/p' \
    "$(cd "$ROOT/e2e/toolchain/kubernetes" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | jq -r .Dir)/cmd/kubeadm/app/constants/constants.go")
  scratch_image "$reg/etcd:$etcd_tag" "${BIN[etcd]}/etcd"
  coredns_tag=$reg/coredns/coredns:$COREDNS_VERSION
  scratch_image "$coredns_tag" "${BIN[coredns]}/coredns"
  pause_tags=("$reg/pause:$PAUSE_VERSION"
    "$(sed -n 's/^\s*sandbox_image = "\(.*\)"/\1/p' "$kind_src/images/base/files/etc/containerd/config.toml")")
  for tag in "${pause_tags[@]}"; do scratch_image "$tag" "${BIN[pause]}/pause"; done
  # Stand-ins for kind's kindnetd and local-path images (see the header).
  stub=$WORK/stub
  mkdir -p "$stub"
  printf '#!/bin/sh\necho "not built by tpfabric e2e/kind/node-image.sh: $0" >&2\nexit 1\n' >"$stub/not-built"
  for tag in $(sed -n 's/^const \(kindnetdImage\|storageProvisionerImage\|storageHelperImage\) = "\(.*\)"/\2/p' \
      "$kind_src"/pkg/build/nodeimage/const_*.go); do
    printf 'FROM %s\nLABEL io.tpfabric.stand-in="%s"\n' "$BASE_IMAGE" "$tag" \
      | "$DOCKER" build -q -t "$tag" - >/dev/null
    extra+=("$tag")
  done
  save_archive "$k8s/kube-proxy.tar" "$reg/kube-proxy:$KUBERNETES_VERSION" "$reg/etcd:$etcd_tag" \
    "$coredns_tag" "${pause_tags[@]}" "${extra[@]}"
  tar -C "$tmp" -czf "$WORK/kubernetes-server-linux-amd64.tar.gz" kubernetes
  rm -rf "$tmp/kubernetes"
  log "kind build node-image $NODE_IMAGE"
  mkdir -p "$WORK/tmp"
  TMPDIR=$WORK/tmp "${BIN[kind]}/kind" build node-image --type file --base-image "$BASE_IMAGE" \
    --image "$NODE_IMAGE" "$WORK/kubernetes-server-linux-amd64.tar.gz" >&2
  # The node image holds its own copies: drop the loose tags (the base stays, keyed, for reuse).
  "$DOCKER" rmi "$reg/kube-apiserver:$KUBERNETES_VERSION" "$reg/kube-controller-manager:$KUBERNETES_VERSION" \
    "$reg/kube-scheduler:$KUBERNETES_VERSION" "$reg/kube-proxy:$KUBERNETES_VERSION" "$reg/etcd:$etcd_tag" \
    "$coredns_tag" "${pause_tags[@]}" "${extra[@]}" >/dev/null
}

# Binaries first (the slow part; cached), then the images. The control-plane binaries, etcd and
# the kind CLI are the local control plane's toolchain (tpfabric_localcluster.toolchain).
declare -A BIN
while IFS='=' read -r name folder; do BIN[$name]=$folder; done < <("$HERE/node-binaries.sh")
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
while IFS='=' read -r name path; do BIN[$name]=$(dirname "$path"); done < <("$PYTHON" - <<'PY'
from tpfabric_localcluster.toolchain import ensure_toolchain

toolchain = ensure_toolchain(("kube-apiserver", "etcd", "kind"))
print(f"kubernetes={toolchain.path('kube-apiserver')}")
print(f"etcd={toolchain.path('etcd')}")
print(f"kind={toolchain.path('kind')}")
PY
)

started=$(date +%s)
build_python_base
build_node
# Images of earlier keys (other versions or scripts) are dead weight: ~1.5 GB each.
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' \
  | grep -E '^tpfabric-kind/(node|python|base):' | grep -v -- "-$KEY\$" \
  | xargs -r "$DOCKER" rmi >/dev/null 2>&1 || true
log "images ready in $(( $(date +%s) - started ))s"
echo "NODE_IMAGE=$NODE_IMAGE"
echo "PYTHON_BASE_IMAGE=$PYTHON_BASE_IMAGE"
