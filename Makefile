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
# The real claude-mem (its bundled worker, one file) and the Bun runtime it runs on, for the system
# tests that have claude-mem write the database memsync reads (scripts/real_claude_mem.py). The two
# versions have one owner, tests/upstream/versions.json, which the harness reads too.
UPSTREAM := .upstream
CLAUDE_MEM_VERSION := $(shell $(PYTHON) -c 'import json; print(json.load(open("tests/upstream/versions.json"))["claude-mem"])')
BUN_VERSION := $(shell $(PYTHON) -c 'import json; print(json.load(open("tests/upstream/versions.json"))["bun"])')
CLAUDE_CODE_VERSION := $(shell $(PYTHON) -c 'import json; print(json.load(open("tests/upstream/versions.json"))["claude-code"])')
CLAUDE_MEM_DIR := $(UPSTREAM)/claude-mem-$(CLAUDE_MEM_VERSION)
BUN_DIR := $(UPSTREAM)/bun-$(BUN_VERSION)
# Claude Code's CLI, for the test of `memsync claude-code swap` (its binary arrives in the platform
# package @anthropic-ai/claude-code-linux-x64, about 250 MB).
CLAUDE_CODE_DIR := $(UPSTREAM)/claude-code-$(CLAUDE_CODE_VERSION)

.PHONY: run test test-fast bench lint docs FORCE

# memsync is installed in setuptools' strict editable mode: build/__editable__.*/memsync/ is a tree
# of links to the files the package map (pyproject.toml) names, which mypy, pyright and editors
# follow like any installed package. A file is linked when it is installed, so a module added or
# removed needs a reinstall: the stamp depends on the list of the package's files, which this rule
# rewrites only when it changes or when memsync no longer imports (build/ removed); an edit to an
# existing file needs nothing.
$(VENV)/package-files: FORCE
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "memsync needs Python 3.11+ (set PYTHON=python3.11)")'
	@mkdir -p $(VENV)
	@$(PYTHON) scripts/pkgmap.py files > $@.new
	@if cmp -s $@.new $@ && $(BIN)/python -c 'import memsync' 2>/dev/null; then rm $@.new; else mv $@.new $@; fi

$(BIN)/.installed: pyproject.toml setup.py $(VENV)/package-files
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,multilingual]" --config-settings editable_mode=strict
	@touch $@

FORCE:

$(CHROMA_MCP_VENV)/.installed:
	$(PYTHON) -m venv $(CHROMA_MCP_VENV)
	$(CHROMA_MCP_VENV)/bin/pip install --quiet "chroma-mcp==0.2.6"
	$(CHROMA_MCP_VENV)/bin/pip install --quiet "mcp>=1.20,<2" 2>&1 | grep -v "chroma-mcp 0.2.6 requires mcp\|dependency resolver" || true
	$(CHROMA_MCP_VENV)/bin/chroma-mcp --help >/dev/null
	@touch $@

# npm pack fetches the published package without installing its dependencies (the worker is
# bundled); bun comes as an npm package whose binary sits in the platform package @oven/bun-*.
$(CLAUDE_MEM_DIR)/.installed: tests/upstream/versions.json
	rm -rf $(CLAUDE_MEM_DIR) && mkdir -p $(CLAUDE_MEM_DIR)
	cd $(CLAUDE_MEM_DIR) && npm pack --silent claude-mem@$(CLAUDE_MEM_VERSION) >/dev/null \
		&& tar xzf claude-mem-$(CLAUDE_MEM_VERSION).tgz && rm claude-mem-$(CLAUDE_MEM_VERSION).tgz
	test -f $(CLAUDE_MEM_DIR)/package/plugin/scripts/worker-service.cjs
	rm -rf $(BUN_DIR)
	npm install --silent --no-audit --no-fund --prefix $(BUN_DIR) bun@$(BUN_VERSION)
	$(BUN_DIR)/node_modules/.bin/bun --version
	@touch $@

$(CLAUDE_CODE_DIR)/.installed: tests/upstream/versions.json
	rm -rf $(CLAUDE_CODE_DIR)
	npm install --silent --no-audit --no-fund --prefix $(CLAUDE_CODE_DIR) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	HOME=$(CLAUDE_CODE_DIR) $(CLAUDE_CODE_DIR)/node_modules/.bin/claude --version
	@touch $@

run: $(BIN)/.installed
	$(BIN)/memsync worker

# The whole suite on pytest-xdist: TEST_WORKERS processes (more than the 2 cores pay: most system
# tests wait on subprocesses), `--dist loadgroup` with each file its own group (tests/conftest.py):
# xdist hands out whole files in the collection's order (--no-loadscope-reorder: by default it
# sorts them by their number of tests), the longest files first, and a file's tests run in their
# order on one worker. No file needs the machine to itself (each test has its own temporary
# directories and free ports; leftover-process checks match only their own paths): one report,
# one status, one list of the 20 slowest tests.
# When a worker dies (a signal in native code leaves no report), xdist reports "worker 'gwN'
# crashed while running '<test>'" among the failures, and `make test` prints that worker's trace
# (the last test it started) and the crashing thread's stack, last, where a CI log's tail shows
# them (tests/conftest.py: each worker writes $(TEST_TRACE).gwN and $(TEST_TRACE).gwN.crash). A Bus
# error in the parallel run is found there: the worker's crash file is the one that is not empty.
# Under --dist loadgroup xdist (3.8.0) gives a crashed test to each replacement worker until
# "maximum crashed workers reached" stops the run: the test is named, the tests after it do not run.
TEST_TRACE := test-artifacts/pytest-trace.txt
TEST_WORKERS ?= 3
test: $(BIN)/.installed $(CHROMA_MCP_VENV)/.installed $(CLAUDE_MEM_DIR)/.installed $(CLAUDE_CODE_DIR)/.installed
	@mkdir -p $(dir $(TEST_TRACE)) && rm -f $(TEST_TRACE)*
	@MEMSYNC_TEST_TRACE=$(TEST_TRACE) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder; status=$$?; \
	if [ $$status -ne 0 ]; then \
	  for crash in $(TEST_TRACE)*.crash; do \
	    [ -s "$$crash" ] || continue; trace=$${crash%.crash}; \
	    echo "a test process died ($$trace) in the last test it started:"; tail -n 2 "$$trace"; \
	    grep -A 12 "^Current thread\|^Fatal Python error" "$$crash"; \
	  done; \
	fi; exit $$status

# The unit tests only (no real subprocesses or servers, nothing over ~5 s, no mypy: `make lint`
# runs it) on TEST_WORKERS workers, as many as `make test` (a third worker pays on 2 cores: the
# tests wait on their files' fsyncs for a third of their time): under a minute on 2 idle cores.
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadgroup

# ruff on every Python file of the checkout (it skips what .gitignore names: .venv, build/); mypy
# strict on the installed package; pyright over the source folders, for imports that do not resolve.
lint: $(BIN)/.installed
	$(BIN)/ruff check
	$(BIN)/mypy
	$(BIN)/pyright --pythonpath $(BIN)/python $$($(BIN)/python scripts/pkgmap.py folders)

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_sync.py

# Regenerate docs/cli.md and docs/settings.md from the code (tests/test_docs.py fails when they differ).
docs: $(BIN)/.installed
	$(BIN)/python -m scripts.docs
