"""The fallback reason when the vector store is empty names the actual cause (issue: store repair)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from memsync.search.vectorstore import empty_store_reason


def write_status(data_dir: Path, **fields: object) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    status = {"pid": os.getpid(), "heartbeat_ms": int(time.time() * 1000), **fields}
    (data_dir / "worker.json").write_text(json.dumps(status))


def test_nothing_synced_yet(tmp_path: Path) -> None:
    assert empty_store_reason(tmp_path) == "the vector store is empty (nothing synced yet)"
    write_status(tmp_path, records_documents=0)
    assert empty_store_reason(tmp_path) == "the vector store is empty (nothing synced yet)"


def test_a_store_that_lost_its_documents_while_the_worker_runs(tmp_path: Path) -> None:
    write_status(tmp_path, records_documents=5710)
    assert empty_store_reason(tmp_path) == "the vector store holds 0 of 5,710 documents; the worker is repairing it"


def test_a_store_that_lost_its_documents_with_no_worker(tmp_path: Path) -> None:
    write_status(tmp_path, records_documents=5710, stopping=True)
    reason = empty_store_reason(tmp_path)
    assert reason.startswith("the vector store holds 0 of 5,710 documents; ")
    assert "memsync resync" in reason and "repairing" not in reason
