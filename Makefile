# The two commands a new machine needs: `make run` and `make test`. Both create the virtual
# environment (.venv) and install memsync into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast bench lint

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "memsync needs Python 3.11+ (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	@touch $@

run: $(BIN)/.installed
	$(BIN)/memsync worker

test: $(BIN)/.installed
	$(BIN)/python -m pytest

# The unit tests only (no real subprocesses or servers): about a minute.
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -m "not slow"

lint: $(BIN)/.installed
	$(BIN)/ruff check cli config worker search servers scripts tests
	$(BIN)/python -m scripts.lint_tree
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_sync.py
