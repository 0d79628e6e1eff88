# thread_client: every target that needs Python depends on `setup`, so a fresh clone needs nothing else.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
# A shell that sets PYTHONDONTWRITEBYTECODE makes every Python process compile the package from source again:
# the suite starts some seven hundred daemons, servers and tools (0.7 s of CPU each to import the daemon from
# source, 0.3 s from its cached bytecode). The bytecode goes to the __pycache__ folders git ignores.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements.stamp

HOST ?= 127.0.0.1
PORT ?= 9999
SERVER_ARGS ?=
CLIENT_ARGS ?=
SERVER_PID := .server.pid
SERVER_LOG := .server.log

.PHONY: help setup nginx prometheus chromium run-server stop-server run-client run test test-unit docs bench bench-cluster demo-cluster chaos campaign soak profile diagrams

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

setup: $(STAMP) nginx prometheus chromium  ## create or refresh .venv from requirements.txt; install Debian's nginx, prometheus and chromium where missing

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

# Debian's nginx is a real limit_req gateway for the tests and the bench. Where it cannot be installed (no
# apt-get, not root, no network) nothing fails: its tests skip and the bench's nginx row cannot run.
NGINX_MISSING := nginx is missing: the nginx tests skip and the bench's nginx row cannot run (install Debian's nginx package)

nginx:  ## install Debian's nginx where missing (apt-get, as root); part of setup
	@if command -v nginx >/dev/null || test -x /usr/sbin/nginx; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "$(NGINX_MISSING); apt-get as root is needed to install it here" >&2; exit 0; fi; \
	echo "installing Debian's nginx (apt-get install nginx)"; \
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >/dev/null \
		|| echo "$(NGINX_MISSING); apt-get install nginx failed" >&2

# Debian's prometheus package gives promtool (the alert rules' tests) and a real Prometheus server (the test that
# scrapes a running daemon and runs the dashboard's queries). Where it cannot be installed those tests skip.
PROMETHEUS_MISSING := prometheus is missing: the alert rule and real-Prometheus tests skip (install Debian's prometheus package)

prometheus:  ## install Debian's prometheus (promtool and the server) where missing (apt-get, as root); part of setup
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "$(PROMETHEUS_MISSING); apt-get as root is needed to install it here" >&2; exit 0; fi; \
	echo "installing Debian's prometheus (apt-get install prometheus)"; \
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) \
		>/dev/null || echo "$(PROMETHEUS_MISSING); apt-get install prometheus failed" >&2

# Debian's chromium and chromium-driver: the headless browser Selenium drives in the console page's test. Where they
# cannot be installed that test skips.
CHROMIUM_MISSING := chromium is missing: the console's browser test skips (install Debian's chromium and chromium-driver packages)

chromium:  ## install Debian's chromium and chromium-driver where missing (apt-get, as root); part of setup
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "$(CHROMIUM_MISSING); apt-get as root is needed to install it here" >&2; exit 0; fi; \
	echo "installing Debian's chromium (apt-get install chromium chromium-driver)"; \
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver) \
		>/dev/null || echo "$(CHROMIUM_MISSING); apt-get install chromium chromium-driver failed" >&2

run-server: setup  ## start the reference server in the background on $(HOST):$(PORT); refuses a port already taken
	@if [ -f $(SERVER_PID) ] && kill -0 $$(cat $(SERVER_PID)) 2>/dev/null; then \
		echo "server already running (pid $$(cat $(SERVER_PID)))"; exit 0; fi; \
	rm -f $(SERVER_PID); \
	if (exec 3<>/dev/tcp/$(HOST)/$(PORT)) 2>/dev/null; then \
		echo "port $(HOST):$(PORT) is already taken by another process: nothing started (PORT=... picks another)" >&2; \
		exit 1; fi; \
	$(PY) original_server.py --host $(HOST) --port $(PORT) $(SERVER_ARGS) > $(SERVER_LOG) 2>&1 & \
	pid=$$!; \
	for _ in $$(seq 100); do \
		kill -0 $$pid 2>/dev/null || break; \
		if grep -q "listening on" $(SERVER_LOG); then \
			echo $$pid > $(SERVER_PID); echo "server up on $(HOST):$(PORT) (pid $$pid)"; exit 0; fi; \
		sleep 0.1; \
	done; \
	echo "server did not start:" >&2; cat $(SERVER_LOG) >&2; kill $$pid 2>/dev/null; exit 1

stop-server:  ## stop the background reference server (only one this Makefile started)
	@if [ -f $(SERVER_PID) ] && kill -0 $$(cat $(SERVER_PID)) 2>/dev/null; then \
		kill $$(cat $(SERVER_PID)); \
		for _ in $$(seq 50); do kill -0 $$(cat $(SERVER_PID)) 2>/dev/null || break; sleep 0.1; done; \
		echo "server stopped"; else echo "no server running"; fi; rm -f $(SERVER_PID)

run-client: setup  ## run the client in the foreground against $(HOST):$(PORT) (Ctrl-C stops it)
	$(VENV)/bin/thread-client --url http://$(HOST):$(PORT) $(CLIENT_ARGS)

run: setup  ## start the server, run the client until Ctrl-C, stop the server (a server already running is used and left running)
	@if [ -f $(SERVER_PID) ] && kill -0 $$(cat $(SERVER_PID)) 2>/dev/null; then \
		echo "using the server already running (pid $$(cat $(SERVER_PID))); it is left running"; \
		exec $(VENV)/bin/thread-client --url http://$(HOST):$(PORT) $(CLIENT_ARGS); fi; \
	$(MAKE) --no-print-directory run-server || exit $$?; \
	trap '$(MAKE) --no-print-directory stop-server' EXIT; \
	$(VENV)/bin/thread-client --url http://$(HOST):$(PORT) $(CLIENT_ARGS)

BENCH_SECONDS ?= 60
BENCH_KEYS ?= 5
BENCH_JSON ?= bench-results.json
BENCH_CONSOLE ?=

bench: setup  ## twenty-one rows (saturate, exercise, tls, conn-per-request, exactly-once, jsonl, jsonl-exactly-once, held-keys, slow-server, far-90, far-150, latency-change, far-exponential, far-incoming, far-outgoing; fixed-window, leaky-bucket, sliding-counter, decaying-counter against the server's emulations; flask-limiter, nginx), each against a fresh server, the order model's bound beside each; table, $(BENCH_JSON), img/bench.png; BENCH_CONSOLE=1 runs each again with the console polled
	BENCH_SECONDS=$(BENCH_SECONDS) BENCH_KEYS=$(BENCH_KEYS) BENCH_JSON=$(BENCH_JSON) BENCH_CONSOLE=$(BENCH_CONSOLE) $(PY) -m tools.bench

CHAOS_SECONDS ?= 30

SEEDS ?= 20
FIRST ?= 1
SECONDS ?= 40
SEED ?=
campaign: setup  ## the fault campaign: SEEDS seeds from FIRST (or one SEED), each a setting and a fault timeline drawn from the seed, SECONDS long, judged by the exchange's ledger; fails on any broken promise
	$(PY) -m tools.campaign --seconds $(SECONDS) $(if $(SEED),--seed $(SEED),--seeds $(SEEDS) --first $(FIRST))

BENCH_CLUSTER_SECONDS ?= 60
bench-cluster: setup  ## Valkey + 3 daemons sharing 15 keys: steady accepted/s against the ceiling, time from a SIGKILL to full speed, Valkey CPU and commands per request
	BENCH_CLUSTER_SECONDS=$(BENCH_CLUSTER_SECONDS) $(PY) -m tools.bench_cluster

DEMO_SECONDS ?= 60
demo-cluster: setup  ## Valkey + 3 daemons for DEMO_SECONDS with a live table (keys, accepted/s per member); one is killed half-way
	DEMO_SECONDS=$(DEMO_SECONDS) $(PY) -m tools.demo_cluster

chaos: setup  ## fourteen hand-picked fault scenarios (faults + restart + a second client, idle timeout, 503 burst, 20 s outage, keys held by Retry-After with a CPU bound, TLS, lost answers, freezes, odd lines, a full disk, three members through an outage four ways); fails on any broken invariant
	$(PY) -m tools.chaos --seconds $(CHAOS_SECONDS)

SOAK_SECONDS ?= 600
SOAK_PIPE_LINES ?= 100000
SOAK_FILE_LINES ?= 10000000
PROFILE_SECONDS ?= 60

soak: setup  ## the exercise load for SOAK_SECONDS, SOAK_PIPE_LINES requests through a pipe, a restart of a SOAK_FILE_LINES file; RSS slope of each (< 50 KiB/min)
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_PIPE_LINES=$(SOAK_PIPE_LINES) SOAK_FILE_LINES=$(SOAK_FILE_LINES) $(PY) -m tools.soak

profile: setup  ## mprof run of the client; writes img/profile_memory.png and img/profile_cpu.png
	PROFILE_SECONDS=$(PROFILE_SECONDS) $(PY) -m tools.profile_run

diagrams:  ## render img/*.png from their PlantUML sources (needs plantuml: apt-get install plantuml)
	plantuml -tpng img/lifecycle.puml img/architecture.puml img/cluster.puml

# Most integration tests wait on a server, not on the CPU: six pytest-xdist workers fit a 2-core machine
# (measured: 173 s against 246 s with four, 785 tests).
TEST_WORKERS ?= 6

# One test at a time to each worker, the slow-marked first (tests/conftest.py): the long tests spread over the
# workers from the start instead of meeting on one at the end.
test: setup  ## the whole suite in TEST_WORKERS parallel processes: unit tests, integration tests against the reference server
	$(PY) -m pytest -n $(TEST_WORKERS) --maxschedchunk 1 $(PYTEST_ARGS)

test-unit: setup  ## only tests/unit: no server, no sleeping (under 10 s, on two processes: the proofs by hypothesis are CPU)
	$(PY) -m pytest -n 2 tests/unit $(PYTEST_ARGS)

# NO_MKDOCS_2_WARNING: mkdocs-material prints a banner about its successor on every build; the pins hold.
docs: setup  ## the documentation site from docs/ into site/ (mkdocs build --strict: a broken link or a warning fails it; offline)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
