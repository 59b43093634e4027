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

.PHONY: help venv trial test bench lint schema clean services

help:
	@echo "make trial   run the demo suite with both demo agents and every control"
	@echo "make test    run the test suite"
	@echo "make bench   run the benchmarks, write benchmarks/results.json"
	@echo "make lint    ruff and mypy"
	@echo "make schema  re-export the JSON schemas into schemas/"
	@echo "make services start PostgreSQL, MariaDB, Redis, RabbitMQ where installed but down"

$(STAMP): pyproject.toml
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then \
	  echo "error: oracle needs Python >= 3.12 and none was found (tried: $(PYTHON_CANDIDATES))." >&2; \
	  echo "       Install Python 3.12 or newer, or put it on PATH, then run make again." >&2; \
	  exit 1; fi; \
	echo "creating $(VENV) with $$py ($$($$py --version))"; \
	$$py -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

trial: $(STAMP)
	rm -rf runs/demo
	$(BIN)/oracle demo tasks/demo --out runs/demo

test: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

lint: $(STAMP)
	$(BIN)/ruff check oracle tests benchmarks tasks
	$(BIN)/ruff format --check oracle tests benchmarks tasks
	$(BIN)/mypy

schema: $(STAMP)
	$(BIN)/oracle schema --out schemas

# Start the local servers the integration tests use, when installed but not listening.
# Each is best effort: a test that needs a server still says which one is missing.
services:
	@up() { (exec 3<>/dev/tcp/127.0.0.1/$$1) 2>/dev/null; }; \
	up 5432 || { command -v pg_ctlcluster >/dev/null && pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | head -1) main start || true; }; \
	up 3306 || { command -v mariadbd >/dev/null && start-stop-daemon --start --oknodo --background --exec $$(command -v mariadbd) || true; }; \
	up 6379 || { command -v redis-server >/dev/null && redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true; }; \
	up 5672 || { command -v rabbitmq-server >/dev/null && rabbitmq-server -detached || true; }; \
	for i in $$(seq 30); do up 5432 && up 3306 && up 6379 && up 5672 && break; sleep 1; done; \
	true

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
