#!/usr/bin/env bash
# End-to-end test of tpfabric on kind (needs a Docker engine): builds and loads the images, labels
# the four workers with a fake two-leaf fabric, deploys the fake RDMA device plugin, installs the
# chart, applies a TensorParallelJob and checks where it landed and the NCCL config its workers got.
#
#   e2e/kind/run.sh                 # or: make e2e-kind; pytest tests/e2e
# Environment: KIND_CLUSTER (default tpfabric-e2e; fabric.yaml names its workers), KEEP_CLUSTER=1
# leaves the cluster up, KIND_NODE_IMAGE picks the node image, KIND/HELM/KUBECTL/TPFABRIC/DOCKER
# name the binaries (default: PATH, then tpfabric's toolchain cache).
# Every manifest it applies is also validated on the local control plane by
# tests/integration/test_helm.py (server-side dry run), so these files cannot rot unseen.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLUSTER=${KIND_CLUSTER:-tpfabric-e2e}
NAMESPACE=tpfabric-system
JOB=e2e-tp8x2
JOB_NAMESPACE=default
IMAGE_TAG=dev
IMAGES=(tpfabric/tpfabric tpfabric/rdma-init tpfabric/fake-rdma-device-plugin)

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'e2e/kind: %s\n' "$*" >&2; exit 1; }

# tool NAME ENVVAR: the binary named by $ENVVAR, else on PATH, else in tpfabric's cache.
tool() {
  local name=$1 var=$2 found
  if [[ -n ${!var:-} ]]; then echo "${!var}"; return; fi
  if found=$(command -v "$name"); then echo "$found"; return; fi
  found=$(compgen -G "${TPFABRIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpfabric}/bin/*/$name" | sort | tail -n1 || true)
  [[ -n $found ]] || die "$name not found: install it, put it on PATH or set $var"
  echo "$found"
}

DOCKER=$(tool docker DOCKER)
"$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers ($DOCKER info failed); kind needs one"
KIND=$(tool kind KIND)
HELM=$(tool helm HELM)
KUBECTL=$(tool kubectl KUBECTL)
if [[ -z ${TPFABRIC:-} && -x $ROOT/.venv/bin/tpfabric ]]; then TPFABRIC=$ROOT/.venv/bin/tpfabric; fi
TPFABRIC=$(tool tpfabric TPFABRIC)

KUBECONFIG_FILE=$(mktemp)
kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

finish() {
  local status=$?
  if [[ $status -ne 0 ]] && [[ -s $KUBECONFIG_FILE ]]; then
    log "FAILED: state of the cluster"
    kubectl get nodes -L topology.tpfabric.io/leaf || true
    kubectl get pods -A -o wide || true
    kubectl get tpj -A -o yaml || true
    kubectl -n "$NAMESPACE" logs deploy/tpfabric-scheduler --all-containers --tail=100 || true
    kubectl -n "$NAMESPACE" logs deploy/tpfabric-operator --tail=100 || true
    kubectl -n "$JOB_NAMESPACE" describe pods -l "tpfabric.io/job-name=$JOB" || true
  fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    echo "cluster $CLUSTER left up: $KIND get kubeconfig --name $CLUSTER" >&2
  else
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -f "$KUBECONFIG_FILE"
  exit "$status"
}

log "building the images"
make -C "$ROOT" images IMAGE_PREFIX=tpfabric IMAGE_TAG="$IMAGE_TAG" DOCKER="$DOCKER"

log "creating kind cluster $CLUSTER"
"$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
trap finish EXIT
"$KIND" create cluster --name "$CLUSTER" --config "$HERE/kind-config.yaml" --wait 180s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
for image in "${IMAGES[@]}"; do
  "$KIND" load docker-image --name "$CLUSTER" "$image:$IMAGE_TAG"
done
mapfile -t WORKERS < <(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name | sed 's|^node/||')
[[ ${#WORKERS[@]} -eq 4 ]] || die "expected 4 workers, got: ${WORKERS[*]}"

log "labelling the workers with a two-leaf fabric"
"$TPFABRIC" topology label --fabric "$HERE/fabric.yaml" --apply --kubeconfig "$KUBECONFIG_FILE"
for node in "${WORKERS[@]}"; do
  [[ -n $(kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.tpfabric\.io/leaf}') ]] \
    || die "$node has no leaf label: does fabric.yaml name the workers of cluster $CLUSTER?"
  # kind nodes have no GPUs: advertise 8 fake ones, the way a device plugin would
  kubectl patch node "$node" --subresource=status --type=json \
    --patch-file "$HERE/advertise-gpus.json" >/dev/null
done

log "deploying the fake RDMA device plugin"
kubectl apply -f "$ROOT/e2e/manifests/fake-rdma-device-plugin.yaml"
kubectl -n kube-system rollout status ds/tpfabric-fake-rdma-device-plugin --timeout=180s
for node in "${WORKERS[@]}"; do
  for _ in $(seq 60); do
    [[ $(kubectl get node "$node" -o jsonpath='{.status.allocatable.rdma/ib}') == 8 ]] && break
    sleep 2
  done
  [[ $(kubectl get node "$node" -o jsonpath='{.status.allocatable.rdma/ib}') == 8 ]] \
    || die "$node does not advertise rdma/ib=8"
done

log "installing the chart"
"$HELM" install tpfabric "$ROOT/charts/tpfabric" --kubeconfig "$KUBECONFIG_FILE" \
  --namespace "$NAMESPACE" --create-namespace -f "$HERE/values.yaml" --wait --timeout 5m

log "applying TensorParallelJob $JOB"
kubectl -n "$JOB_NAMESPACE" apply -f "$HERE/tpj.yaml"
for _ in $(seq 90); do
  [[ $(kubectl -n "$JOB_NAMESPACE" get pods -l "tpfabric.io/job-name=$JOB" -o name | wc -l) -eq 2 ]] && break
  sleep 2
done
kubectl -n "$JOB_NAMESPACE" wait pod -l "tpfabric.io/job-name=$JOB" --for=condition=Ready --timeout=300s

log "checking the placement"
mapfile -t NODES < <(kubectl -n "$JOB_NAMESPACE" get pods -l "tpfabric.io/job-name=$JOB" \
  -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}')
LEAVES=$(for node in "${NODES[@]}"; do
  kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.tpfabric\.io/leaf}{"\n"}'
done | sort -u)
[[ $(wc -l <<<"$LEAVES") -eq 1 ]] || die "workers on ${NODES[*]} span leaves: $LEAVES"
DOMAIN=$(kubectl -n "$JOB_NAMESPACE" get tpj "$JOB" -o jsonpath='{.status.placement.domain}')
[[ $DOMAIN == "$LEAVES" ]] || die "status.placement.domain is '$DOMAIN', the workers are on leaf '$LEAVES'"
kubectl -n "$JOB_NAMESPACE" get tpj "$JOB"

log "checking the NCCL config the init container wrote"
for pod in $(kubectl -n "$JOB_NAMESPACE" get pods -l "tpfabric.io/job-name=$JOB" -o name); do
  conf=$(kubectl -n "$JOB_NAMESPACE" exec "$pod" -c worker -- sh -c 'cat "$NCCL_CONF_FILE"')
  grep -q '^NCCL_IB_HCA=' <<<"$conf" || die "$pod: no NCCL_IB_HCA in its nccl.conf:"$'\n'"$conf"
done

echo "PASS: $JOB placed on leaf $DOMAIN (${NODES[*]}), NCCL config written"
