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
# the 10,000-card sweep, latency) run in their own CI step, `make test-slow`
PYTEST_ARGS ?= -n auto --durations=15 -m "not slow"
SLOW_ARGS ?= -n auto --durations=15 -m slow

# pip runs again only when pyproject.toml changes (the install is editable: code changes need
# no reinstall); the stamps live inside .venv, so deleting .venv starts over cleanly
DEPS_HASH := $(shell (sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml) | cut -c1-16)
RUN_STAMP := $(VENV)/.maxclaw-run-$(DEPS_HASH)
TEST_STAMP := $(VENV)/.maxclaw-test-$(DEPS_HASH)

.PHONY: run test test-slow chromium

run: $(RUN_STAMP)
	$(BIN)/maxclaw serve $(ARGS)

test: $(TEST_STAMP) chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-slow: $(TEST_STAMP) chromium
	$(BIN)/python -m pytest $(SLOW_ARGS)

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
