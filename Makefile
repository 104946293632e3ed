# The two commands of the README: `make demo` (the main job, end to end, on the
# embedded SQLite default) and `make test` (the whole suite, as CI runs it).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench

setup: $(VENV)/.installed

# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build.
# TORCH_INDEX: PyTorch's wheel index for the build this machine needs (CPU or a CUDA version).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/demo.sh

test: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/test.sh

bench: setup
	$(PY) benchmarks/ingest.py
