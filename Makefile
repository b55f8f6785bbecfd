# Set-up on a fresh machine is part of every target: `make demo` and `make test` are all you need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The exact versions the suite passed with (pip constraints); `make lock` moves them to today's releases.
LOCK   := requirements/dev.lock
# The integrations whose newest releases `make test-latest` tries, and the tests that exercise them.
LATEST := transformers accelerate pytorch-lightning mlflow-skinny ray
LATEST_TESTS := grep -rlE \
	'(import|from|importorskip[(].)[ ]*(transformers|accelerate|pytorch_lightning|lightning|mlflow|ray)\b|backend.{1,4}ray' \
	tests --include='test_*.py' | grep -vE '^tests/(integrations|realworld)/' | sort

.PHONY: demo test test-fast test-corpus test-latest lock bench clean

# A new lock or pyproject rebuilds the venv from nothing, so it holds exactly what the lock says.
$(STAMP): pyproject.toml $(LOCK)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
	# The dev extra brings pytest, ray and the integrations' libraries, at the lock's versions; torch is named
	# again so that no package's requirement can swap the CPU build for another.
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[dev]' "torch==2.13.0"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/firstdiv demo

# The suite runs on every core (pytest-xdist; the CI machine has two): each test file on one worker, so that a
# module's shared fixtures are built once, in the order collected, and the public gate's per-program tests one
# by one at the end (tests/conftest.py); PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q $(XDIST)

# The whole public corpus (tests/realworld/public: every port at three seeds, every bug variant), where `make test`
# runs a fixed sample of it (tests/realworld/_scope.py): hours on two cores. Run it before resolving an issue that
# changes an instrument's verdicts.
test-corpus: $(STAMP)
	FIRSTDIV_CORPUS=full $(PY) -m pytest -q $(XDIST) tests/realworld

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not quality"

# Today's releases of the integrations over the lock, in a venv of their own (.venv stays on the lock): run it
# before moving the lock, and fix what it finds in firstdiv rather than pinning around it.
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet "torch==2.13.0"
	.venv-latest/bin/python -m pip install --quiet -c $(LOCK) -e '.[dev]' "torch==2.13.0"
	# only-if-needed: what the new releases do not require stays at the lock's version
	.venv-latest/bin/python -m pip install --quiet --upgrade --upgrade-strategy only-if-needed $(LATEST) "torch==2.13.0"
	.venv-latest/bin/python -m pip list 2>/dev/null | grep -E '^(torch|$(shell echo $(LATEST) | tr ' ' '|')) '
	.venv-latest/bin/python -c "import torch, sys; sys.exit(0 if torch.__version__ == '2.13.0+cpu' else 'torch moved to ' + torch.__version__)"
	.venv-latest/bin/python -m pytest -q tests/integrations tests/realworld $$($(LATEST_TESTS))

# A new lock from today's releases, in a venv of its own. Then `make test` (it rebuilds .venv from the new
# lock) and commit the lock only with a green suite.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet "torch==2.13.0"
	.venv-lock/bin/python -m pip install --quiet -e '.[dev]' "torch==2.13.0"
	{ sed -n '/^# generated/q;p' $(LOCK); \
	  echo "# generated $$(date -u +%Y-%m-%d) by pip freeze --exclude-editable"; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf .venv-lock
	@echo "$(LOCK) written; now run make test, and commit the lock only if it passes"

bench: $(STAMP)
	$(PY) benchmarks/record_overhead.py
	$(PY) benchmarks/vectorized_speed.py
	$(PY) benchmarks/parallel_efficiency.py
	$(PY) benchmarks/fault_catalog.py
	$(PY) benchmarks/realworld_rates.py
	$(PY) benchmarks/timing_stability.py
	$(PY) benchmarks/watch_overhead.py
	$(PY) benchmarks/trace_overhead.py
	$(PY) benchmarks/site_index.py
	$(PY) benchmarks/store_scale.py
	$(PY) benchmarks/scrub_speed.py
	$(PY) benchmarks/csv_formula_check.py

clean:
	rm -rf $(VENV) .venv-latest .venv-lock .firstdiv .pytest_cache
