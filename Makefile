# Set-up and the README's commands. `make run` and `make test` each create the virtual
# environment first when it is missing or older than pyproject.toml (with the dev and litgpt
# extras, so the litgpt tests run). The editable install puts the checkout on sys.path (compat
# mode) instead of an import hook, so a folder named `ablate` in the working directory (a
# clone, seen from its parent) cannot shadow the package.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the tests run in one process per core (pytest-xdist), each test file in one of them, so a
# file's module fixtures are built once; PARALLEL= runs them in this process
PARALLEL ?= -n auto --dist loadfile
# the tests cache compiled modules (__pycache__, ignored by git) even where the environment
# says PYTHONDONTWRITEBYTECODE: else each of the dozens of processes they start compiled the
# package again, and each test process rewrote every test module's assertions again
# the tests' temporary folders (results, studies, servers' data) go to memory where the machine
# has /dev/shm: every stored file is fsync'd, and on a virtual disk that halved the simulated
# runs' speed. Nothing they check depends on the disk; TEST_TMPDIR= keeps the default
TEST_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
# numpy's and scipy's OpenBLAS in one thread per test process (torch has its own, MKL): with
# a process per core its threads only waited on each other's, and a busy core made scipy's
# L-BFGS-B step take 7.5 ms instead of 0.45 (the reference fit's tests: 13-15 s, now 7)
PYTEST := $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) PYTHONDONTWRITEBYTECODE= \
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -q $(PARALLEL)

.PHONY: setup run test test-fast lint bench clean

setup: $(VENV)/.installed

# pip would compile the bytecode of every file it installs, on one core (torch alone has
# thousands that nothing imports): it installs without, and one process then imports every
# ablate module, the test tools and what an SQLite study loads, writing the bytecode of just
# what they load (also where the environment says PYTHONDONTWRITEBYTECODE), while the C++
# norm kernels build beside it (about 30 s of one core, once per machine; where it cannot
# build, a run says why and uses the reference RMSNorm)
WARM := import importlib, pkgutil, ablate, optuna, pytest, xdist, importlinter; \
	[importlib.import_module(m.name) for m in pkgutil.walk_packages(ablate.__path__, "ablate.")]; \
	optuna.storages.RDBStorage("sqlite://")
KERNEL := from ablate.nn.fast_norms import cpp_unavailable_reason; cpp_unavailable_reason()
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile -e '.[dev,litgpt,data]' --config-settings editable_mode=compat
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c '$(WARM)' & warm=$$!; \
	$(BIN)/python -c '$(KERNEL)' && wait $$warm
	touch $@

# the main job's report goes beside its results (both ignored by git), so that it never
# rewrites the committed example in reports/ln_vs_rms/ that the docs and tests quote
run: setup
	$(BIN)/ablate run experiments/ln_vs_rms.yaml --report-dir results/reports

test: setup
	$(BIN)/lint-imports --no-cache
	$(PYTEST)

test-fast: setup
	$(BIN)/lint-imports --no-cache
	$(PYTEST) -m "not slow and not trains"

lint: setup
	$(BIN)/ruff check ablate tests

bench: setup
	$(BIN)/ablate bench

clean:
	rm -rf $(VENV) .pytest_cache
