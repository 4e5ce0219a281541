# The two quick-start commands: `make demo` and `make test`. Both create the virtualenv and
# install the pinned dependencies (constraints.txt) on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_AT ?= 2026-12-02T09:00:00Z
DEMO_ARGS ?=

ORCH := .venv-orchestrators
ORCH_STAMP := $(ORCH)/.installed

.PHONY: demo plan-demo test lint types unit orchestrators bench bench-spot bench-api bench-sim \
	constraints constraints-orchestrators clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The first impression: serve, submit a scripted morning, watch it run, report; keeps serving
# (dashboard) until Ctrl-C. `make demo DEMO_ARGS=--exit` stops after the report.
demo: $(STAMP)
	$(BIN)/budgeteer demo $(DEMO_ARGS)

# The planner alone on the bundled 20-job queue at a fixed time (no processes).
plan-demo: $(STAMP)
	$(BIN)/budgeteer plan --jobs src/budgeteer/examples/jobs.yaml \
		--budgets src/budgeteer/examples/budgets.yaml --at $(DEMO_AT)

test: lint types unit orchestrators

lint: $(STAMP)
	$(BIN)/ruff check src tests tests-orchestrators benchmarks examples
	$(BIN)/ruff format --check src tests tests-orchestrators benchmarks examples

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# The orchestrator integrations (Airflow, kfp, Metaflow) in their own environment, against a
# `budgeteer serve` run from the main one.
$(ORCH_STAMP): pyproject.toml constraints-orchestrators.txt
	$(PYTHON) -m venv $(ORCH)
	$(ORCH)/bin/python -m pip install --quiet --disable-pip-version-check \
		-c constraints-orchestrators.txt pip
	$(ORCH)/bin/python -m pip install --quiet --disable-pip-version-check \
		-c constraints-orchestrators.txt -e '.[airflow,kfp,metaflow]' pytest
	touch $(ORCH_STAMP)

orchestrators: $(STAMP) $(ORCH_STAMP)
	BUDGETEER_SERVE_PYTHON=$(abspath $(BIN))/python $(ORCH)/bin/python -m pytest \
		-p no:cacheprovider tests-orchestrators

bench: $(STAMP)
	$(BIN)/python benchmarks/cycle.py

bench-spot: $(STAMP)
	$(BIN)/budgeteer bench deadline-spot-suite

bench-api: $(STAMP)
	$(BIN)/python benchmarks/api_submit.py

bench-sim: $(STAMP)
	$(BIN)/python benchmarks/sim_speed.py --dense

# Re-pin after changing dependencies in pyproject.toml.
constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt
	$(BIN)/python -m pip --version | awk '{print "pip==" $$2}' >> constraints.txt

constraints-orchestrators: $(ORCH_STAMP)
	$(ORCH)/bin/python -m pip freeze --exclude-editable > constraints-orchestrators.txt
	$(ORCH)/bin/python -m pip --version | awk '{print "pip==" $$2}' >> constraints-orchestrators.txt

clean:
	rm -rf $(VENV) $(ORCH) .mypy_cache .ruff_cache .pytest_cache
