#!/usr/bin/env bash
# The LeaderWorkerSet controller of the kind e2e, without a registry (run.sh calls it):
#   e2e/kind/lws-controller.sh LWS_BINARY MANIFEST     # prints LWS_IMAGE=<image> on stdout
#
#  1. LWS_BINARY, the static `lws` that `tpfabric toolchain build --controllers` builds from the Go
#     module proxy (CGO_ENABLED=0), becomes an image FROM scratch (images/lws-controller/Dockerfile),
#     tagged tpfabric-kind/lws:<version>;
#  2. MANIFEST gets what LWS's own config/default deploys (namespace lws-system, CRDs, RBAC, the
#     manager's ConfigMap, the webhook Service, Secret and configurations; the manager makes its
#     own certificate: internalCertManagement), rendered with `kubectl kustomize` from the source
#     of the very module the binary was built from (e2e/toolchain/controllers/go.mod), with two
#     changes: that image, and one replica instead of two (a 2-core host; nothing to fail over).
# Apply MANIFEST server-side: the CRD is too large for client-side apply's annotation.
# Environment: DOCKER, KUBECTL (default: docker, kubectl on PATH); Go (bootstrapped) finds the
# module source, in the module cache since the build.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DOCKER=${DOCKER:-docker}
KUBECTL=${KUBECTL:-kubectl}
[[ $# -eq 2 ]] || { echo "usage: $0 LWS_BINARY MANIFEST" >&2; exit 2; }
BINARY=$1
MANIFEST=$2
WRAPPER=$ROOT/e2e/toolchain/controllers
VERSION=$(sed -nE 's#^(require)?[[:space:]]*sigs\.k8s\.io/lws[[:space:]]+(v[^[:space:]]+).*#\2#p' \
  "$WRAPPER/go.mod" | head -n1)
[[ -n $VERSION ]] || { echo "lws-controller: no sigs.k8s.io/lws in $WRAPPER/go.mod" >&2; exit 1; }
IMAGE=tpfabric-kind/lws:$VERSION

go_bin=$("$ROOT/e2e/toolchain/bootstrap-go.sh")
export PATH="$go_bin:$PATH"
# FROM scratch has no C library: the binary must be static (the toolchain builds CGO_ENABLED=0).
grep -q 'CGO_ENABLED=0' <<<"$(go version -m "$BINARY")" \
  || { echo "lws-controller: $BINARY was not built with CGO_ENABLED=0 (not static)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The build context holds the binary alone (its cache folder also holds jobset's).
mkdir "$work/context"
cp "$BINARY" "$work/context/lws"
"$DOCKER" build -q -t "$IMAGE" -f "$ROOT/images/lws-controller/Dockerfile" "$work/context" >/dev/null

module=$(cd "$WRAPPER" && go mod download -json "sigs.k8s.io/lws@$VERSION" | jq -r .Dir)
[[ -f $module/config/default/kustomization.yaml ]] \
  || { echo "lws-controller: no config/default in $module" >&2; exit 1; }
# kustomize takes no absolute paths to a base: link the module source into the overlay's folder.
ln -s "$module" "$work/lws"
cat >"$work/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - lws/config/default
patches:
  - target:
      group: apps
      kind: Deployment
      name: lws-controller-manager
    patch: |-
      - {op: replace, path: /spec/replicas, value: 1}
      - {op: test, path: /spec/template/spec/containers/0/name, value: manager}
      - {op: replace, path: /spec/template/spec/containers/0/image, value: "$IMAGE"}
      - {op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: IfNotPresent}
EOF
# (LWS's kustomization still uses commonLabels: kustomize warns about it on stderr; not ours.)
"$KUBECTL" kustomize "$work" 2> >(grep -v "'commonLabels' is deprecated" >&2) >"$MANIFEST"
grep -q "image: $IMAGE\$" "$MANIFEST" \
  || { echo "lws-controller: the rendered Deployment does not run $IMAGE" >&2; exit 1; }
echo "LWS_IMAGE=$IMAGE"
