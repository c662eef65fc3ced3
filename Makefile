# make demo / make test work from a fresh clone: they create .venv with Python 3.12+ and install.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Python 3.12+ is required (egglog 14): try pyenv's installed versions, then PATH; the first
# candidate that really runs and is new enough wins (pyenv shims can exist without the version).
PY_CANDIDATES := $(wildcard $(PYENV_ROOT)/versions/3.1[2-9]*/bin/python3 $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3) \
	python3.13 python3.12 python3

.PHONY: demo test test-all test-thorough lint typecheck bench fuzz clean

SECONDS ?= 600

$(STAMP): pyproject.toml
	@base=""; for c in $(PY_CANDIDATES); do \
		if "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then base="$$c"; break; fi; done; \
	if [ -z "$$base" ]; then \
		echo "error: Python 3.12 or newer is needed (egglog 14); none found on PATH or in pyenv's versions folder." >&2; \
		echo "Install one (e.g. 'pyenv install 3.12') and run make again." >&2; exit 1; fi; \
	if [ ! -x $(PY) ] || ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		rm -rf $(VENV); echo "creating $(VENV) with $$base"; "$$base" -m venv $(VENV); fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/egc demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy egraph_ir rules passmgr codegen egc
	$(PY) -m pytest -q -n auto --dist loadgroup  # one worker per core (pytest-xdist)

# the default suite plus the minutes-long runs (marker `full`)
test-all: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadgroup -m "full or not full"

test-thorough: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -n auto --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy egraph_ir rules passmgr codegen egc

# every fuzzer for SECONDS; failing cases (shrunk) land in fuzz-failures/
fuzz: $(STAMP)
	$(PY) -m egc.fuzz --seconds $(SECONDS) --out fuzz-failures

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
