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
DOCKER ?= docker
IMAGE_PREFIX ?= tpfabric
IMAGE_TAG ?= dev

.PHONY: demo test lint typecheck test-unit test-integration toolchain venv constraints clean \
	images e2e-kind

demo: venv toolchain
	$(BIN)/tpfabric demo

test: lint typecheck test-unit test-integration

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
	$(BIN)/pytest tests/integration $(PYTEST_FLAGS)

constraints: venv
	{ echo '# Exact versions CI and `make` install (pip -c). Regenerate: make constraints'; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^tpfabric'; } > requirements/constraints.txt

images:
	$(DOCKER) build -t $(IMAGE_PREFIX)/tpfabric:$(IMAGE_TAG) -f images/tpfabric/Dockerfile .
	$(DOCKER) build -t $(IMAGE_PREFIX)/rdma-init:$(IMAGE_TAG) rdma_init
	$(DOCKER) build -t $(IMAGE_PREFIX)/fake-rdma-device-plugin:$(IMAGE_TAG) \
	  -f e2e/tpfabric_deviceplugin/Dockerfile e2e

# kind cluster, images, chart and a TensorParallelJob end to end (needs Docker and kind).
e2e-kind: venv
	e2e/kind/run.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
