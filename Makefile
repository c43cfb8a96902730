# pgsched developer tasks. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Parallel test processes: most tests wait on PostgreSQL, a clock or a child process, so 4 beat 2 on two cores.
TEST_WORKERS ?= 4
# Which tiers `make test` runs (markers: unit, sql, worker, process, smoke; chaos is `make chaos`).
TEST_MARKERS ?= not chaos

.DEFAULT_GOAL := help

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,test,lint]'
	touch $(STAMP)

install: $(STAMP) ## Create the virtualenv (.venv) with pgsched and the test tools

demo: $(STAMP) ## Start the embedded PostgreSQL and run a real workload end to end
	$(BIN)/pgsched demo

test: $(STAMP) ## Run the test suite in parallel (real PostgreSQL: one embedded server per test process)
	@# As root, the embedded server runs as the user pgserver, which it adds when missing: add it
	@# once here, before the test processes start their servers at the same moment.
	@if [ "$$(id -u)" = 0 ] && ! id pgserver >/dev/null 2>&1; then useradd -s /bin/bash pgserver; fi
	$(BIN)/pytest -m "$(TEST_MARKERS)" -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

test-unit: $(STAMP) ## Run the tests that need no database
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

chaos: $(STAMP) ## Run the fault-injection scenarios (several minutes)
	$(BIN)/pytest -m chaos tests/chaos tests/ha -s $(PYTEST_ARGS)

ha: $(STAMP) ## Patroni cluster (3 x PostgreSQL 15, etcd): SIGKILL of the primary mid-drain, then a switchover
	@if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server >/dev/null \
				|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server >/dev/null); \
		else echo "make ha needs patroni and etcd: apt-get install -y patroni etcd-server"; exit 1; fi; \
	fi
	$(BIN)/pytest -m chaos tests/ha -s -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (check + format) and mypy --strict
	$(BIN)/ruff check pgsched tests bench migrations examples
	$(BIN)/ruff format --check pgsched tests bench migrations examples
	$(BIN)/mypy --strict pgsched

fmt: $(STAMP) ## Format the code
	$(BIN)/ruff format pgsched tests bench migrations examples
	$(BIN)/ruff check --fix pgsched tests bench migrations examples

bench: $(STAMP) ## Benchmark pgsched against its peers (sets up its own server and venv)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

db-up: $(STAMP) ## Start the embedded PostgreSQL and print its DSN
	$(BIN)/pgsched db start

db-down: $(STAMP) ## Stop the embedded PostgreSQL
	$(BIN)/pgsched db stop

migration: $(STAMP) ## Freeze sql/ changes into a new revision: make migration m="what changed"
	$(BIN)/python migrations/new_revision.py "$(m)"

dist: $(STAMP) ## Build the wheel users install into their projects: dist/pgsched-<version>-py3-none-any.whl
	rm -rf dist
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist *.egg-info

.PHONY: help install demo test test-unit chaos ha lint fmt bench db-up db-down migration dist clean
