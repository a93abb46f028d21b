"""bench_sync's LangChain peer, its pure parts only: the suite never installs LangChain."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from memsync.config.settings import Settings
from scripts.peer_langchain import SOURCE_KEY, _installed_marker, derived_documents, edit_rows, ensure_env, peer_fields
from tests.conftest import make_db, mixed_records, obs

ROOT = Path(__file__).resolve().parent.parent


class TestPeerDocuments:
    def test_importing_the_peer_module_imports_no_langchain(self) -> None:
        """The bench side runs in memsync's environment, where LangChain is not installed."""
        assert not [m for m in sys.modules if m.startswith("langchain")]

    def test_the_peer_indexes_memsyncs_documents_with_the_row_as_source(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(4))
        docs = list(derived_documents(settings.db, read_batch_rows=3))
        fields = [peer_fields(d) for d in docs]
        assert [(i, t) for i, t, _ in fields] == [(d.doc_id, d.text) for d in docs]
        assert all(meta == {**d.metadata, SOURCE_KEY: meta[SOURCE_KEY]} for d, (_, _, meta) in zip(docs, fields,
                                                                                                   strict=True))
        sources = {d.doc_id: meta[SOURCE_KEY] for d, (_, _, meta) in zip(docs, fields, strict=True)}
        assert sources["obs_1_narrative"] == sources["obs_1_fact_0"] == "observation:1"
        assert sources["prompt_1"] == "prompt:1" != sources["obs_1_narrative"]

    def test_metadata_is_plain_json_without_nulls(self, settings: Settings) -> None:
        """index() hashes metadata with json.dumps, and Chroma rejects None values on add."""
        make_db(settings.db, [obs(1, files_modified=[], subtitle=None)])
        for doc in derived_documents(settings.db, read_batch_rows=10):
            _, _, meta = peer_fields(doc)
            assert json.loads(json.dumps(meta)) == meta
            assert None not in meta.values()


class TestEditRows:
    def test_edits_and_deletes_distinct_observations(self, settings: Settings) -> None:
        make_db(settings.db, [obs(i) for i in range(1, 41)])
        edited, deleted = edit_rows(settings.db, 5)
        assert len(edited) == len(deleted) == 5 and not set(edited) & set(deleted)
        texts = {d.doc_id: d.text for d in derived_documents(settings.db, read_batch_rows=10)}
        assert all(texts[f"obs_{i}_narrative"].endswith(" (edited)") for i in edited)
        assert not [k for k in texts if int(k.split("_")[1]) in deleted]


class TestEnvironment:
    def test_a_ready_venv_is_reused_without_pip(self, tmp_path: Path) -> None:
        """Made once, then reused while the pins and memsync's pyproject.toml are unchanged."""
        venv = tmp_path / "peer-venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")
        (venv / ".installed").write_text(_installed_marker(ROOT))
        assert ensure_env(venv, ROOT) == venv / "bin" / "python"
