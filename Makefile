# The two commands a new machine needs: `make run` and `make test`. Both create the virtual
# environment (.venv) and install memsync into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# claude-mem's own Chroma client (chroma-mcp 0.2.6, what claude-mem's worker spawns with uvx), for the
# test that searches memsync's upstream-readable store through it: a venv of its own, its pins not
# being memsync's. Its pinned mcp 1.6.0 no longer imports with today's pydantic, so mcp is raised
# within 1.x (pip then warns about the pin; the tools chroma-mcp registers are unchanged).
CHROMA_MCP_VENV ?= .venv-chroma-mcp

.PHONY: run test test-fast bench lint docs

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "memsync needs Python 3.11+ (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	@touch $@

$(CHROMA_MCP_VENV)/.installed:
	$(PYTHON) -m venv $(CHROMA_MCP_VENV)
	$(CHROMA_MCP_VENV)/bin/pip install --quiet "chroma-mcp==0.2.6"
	$(CHROMA_MCP_VENV)/bin/pip install --quiet "mcp>=1.20,<2" 2>&1 | grep -v "chroma-mcp 0.2.6 requires mcp\|dependency resolver" || true
	$(CHROMA_MCP_VENV)/bin/chroma-mcp --help >/dev/null
	@touch $@

run: $(BIN)/.installed
	$(BIN)/memsync worker

test: $(BIN)/.installed $(CHROMA_MCP_VENV)/.installed
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

# Regenerate docs/cli.md and docs/settings.md from the code (tests/test_docs.py fails when they differ).
docs: $(BIN)/.installed
	$(BIN)/python -m scripts.docs
