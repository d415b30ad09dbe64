# The two commands of the README: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Go from PATH, or bootstrapped from the Go module proxy into the cache when missing or too old.
GO_ENV = PATH="$$(e2e/toolchain/bootstrap-go.sh):$$PATH"
PYTEST_FLAGS ?=
# Container images (`make images`, needs Docker): <prefix>/tpfabric, rdma-init, fake-rdma-device-plugin.
# BASE_IMAGE replaces the Dockerfiles' pinned python base; HOST_WHEELS=1 installs Python packages
# from wheels built on the host (for builds that cannot reach PyPI). See images/build.sh.
DOCKER ?= docker
IMAGE_PREFIX ?= tpfabric
IMAGE_TAG ?= dev
BASE_IMAGE ?=
HOST_WHEELS ?= 0

.PHONY: demo test lint typecheck test-unit test-integration test-soak toolchain venv constraints locks \
	clean images e2e-kind test-e2e

demo: venv toolchain
	$(BIN)/tpfabric demo

test: lint typecheck test-unit test-integration test-soak

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/constraints.txt
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/constraints.txt -e '.[dev]'
	touch $@

toolchain: venv
	$(GO_ENV) $(BIN)/tpfabric toolchain build

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

test-unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_FLAGS)

test-integration: venv toolchain
	$(GO_ENV) $(BIN)/tpfabric toolchain build --minimum --controllers --kueue --promtool
	$(BIN)/pytest tests/integration $(PYTEST_FLAGS)

# One long run on the local control plane (marker soak: 1,000 kwok nodes, churn, two leader kills;
# ~5 min alone on 2 cores). Its own tier, part of `make test`. pytest's exit 5 (nothing collected)
# fails it like any other tier.
test-soak: venv toolchain
	$(BIN)/pytest tests/soak $(PYTEST_FLAGS)

constraints: venv
	{ echo '# Exact versions CI and `make` install (pip -c). Regenerate: make constraints'; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^tpfabric'; } > requirements/constraints.txt

# The hashed locks the images install from (pip --require-hashes): the tpfabric image's runtime
# dependencies at the versions of requirements/constraints.txt (run after `make constraints`), its
# build backend, the NCCL wheels rdma-init ships into users' containers, the fake device plugin's
# packages. pip-compile (pip-tools) runs in a venv of its own; each lock holds the index's sha256
# of every file of a version (every platform), so an image builds the same on amd64 and arm64.
# tests/unit/chart/test_locks.py fails when a lock and its input differ.
PIP_TOOLS ?= pip-tools==7.7.0
LOCK_VENV ?= .venv-locks
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make locks" $(LOCK_VENV)/bin/pip-compile --quiet \
	--generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
LOCKS = requirements/build e2e/requirements/fake-rdma-device-plugin \
	rdma_init/requirements/nccl-cu12 rdma_init/requirements/nccl-cu13

locks:
	[[ -x $(LOCK_VENV)/bin/pip-compile ]] || { $(PYTHON) -m venv $(LOCK_VENV) \
	  && $(LOCK_VENV)/bin/pip install --quiet "$(PIP_TOOLS)"; }
	$(PIP_COMPILE) --constraint requirements/constraints.txt --output-file requirements/image.txt \
	  pyproject.toml
	for lock in $(LOCKS); do $(PIP_COMPILE) --output-file $$lock.txt $$lock.in; done

images: venv
	DOCKER=$(DOCKER) images/build.sh --prefix $(IMAGE_PREFIX) --tag $(IMAGE_TAG) \
	  $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(if $(filter 1,$(HOST_WHEELS)),--host-wheels)

# A real kind cluster, built without a registry (Docker installed and started if missing, node
# image and tools cached in ~/.cache/tpfabric), the images, the chart and a TensorParallelJob end
# to end. Root for a fresh host (apt, dockerd, debootstrap). See e2e/kind/run.sh.
e2e-kind: venv
	$(GO_ENV) e2e/kind/run.sh

# The same as a pytest tier (marker e2e; skipped only where no Docker engine can be started).
test-e2e: venv
	$(GO_ENV) $(BIN)/pytest -m e2e tests/e2e $(PYTEST_FLAGS)

clean:
	rm -rf $(VENV) $(LOCK_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
