# oracle — `make trial` runs the demo suite; `make test` runs the tests. Both set up .venv first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The first interpreter that is Python >= 3.12 (mitmproxy 12 needs it).
PYTHON_CANDIDATES := python3.13 python3.12 python3 python
FIND_PYTHON := for p in $(PYTHON_CANDIDATES); do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
	    echo $$p; break; fi; done

.PHONY: help venv trial test bench lint schema clean system-deps

help:
	@echo "make trial   run the demo suite with both demo agents and every control"
	@echo "make test    run the test suite"
	@echo "make bench   run the benchmarks, write benchmarks/results.json"
	@echo "make lint    ruff and mypy"
	@echo "make schema  re-export the JSON schemas into schemas/"
	@echo "make system-deps  install the Debian packages the tests need (chromium)"

$(STAMP): pyproject.toml
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then \
	  echo "error: oracle needs Python >= 3.12 and none was found (tried: $(PYTHON_CANDIDATES))." >&2; \
	  echo "       Install Python 3.12 or newer, or put it on PATH, then run make again." >&2; \
	  exit 1; fi; \
	echo "creating $(VENV) with $$py ($$($$py --version))"; \
	$$py -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/pip install --quiet -e '.[dev,ray]'
	@touch $(STAMP)

venv: $(STAMP)

trial: $(STAMP)
	rm -rf runs/demo
	$(BIN)/oracle demo tasks/demo --out runs/demo

# Debian packages the tests use: chromium renders the HTML report in a headless test.
# Idempotent: apt runs only when a command is missing.
SYSTEM_COMMANDS := chromium
system-deps:
	@missing=""; for c in $(SYSTEM_COMMANDS); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing; \
	fi

test: $(STAMP) system-deps
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

lint: $(STAMP)
	$(BIN)/ruff check oracle tests benchmarks tasks
	$(BIN)/ruff format --check oracle tests benchmarks tasks
	$(BIN)/mypy

schema: $(STAMP)
	$(BIN)/oracle schema --out schemas

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
