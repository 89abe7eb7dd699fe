# Berth's entry points. `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
PACKAGING := pyproject.toml setup.py dev/pyproject.toml
STAMP  := $(VENV)/.installed-$(shell cat $(PACKAGING) | sha256sum | cut -c1-12)

.PHONY: help install demo test test-unit test-integration bench bench-engine bench-gpu-trace \
        bench-pipeline bench-scaling bench-k8s schemas lint typecheck test-lowest up down status clean deploy-render

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): $(PACKAGING)
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=python3"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/pip install --quiet -e '.[test,bench,dev]' -e ./dev
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)  ## create .venv and install Berth (and its dev tooling, berth-dev) with their dependencies

demo: $(STAMP)  ## Berth's main job: the local stack end to end on a sample workload
	$(BIN)/berth demo

test: $(STAMP)  ## every test: unit, then integration on real Kafka and Postgres
	$(BIN)/python -m berth_dev.devstack fetch
	$(BIN)/pytest tests

test-unit: $(STAMP)  ## fast tests of the pure parts
	$(BIN)/pytest tests/unit

test-integration: $(STAMP)  ## tests against real Kafka/Postgres started by the project
	$(BIN)/pytest tests/integration

bench-engine: $(STAMP)  ## placement engine throughput (SchedulingBasic shape and GPU mix)
	$(BIN)/python -m bench.engine --case scheduling-basic --record
	$(BIN)/python -m bench.engine --case gpu-mixed --record

.PHONY: bench-kube-perf
bench-kube-perf: $(STAMP)  ## kube-scheduler's scheduler_perf (built from the Go proxy, 10+ min first time) vs the engine, same shapes
	$(BIN)/python -m bench.engine.kube_perf --repeat 3 --record

bench-gpu-trace: $(STAMP)  ## GPU allocation on the Alibaba v2023 trace vs FGD/BestFit/Random
	$(BIN)/python -m bench.gpu_trace --record

bench-pipeline: $(STAMP)  ## placements/s through Kafka, inventory and decision at rising load (5,000 nodes)
	$(BIN)/python -m bench.pipeline --record

bench-scaling: $(STAMP)  ## a simulated day of bursty chat traffic + spot notices: Berth vs KEDA-like vs Dynamo-like scaling
	$(BIN)/python -m bench.scaling --record

bench-k8s: $(STAMP)  ## kube-scheduler vs Berth on a real kube-apiserver: 1,250 8-GPU nodes, 5,000 pods, same QPS
	$(BIN)/python -m bench.k8s --record

schemas: $(STAMP)  ## rewrite the committed JSON Schemas from the models
	$(BIN)/berth schemas export

deploy-render: $(STAMP)  ## lint the Helm chart and rewrite deploy/manifests/berth.yaml (builds helm once)
	$(BIN)/python -m berth_dev.devstack.helm render

lint: $(STAMP)  ## ruff (lint and format check), mypy, and the architecture rules (import-linter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m berth_dev.typecheck
	$(BIN)/python -m berth_dev.lint_imports

typecheck: $(STAMP)  ## mypy on the product (strict on berth.core, berth.cells, berth.schemas)
	$(BIN)/python -m berth_dev.typecheck

test-lowest: $(STAMP)  ## unit tests on the lowest direct dependency versions pyproject allows (own venv)
	PYTHON=$(PYTHON) UV=$(BIN)/uv .ci/lowest-direct

up: $(STAMP)  ## start Kafka and Postgres in the background
	$(BIN)/berth dev up

down: $(STAMP)  ## stop them
	$(BIN)/berth dev down

status: $(STAMP)
	$(BIN)/berth dev status

clean:  ## remove the venv and build leftovers (keeps the download cache)
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
