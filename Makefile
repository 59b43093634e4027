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

# Programs the tests, real clients and isolated agents use: "<command>:<Debian package>".
SYSTEM_TOOLS := bwrap:bubblewrap nft:nftables ip:iproute2 nsenter:util-linux sqlite3:sqlite3 \
	curl:curl swaks:swaks chromium:chromium chromedriver:chromium-driver gh:gh git:git

.PHONY: help venv system-deps trial test bench bench-quick lint schema clean agentdojo-controls services engine images

help:
	@echo "make trial   run the demo and GitHub suites with both demo agents and every control"
	@echo "make test    run the test suite, side by side (PYTEST_WORKERS=1: in one process; TEST_ARGS: handed to pytest)"
	@echo "make bench   run the benchmarks, write benchmarks/results.json"
	@echo "make bench-quick  each benchmark once at a reduced size (a regression check; results-quick.json)"
	@echo "make lint    ruff and mypy"
	@echo "make schema  re-export the JSON schemas into schemas/"
	@echo "make agentdojo-controls  run the controls of every AgentDojo pair and compare with AgentDojo (about 13 minutes)"
	@echo "make services start PostgreSQL, MariaDB, Redis, RabbitMQ where installed but down"
	@echo "make engine  start a Docker engine for containers (installs docker.io; root)"
	@echo "make images  build the server and agent images from Debian's packages; print the ORACLE_IMAGE_... settings"
	@echo "make system-deps  install the Debian programs the tests drive (bubblewrap, nftables, curl, swaks, chromium…)"

$(STAMP): pyproject.toml
	@py="$$($(FIND_PYTHON))"; \
	if [ -z "$$py" ]; then \
	  echo "error: oracle needs Python >= 3.12 and none was found (tried: $(PYTHON_CANDIDATES))." >&2; \
	  echo "       Install Python 3.12 or newer, or put it on PATH, then run make again." >&2; \
	  exit 1; fi; \
	echo "creating $(VENV) with $$py ($$($$py --version))"; \
	$$py -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/pip install --quiet -e '.[dev,inspect,agentdojo,ray,judge]'
	@touch $(STAMP)

venv: $(STAMP)

# Installs the Debian packages behind SYSTEM_TOOLS that are missing (only those; needs root).
system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  command -v "$${pair%%:*}" >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "warning: missing Debian packages:$$missing (apt-get install$$missing);" \
	         "the tests that need them will be skipped" >&2; \
	  fi; \
	fi

# Servers that do not answer are started in containers where a Docker engine runs
# (ORACLE_SERVERS=local turns that off); where neither is there, their tasks are skipped, and
# the skip message says how to get them.
# The last run's archives are moved aside and removed once this run is over: thousands of
# files removed just before it made every file it writes slower to create (a file system
# steps over recently freed inodes).
trial: $(STAMP) system-deps
	@$(BYTECODE)
	rm -rf runs/.demo-old
	if [ -e runs/demo ]; then mv runs/demo runs/.demo-old; fi
	ORACLE_SERVERS=$${ORACLE_SERVERS:-containers} $(BIN)/oracle demo tasks/demo tasks/github --out runs/demo; \
	  status=$$?; rm -rf runs/.demo-old; exit $$status

# `make test` runs the tests side by side in PYTEST_WORKERS processes (pytest-xdist; by default
# two per processor, at most 8): most tests wait on servers, subprocesses and sockets, so more
# workers than cores pays. Each worker takes the next test when it is free, except that tests
# sharing a fixture made once per module or a dear session fixture stay in one worker
# (loadgroup; tests/conftest.py). `make test PYTEST_WORKERS=1` runs them in one process;
# TEST_ARGS is passed on (`make test TEST_ARGS="tests/sinks -x"`).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); n=$$((n * 2)); echo $$((n > 8 ? 8 : n)))
TEST_ARGS ?=
PYTEST_PARALLEL = $(if $(filter 0 1,$(PYTEST_WORKERS)),-n 0,-n $(PYTEST_WORKERS) --dist loadgroup)

# Every process the tests start (the CLI, scorer zygotes, worker processes) imports oracle: its
# bytecode is compiled once here, and written where an environment asks Python not to
# (PYTHONDONTWRITEBYTECODE), or each of them would compile it again (0.3 s apiece, measured).
BYTECODE := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j 0 oracle tasks

test: $(STAMP) system-deps
	@$(BYTECODE)
	PYTHONDONTWRITEBYTECODE= RAY_USAGE_STATS_ENABLED=0 $(BIN)/pytest $(PYTEST_PARALLEL) $(TEST_ARGS)

bench: $(STAMP) system-deps
	@$(BYTECODE)
	$(BIN)/python benchmarks/run.py

bench-quick: $(STAMP) system-deps
	@$(BYTECODE)
	$(BIN)/python benchmarks/run.py --quick

lint: $(STAMP)
	$(BIN)/ruff check oracle tests benchmarks tasks
	$(BIN)/ruff format --check oracle tests benchmarks tasks
	$(BIN)/mypy

# Every (user task, injection task) pair of AgentDojo's four suites: ~950 tasks, ~2,900 control
# trials. Too long for `make test` (which runs a representative subset); rewrites
# tasks/agentdojo/task_agentdojo.controls.json.
agentdojo-controls: $(STAMP)
	$(BIN)/oracle controls tasks/agentdojo --report-only
	$(BIN)/python -m oracle.integrations.agentdojo.agreement

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

# A Docker engine for the container scorer (`--scorer container`), container agents, servers in
# containers (ORACLE_SERVERS=containers) and their tests: where none
# answers, install docker.io if dockerd is missing and start dockerd (as root), with no bridge
# network and no firewall rules (scorer containers run with --network none), then wait until it
# answers. Best effort, like `services`: a test that needs the engine says it is missing.
ENGINE_LOG := /var/log/oracle-dockerd.log
ENGINE_UP := $(BIN)/python -c 'import docker; docker.from_env(timeout=5)' >/dev/null 2>&1

engine: $(STAMP)
	@if $(ENGINE_UP); then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "warning: no Docker engine answers, and starting one needs root;" \
	       "the container scorer's tests will be skipped" >&2; exit 0; fi; \
	if ! command -v dockerd >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian package: docker.io" >&2; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; \
	  fi; \
	  if ! command -v dockerd >/dev/null 2>&1; then \
	    echo "warning: dockerd is missing and could not be installed (apt-get install docker.io);" \
	         "the container scorer's tests will be skipped" >&2; exit 0; fi; \
	fi; \
	echo "starting dockerd (log: $(ENGINE_LOG))" >&2; \
	setsid -f dockerd --bridge=none --iptables=false >$(ENGINE_LOG) 2>&1 </dev/null; \
	for i in $$(seq 60); do $(ENGINE_UP) && exit 0; sleep 1; done; \
	echo "warning: dockerd did not answer within 60 s (see $(ENGINE_LOG))" >&2

# The images of the servers (PostgreSQL, MariaDB, Redis, RabbitMQ) and of container agents,
# built from Debian's packages on a root filesystem made with debootstrap (no registry needed);
# each is built once per machine and reused until its recipe changes. Prints the settings that
# select them, one per line in shell syntax: `eval "$$(make -s images)"`. Then the container
# scorer's image of this environment (built by the first sealed run where this has not run).
images: engine
	@command -v debootstrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "installing Debian package: debootstrap" >&2; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }; } || true
	@$(BIN)/python -c 'from oracle.fixtures.containers.images import main; raise SystemExit(main())'
