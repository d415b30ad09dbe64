#!/usr/bin/env bash
# Build tpfabric's three images (`make images` runs this):
#   <prefix>/tpfabric:<tag>                 operator, extender/placer, CLI  (images/tpfabric/Dockerfile)
#   <prefix>/rdma-init:<tag>                worker init container           (rdma_init/Dockerfile)
#   <prefix>/fake-rdma-device-plugin:<tag>  kind e2e device plugin          (e2e/tpfabric_deviceplugin/Dockerfile)
# and <prefix>/tpfabric-build:<tag>, the first's build stage (the next build's cache). The image a
# tag named before a rebuild is removed once nothing names it.
#
#   images/build.sh [--prefix tpfabric] [--tag dev] [--base-image IMAGE] [--host-wheels]
#
# By default every Dockerfile starts from its public Python base pinned by digest and pip reaches
# PyPI; every package is installed from a hashed lock (pip --require-hashes; `make locks`).
# --base-image replaces that base (any Debian/Python 3.11 image with `python` and pip).
# --host-wheels installs Python packages from wheels the host fetches (pip on the host, with the
# host's network and certificates; exactly the files of the hashed locks, checked on the host and
# again in the build) into ~/.cache/tpfabric/wheels/<key>/ and serves to the build on loopback
# (docker build --network host): for build containers that cannot reach PyPI (no route, or TLS
# re-signed by a CA only the host trusts). The index URL is a build argument only: nothing of it
# stays in the images.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TPFABRIC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tpfabric}
DOCKER=${DOCKER:-docker}
PREFIX=tpfabric
TAG=dev
BASE_IMAGE=
HOST_WHEELS=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix) PREFIX=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --base-image) BASE_IMAGE=$2; shift 2 ;;
    --host-wheels) HOST_WHEELS=1; shift ;;
    *) echo "images/build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

log() { printf 'images: %s\n' "$*" >&2; }
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=python3

# The hashed locks the Dockerfiles install from (pip --require-hashes; `make locks`): the host
# fetches exactly their files for its platform, checked against the same hashes.
LOCKS=(
  requirements/image.txt
  requirements/build.txt
  rdma_init/requirements/nccl-cu12.txt
  rdma_init/requirements/nccl-cu13.txt
  e2e/requirements/fake-rdma-device-plugin.txt
)

# wheelhouse: print a folder laid out as a PEP 503 index (simple/<project>/<wheels>), filled once
# per set of locks.
wheelhouse() {
  local key dir lock
  key=$(cd "$ROOT" && cat "${LOCKS[@]}" | sha256sum | cut -c1-12)
  dir="$CACHE/wheels/$key"
  if [[ ! -f $dir/.complete ]]; then
    local started flat
    started=$(date +%s)
    rm -rf "$dir"
    flat="$dir/flat"
    mkdir -p "$flat"
    log "fetching the locked wheels on the host into $dir"
    # Wheels only: every locked package has one for Linux x86_64 and aarch64 (the image builds
    # nothing from source but tpfabric itself, from its locked build backend). A lock at a time:
    # two may list the same package.
    for lock in "${LOCKS[@]}"; do
      "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
        --dest "$flat" -r "$ROOT/$lock" >&2
    done
    "$PYTHON" - "$flat" "$dir/simple" <<'PY'
import pathlib, re, sys
flat, simple = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in flat.glob("*.whl"):
    project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    (simple / project).mkdir(parents=True, exist_ok=True)
    wheel.rename(simple / project / wheel.name)
PY
    rmdir "$flat"
    touch "$dir/.complete"
    log "  wheels: done in $(( $(date +%s) - started ))s"
  fi
  echo "$dir"
}

args=()
[[ -n $BASE_IMAGE ]] && args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
SERVER_PID=
if [[ $HOST_WHEELS == 1 ]]; then
  dir=$(wheelhouse)
  port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$PYTHON" -m http.server --bind 127.0.0.1 --directory "$dir" "$port" >/dev/null 2>&1 &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 50); do
    curl -fsS "http://127.0.0.1:$port/simple/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  args+=(--network host --build-arg "PIP_INDEX_URL=http://127.0.0.1:$port/simple/")
fi

build() {
  local image=$1 started before after
  shift
  started=$(date +%s)
  before=$("$DOCKER" image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  log "building $image"
  "$DOCKER" build "${args[@]}" -t "$image" "$@"
  log "  $image: built in $(( $(date +%s) - started ))s ($("$DOCKER" image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
  # The image the tag named before is left without a name: remove it, or every rebuild (each
  # kind-tier run) leaves a dangling image behind, gigabytes after a few dozen runs. One another
  # tag or a container still uses stays (docker refuses, quietly here).
  after=$("$DOCKER" image inspect -f '{{.Id}}' "$image")
  if [[ -n $before && $before != "$after" ]] \
    && [[ $("$DOCKER" image inspect -f '{{len .RepoTags}}' "$before" 2>/dev/null) == 0 ]]; then
    "$DOCKER" image rm "$before" >/dev/null 2>&1 && log "  removed the image $image named before"
  fi
  return 0
}

# The build stage gets a name of its own: the image it makes is the next build's cache, and with a
# name the one it replaces is removed like any other (unnamed, every source change left one).
build "$PREFIX/tpfabric-build:$TAG" --target build -f "$ROOT/images/tpfabric/Dockerfile" "$ROOT"
build "$PREFIX/tpfabric:$TAG" -f "$ROOT/images/tpfabric/Dockerfile" "$ROOT"
build "$PREFIX/rdma-init:$TAG" "$ROOT/rdma_init"
build "$PREFIX/fake-rdma-device-plugin:$TAG" -f "$ROOT/e2e/tpfabric_deviceplugin/Dockerfile" "$ROOT/e2e"
