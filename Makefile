# airflow-cdc-provider: everything installs itself on a fresh Debian 12 machine (run as root for apt).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
APT_PACKAGES := mariadb-server mariadb-client default-jre-headless libmariadb-java libpostgresql-jdbc-java postgresql sysbench curl
# Re-install the Python environment only when its inputs change.
DEPS_STAMP := $(VENV)/.deps-$(shell cat setup.cfg requirements/constraints.txt | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: help system-deps deps test test-fast test-component demo bench soak clean

help:
	@echo "make demo   - run the example pipeline end to end on the embedded defaults (SINK=delta: into Delta Lake)"
	@echo "make test   - install what is missing, then run the whole test suite"
	@echo "make test-fast - the unit tier only: no services, under a minute"
	@echo "make test-component - the unit and component tiers: private MariaDB and PostgreSQL, in-process Spark"
	@echo "make soak   - the load and fault scenarios at soak sizes (1M-row sysbench load, ...); prints a table"
	@echo "make bench  - performance scenarios vs the baselines, measured in the same run (BENCH_ARGS=--help)"

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo ">> installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to install:$$missing (sudo apt-get install$$missing)"; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(DEPS_STAMP): setup.cfg requirements/constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo ">> installing Python dependencies into $(VENV) (first time: a few minutes, pyspark is large)"
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[test]'
	@rm -f $(VENV)/.deps-*; touch $@

deps: system-deps $(DEPS_STAMP)

# Two worker processes (pytest-xdist), each test file whole in one of them (its module fixtures: one Spark
# cluster, one Connect server): run one after the other, the tests keep one of 2 cores busy on average, waiting
# on JVM starts, Airflow's loops and streams. TEST_WORKERS=0 runs them in this process, one after the other.
TEST_WORKERS ?= 2

XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: deps
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-fast: deps
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# the unit and component tiers: the private MariaDB, PostgreSQL and moto S3 server, in-process Spark; no DAG run
test-component: deps
	$(PY) -m pytest $(XDIST) tests/unit tests/component $(PYTEST_ARGS)

SINK ?= parquet

demo: deps
	$(PY) -m airflow_cdc_provider.demo --sink $(SINK) $(DEMO_ARGS)

SOAK_TESTS := tests/e2e/test_load.py tests/e2e/test_faults.py tests/e2e/test_spark_jobs.py

soak: deps
	AIRFLOW_CDC_SOAK=1 AIRFLOW_CDC_SCENARIO_REPORT=soak-report.txt $(PY) -m pytest $(SOAK_TESTS) -p no:cacheprovider $(PYTEST_ARGS)
	@cat soak-report.txt

bench: deps
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
