# The commands a newcomer needs:
#   make run    - set up .venv and run the default simulation (bundled trace, bundled cluster)
#   make test   - set up .venv with the runtime extras and the system packages the tests need
#                 (.ci/install-system-deps.sh: Chromium; .ci/install-slurm.sh: Slurm), then run the whole test suite
#   make test-fast - the unit and contract tests without Ray, the service or a browser (core install)
#   make lint   - ruff and mypy (what CI runs before the tests)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Exact pins for this dev/CI environment (torch: the CPU build); pyproject.toml only has ranges.
CONSTRAINTS := .ci/constraints.txt

.PHONY: run test test-fast system-deps bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.core: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]' -c $(CONSTRAINTS)
	touch $@

$(VENV)/.full: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/pip install -q -e '.[runtime,service,browser-test,dev]' -c $(CONSTRAINTS)
	touch $(VENV)/.core $@

run: $(VENV)/.core
	$(BIN)/hadar simulate

# Debian packages the tests drive (the dashboard test's Chromium; Slurm's daemons and commands for
# tests/slurm and the executor contract's Slurm case); skipped when already installed.
system-deps:
	.ci/install-system-deps.sh
	.ci/install-slurm.sh

# The 25 slowest tests are listed at the end, so that a test that grows slow shows up in every run.
# TEST_WORKERS pytest-xdist workers run the tests side by side (most runtime, service and Slurm tests
# wait on processes and rounds, not on the cores); a module's tests run in one worker, each worker that runs
# Slurm tests on a local cluster of its own, and the longest modules start first (tests/conftest.py).
# TEST_WORKERS=0 runs them one after another in one process. A few tests that failed beside the others run
# once more alone (.ci/rerun-failed.sh: they time real processes, which three workers on two cores can starve);
# the run fails if one fails again, or if more than four failed.
TEST_WORKERS ?= 3
test: $(VENV)/.full system-deps
	$(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) || .ci/rerun-failed.sh $(BIN)/python

# What runs without the runtime extra: tests marked `runtime` (Ray, torch) are deselected, and the
# integration, runtime and service folders are left out (`make test` runs them).
test-fast: $(VENV)/.core
	$(BIN)/python -m pytest -q -m 'not runtime and not slurm' -n 2 tests/unit tests/contract

bench: $(VENV)/.full
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# ruff (rules in pyproject.toml) over the package, tests and benchmarks; mypy over src/hadar (strict on
# the model, mechanism, engine and policies; the default level elsewhere, the runtime included).
lint: $(VENV)/.core
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache
