"""With the real claude-mem worker running (and no plugin installed), ``memsync status`` names its
version from ``/api/health``; the pinned release writes exactly the newest schema memsync is tested
with, so ``TESTED_SCHEMA_VERSION`` moves with tests/upstream/versions.json."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.claude_mem.version import TESTED_RELEASE, TESTED_SCHEMA_VERSION
from memsync.main import main
from scripts.real_claude_mem import ClaudeMemWorker

VERSIONS = json.loads((Path(__file__).parents[1] / "upstream" / "versions.json").read_text())


@pytest.mark.slow  # a real claude-mem worker
def test_status_names_the_running_worker_s_version(claude_mem: ClaudeMemWorker, tmp_path: Path) -> None:
    assert VERSIONS["claude-mem"] == TESTED_RELEASE
    with sqlite3.connect(f"file:{claude_mem.db}?mode=ro", uri=True) as con:
        assert con.execute("SELECT max(version) FROM schema_versions").fetchone() == (TESTED_SCHEMA_VERSION,)
    con.close()
    env = {"MEMSYNC_DB": str(claude_mem.db), "MEMSYNC_DATA_DIR": str(tmp_path / "data"),
           "MEMSYNC_CHROMA_MODE": "embedded", "CLAUDE_MEM_WORKER_PORT": str(claude_mem.port)}
    out = CliRunner().invoke(main, ["status", "--json"], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)
    assert got["claude_mem"] == {"version": TESTED_RELEASE, "tested_schema_version": TESTED_SCHEMA_VERSION,
                                 "source": f"the worker on 127.0.0.1:{claude_mem.port} (/api/health)"}
    assert got["schema_version"] == TESTED_SCHEMA_VERSION and got["schema_warning"] is None
