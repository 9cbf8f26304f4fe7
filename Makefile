# The README's two commands. Each sets up what it needs on a fresh machine and is quick when
# everything is already in place:
#   make run    creates .venv, installs maxclaw, runs `maxclaw serve` (embedded PostgreSQL
#               unless MAXCLAW_DATABASE_URL is set; extra flags: make run ARGS="--port 9000")
#   make test   creates .venv, installs maxclaw with its test extras, makes sure Debian's
#               chromium is there, and runs the whole suite in parallel (pytest-xdist)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# --durations: CI logs name the slowest tests, so the suite's time stays visible
# -m "not slow": the reliability proofs marked slow (kill -9 runs, fuzzing, fault injection,
# the 10,000-card sweep, latency) run in their own CI step, `make test-slow`; "not alone": the
# timing proofs marked alone (another user's p99 under load against idle) are what a parallel
# neighbour disturbs, so they run only in `make test-alone` (its own CI step), by themselves
# -n: one worker more than the CPUs. Many tests spend seconds waiting on other processes
# (a serve starting, a lease or a timeout lapsing, a browser): with one worker per CPU the two
# cores of the reference machine were idle for part of the run (docs/benchmarks.md, issue 33
# item 4: 437 s with 2 workers, 375 s with 3)
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 )))
# --dist loadscope --no-loadscope-reorder: a module's tests on one worker (a module's shared
# serve starts once), modules handed out in the order tests/conftest.py's LONG_FIRST gives
PYTEST_ARGS ?= -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=15 \
	-m "not slow and not alone"
SLOW_ARGS ?= -n auto --durations=15 -m "slow and not alone"
# the timing proofs that compare another user's p99 under load with idle: one at a time, on a
# machine running nothing else of ours (a parallel neighbour's load would be measured as theirs)
ALONE_ARGS ?= -p no:xdist -p no:randomly --durations=15 -m alone

# pip runs again only when pyproject.toml changes (the install is editable: code changes need
# no reinstall); the stamps live inside .venv, so deleting .venv starts over cleanly
DEPS_HASH := $(shell (sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml) | cut -c1-16)
RUN_STAMP := $(VENV)/.maxclaw-run-$(DEPS_HASH)
TEST_STAMP := $(VENV)/.maxclaw-test-$(DEPS_HASH)

.PHONY: run test test-slow test-alone chromium

run: $(RUN_STAMP)
	$(BIN)/maxclaw serve $(ARGS)

# Compiled bytecode, also where the environment says PYTHONDONTWRITEBYTECODE (so not beside the
# sources): under .pytest_cache/pycache. Without it each xdist worker compiled and
# assertion-rewrote all 160 test modules again (7.4 s of CPU per worker before its first test,
# 4.0 s with it), as did every serve and CLI process its own imports.
PYCACHE_ENV := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/.pytest_cache/pycache

test: $(TEST_STAMP) chromium
	$(PYCACHE_ENV) $(BIN)/python -m pytest $(PYTEST_ARGS)

test-slow: $(TEST_STAMP) chromium
	$(PYCACHE_ENV) $(BIN)/python -m pytest $(SLOW_ARGS)

test-alone: $(TEST_STAMP)
	$(PYCACHE_ENV) $(BIN)/python -m pytest $(ALONE_ARGS)

$(BIN)/python:
	PYTHON=$(PYTHON) scripts/ensure-venv.sh $(VENV)

$(RUN_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# the test install is a superset of the run install
$(TEST_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(RUN_STAMP)

chromium:
	@scripts/ensure-chromium.sh
