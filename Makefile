# Cedarberg developer tasks. `make test` is what CI runs (through .ci/run, which adds nothing to it).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
DEMO_DIR := .demo
PYTEST_ARGS ?=
ARGS ?=

.DEFAULT_GOAL := test
.PHONY: venv test-deps test soak lint format bench demo demo-clean clean distclean

# Prerequisites run in the order written: test-deps (which may install the interpreter's venv
# support) before the venv.
.NOTPARALLEL:

# The stamp is newer than pyproject.toml once its dependencies are installed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

# The package's own modules compiled ahead, as `pip install` compiles an installed package: a
# `cedarberg` command then starts without compiling its sources, even where the environment sets
# PYTHONDONTWRITEBYTECODE (docs/performance.md, start-up). Cheap when nothing changed.
venv: $(STAMP)
	$(BIN)/python -m compileall -q gateway catalog kms pipelines >/dev/null

# What the suite needs beyond .venv (Debian packages, oauth2-mock-server under tests/.node),
# installed only when missing; see scripts/install-test-deps.sh. Only checks when all is there.
test-deps:
	PYTHON='$(PYTHON)' bash scripts/install-test-deps.sh

test: test-deps venv
	$(BIN)/pytest $(PYTEST_ARGS)

# The long runs of what `make test` runs bounded (docs/operations.md): the crash run, CRASH_KILLS
# SIGKILLs per deployment (one gateway on SQLite, two on PostgreSQL; `make test` runs 150 each; set
# CEDARBERG_CRASH_SEED to replay a run, CEDARBERG_CRASH_MINUTES to bound it by time); the
# linearizability run, LINEARIZABILITY_OPERATIONS per client (`make test`: 40); the store faults,
# FAULTS_STORE_PHASE_SECONDS per phase; the KMS outage, CEDARBERG_FAULTS_SECONDS. Not part of
# `make test`.
CRASH_KILLS ?= 1500
LINEARIZABILITY_OPERATIONS ?= 1000
FAULT_SECONDS ?= 60
soak: test-deps venv
	CEDARBERG_CRASH_KILLS=$(CRASH_KILLS) $(BIN)/pytest -s tests/e2e/test_crash_consistency.py $(PYTEST_ARGS)
	LINEARIZABILITY_OPERATIONS=$(LINEARIZABILITY_OPERATIONS) $(BIN)/pytest -s --timeout 0 \
		tests/e2e/test_linearizable_commits.py $(PYTEST_ARGS)
	FAULTS_STORE_PHASE_SECONDS=$(FAULT_SECONDS) $(BIN)/pytest -s --timeout 0 tests/e2e/test_faults_store.py $(PYTEST_ARGS)
	CEDARBERG_FAULTS_SECONDS=$(FAULT_SECONDS) $(BIN)/pytest -s --timeout 0 \
		tests/e2e/test_faults_dependencies.py -k kms $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The benchmark suite (bench/README.md): `make bench`, or e.g. `make bench ARGS=--quick`.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -e '.[dev,bench]'
	touch $@

# Debian packages the suite needs beyond the extras: wrk (the load generator) and PostgreSQL 15
# (the cluster of the http-1w-pg variant, as tests/support/postgres.py runs it: runuser, from
# util-linux, runs it as the postgres user when make runs as root). Installed only when missing.
bench: $(BENCH_STAMP)
	@missing=; \
	command -v wrk >/dev/null 2>&1 || missing="$$missing wrk"; \
	[ -x /usr/lib/postgresql/15/bin/initdb ] || missing="$$missing postgresql-15"; \
	{ command -v runuser >/dev/null 2>&1 || [ -x /usr/sbin/runuser ]; } || missing="$$missing util-linux"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		echo "==> bench: installing Debian packages:$$missing"; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing \
		|| { $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update \
			&& $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
	fi
	$(BIN)/python -m bench.suite $(ARGS)

demo: venv
	bash scripts/demo.sh

demo-clean:
	rm -rf $(DEMO_DIR)

clean: demo-clean
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info src/*.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
