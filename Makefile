# Set-up on a fresh machine is part of every target: `make demo` and `make test` are all you need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
	# The dev extra brings pytest, ray and the integrations' libraries; torch is named again so that no
	# package's requirement can swap the CPU build for another.
	$(PY) -m pip install --quiet -e '.[dev]' "torch==2.13.0"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/firstdiv demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not quality"

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

clean:
	rm -rf $(VENV) .firstdiv .pytest_cache
