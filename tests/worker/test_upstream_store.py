"""The upstream-readable store (``upstream_store``): claude-mem's own Chroma format, kept exact.

Compared with an independent port of upstream's document builder (``tests/worker/upstream_reference``)
on a database with every row shape, first as derived, then as a plain ``chromadb`` client reads it
from a real ``chroma run``, after adds, edits, deletes and an excluded project.

The real claude-mem 13.25.3 writes its own store from a database it wrote, and memsync's is compared
with it, in ``tests/system/test_claude_mem_store.py``. The reference port stays here for what that
worker cannot be made to produce: merged projects (``merged_into_project`` is set only by its
worktree adoption in a git repository), an observation whose session row is missing (its import
refuses it: FOREIGN KEY) or a session whose ``platform_source`` is not normalised (its import
normalises it; a prompt of such a session is where memsync's normalising differs from its
backfill), the older schema (``Era.LEGACY``), and the store after edits and exclusions (its import
never edits a row). The odd TEXT values of ``test_odd_values_derive_as_upstream_builds_them`` are
importable, and the system test imports most of them; they stay here as a fast check.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS, Era, Kind
from memsync.config.settings import UPSTREAM_DEFAULT_PORT, Settings
from memsync.embedding import upstream_embedder
from memsync.main import main
from memsync.worker.loop.daemon import Worker
from memsync.worker.pipeline import upstream
from memsync.worker.pipeline.resync import resync, upstream_resync
from memsync.worker.pipeline.syncpass import Scope
from memsync.worker.pipeline.upstream import build_upstream_documents
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.embedstore import EmbeddingStore
from tests.conftest import free_port, held_server, make_db, obs, write
from tests.worker.upstream_reference import reference_documents
from tests.worker.upstream_shapes import LONG, shapes_db

Docs = dict[str, tuple[str, dict[str, Any]]]
def derived(settings: Settings) -> Docs:
    """What memsync derives in upstream's format, as (stored text, metadata) by id."""
    out: Docs = {}
    with SourceReader.open(settings) as reader:
        for kind in KINDS:
            for batch in reader.iter_rows(kind, 100):
                for row in batch:
                    for d in build_upstream_documents(row):
                        out[d.doc_id] = (d.text if d.stored is None else d.stored, dict(d.metadata))
    return out


def held(collection: Any) -> Docs:
    """What a plain chromadb client reads from the collection."""
    got = collection.get(include=["documents", "metadatas"])
    return {i: (t, dict(m)) for i, t, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)}


def test_every_row_shape_derives_as_upstream_builds_it(tmp_path: Path) -> None:
    settings = Settings(db=shapes_db(tmp_path / "claude-mem.db"), data_dir=tmp_path / "data", upstream_store=True)
    expected = reference_documents(settings.db)
    assert derived(settings) == expected
    # The shapes are really there: defaults, joins, an empty fact, a stored text longer than the cut.
    assert "obs_2_narrative" not in expected and not any(k.startswith("summary_3_") for k in expected)
    assert expected["obs_2_title"] == ("Only a title", {**expected["obs_2_title"][1], "field_type": "title"})
    padded, meta = expected["obs_3_narrative"]
    assert padded == "  padded narrative  " and meta["type"] == "discovery" and meta["title"] == "Untitled"
    assert expected["obs_4_fact_0"][0] == "a real fact" and "obs_4_fact_1" not in expected  # '' dropped
    assert expected["obs_4_text"][1]["platform_source"] == "codex"
    assert expected["obs_1_narrative"][1]["files_read"] == "src/a.py,src/b.py"
    assert expected["obs_5_narrative"][1]["merged_into_project"] == "alpha"
    assert expected["summary_2_learned"][1]["prompt_number"] == 0
    assert expected["obs_6_narrative"][0] == LONG
    assert "prompt_3" not in expected and expected["prompt_5"][0] == ""
    assert "memory_session_id" not in expected["prompt_4"][1] and expected["prompt_4"][1]["platform_source"] == "cursor"


@pytest.mark.parametrize(("column", "value"), [
    ("concepts", "5"), ("concepts", "{}"), ("concepts", '""'), ("concepts", "true"),
    ("concepts", '[1, 2.5, 1e21, 1e-7, true, null, ["x", ["y"]], {"k": 1}]'),
    ("files_read", "null"), ("files_read", "5"), ("files_read", '{"a": 1}'), ("files_read", "[null]"),
    ("files_read", '"x.py"'), ("files_modified", "plain/path.py"), ("facts", '["", " spaced "]'),
    ("narrative", "   "), ("title", ""), ("type", ""), ("subtitle", " "),
    ("facts", "not [json"), ("facts", '"one string"'), ("facts", "null"), ("facts", '[1, null, {"k": "v"}, "x"]'),
    ("facts", "   "), ("facts", '"  "'), ("facts", "[NaN]"), ("concepts", "not [json"), ("concepts", '"abc"'),
    ("concepts", "null"), ("concepts", " "), ("files_read", "[NaN]"),
])
def test_odd_values_derive_as_upstream_builds_them(tmp_path: Path, column: str, value: str) -> None:
    """Values upstream stores without throwing, JavaScript quirks included."""
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    write(db, f"UPDATE observations SET {column} = ? WHERE id = 1", value)
    assert derived(Settings(db=db, data_dir=tmp_path / "data")) == reference_documents(db)


@pytest.mark.parametrize(("column", "value", "expected"), [
    ("facts", "not [json", {"obs_1_fact_0": "not [json"}),
    ("facts", '"one string"', {"obs_1_fact_0": "one string"}),
    ("facts", "null", {"obs_1_fact_0": "null"}),
    ("facts", '{"k": 1}', {"obs_1_fact_0": '{"k": 1}'}),
    ("facts", '[1, null, "", " ", {"k": "v"}, "kept"]', {"obs_1_fact_0": "kept"}),
    ("facts", "  ", {}),
    ("concepts", "not [json", {"concepts": "not [json"}),
    ("concepts", '"abc"', {"concepts": "abc"}),
    ("concepts", '[1, "x", "", "y"]', {"concepts": "x,y"}),
    ("concepts", "5", {"concepts": "5"}),
])
def test_facts_and_concepts_parse_as_claude_mem_13_25_3_does(tmp_path: Path, column: str, value: str,
                                                          expected: dict[str, str]) -> None:
    """13.25.3 keeps a value that is not a JSON array as one item (v13.15.3 threw and lost the row),
    and keeps only the non-blank strings of an array (a fact's index counts those)."""
    db = make_db(tmp_path / "claude-mem.db", [obs(1, facts=[])])
    write(db, f"UPDATE observations SET {column} = ? WHERE id = 1", value)
    docs = derived(Settings(db=db, data_dir=tmp_path / "data"))
    assert docs == reference_documents(db)
    if column == "facts":
        assert {k: v[0] for k, v in docs.items() if "_fact_" in k} == expected
    else:
        assert docs["obs_1_narrative"][1]["concepts"] == expected["concepts"]


@pytest.mark.parametrize(("title", "subtitle", "text"), [
    ("  Deploy key  ", " rotated ", "Deploy key\nrotated"), ("Untitled", None, None), (" Untitled ", "sub", "sub"),
    (None, None, None), ("", "   ", None), ("\ufeffBOM\u3000", "\x1c kept", "BOM\n\x1c kept"),
])
def test_an_observation_without_body_gets_main_s_title_document(tmp_path: Path, title: str | None,
                                                                 subtitle: str | None, text: str | None) -> None:
    """Upstream main (after 13.25.3) indexes a title-only observation as ``obs_{id}_title``: its
    trimmed title and subtitle (JavaScript's trim, 'Untitled' as none); 13.25.3 wrote nothing."""
    db = make_db(tmp_path / "claude-mem.db", [obs(1, narrative="", facts=[]), obs(2)])
    write(db, "UPDATE observations SET title = ?, subtitle = ? WHERE id = 1", title, subtitle)
    docs = derived(Settings(db=db, data_dir=tmp_path / "data"))
    assert docs == reference_documents(db)
    assert [k for k in docs if k.startswith("obs_1_")] == ([] if text is None else ["obs_1_title"])
    if text is not None:
        assert docs["obs_1_title"][0] == text and docs["obs_1_title"][1]["field_type"] == "title"
        assert docs["obs_1_title"][1]["title"] == (title or "Untitled")  # the metadata keeps the row's title
    assert not any(k.endswith("_title") for k in docs if k.startswith("obs_2_"))  # a body: no title document


def test_nul_is_replaced_as_main_replaces_it_since_chroma_search_stops_at_it(tmp_path: Path, chroma: Any) -> None:
    db = make_db(tmp_path / "claude-mem.db", [obs(1, narrative="before\0after", facts=["f\0act"])])
    docs = derived(Settings(db=db, data_dir=tmp_path / "data"))
    assert docs == reference_documents(db)
    assert docs["obs_1_narrative"][0] == "before\ufffdafter" and docs["obs_1_fact_0"][0] == "f\ufffdact"
    # Why: Chroma keeps a NUL in the text, but its document search does not see past it.
    col = chroma.create_collection("nul-probe", embedding_function=None)
    col.add(ids=["nul", "replaced"], documents=["before\0after", "before\ufffdafter"],
            embeddings=[[1.0, 0.0], [0.0, 1.0]])
    assert col.get(ids=["nul"], include=["documents"])["documents"] == ["before\0after"]
    assert col.get(where_document={"$contains": "after"}, include=[])["ids"] == ["replaced"]


def test_the_store_needs_a_server_claude_mem_can_reach(tmp_path: Path) -> None:
    base: dict[str, Any] = {"db": tmp_path / "claude-mem.db", "data_dir": tmp_path / "data"}
    with pytest.raises(ValidationError, match="chroma_mode=managed"):
        Settings(**base, chroma_mode="embedded", upstream_store=True)
    with pytest.raises(ValidationError, match="one of memsync's own collections"):
        Settings(**base, upstream_store=True, collection="shared", upstream_collection="shared-g2")
    assert Settings(**base, upstream_store=True).server_port == UPSTREAM_DEFAULT_PORT == 8000
    assert Settings(**base, upstream_store=True, chroma_port=9123).server_port == 9123
    assert Settings(**base).server_port == 0  # off: a free port, as before


@pytest.fixture
def server_settings(tmp_path: Path) -> Iterator[Settings]:
    """Managed mode with the store on, and its `chroma run` held by the test (so that it outlives
    each resync, as it outlives the worker for claude-mem); killed at the end."""
    with held_server(Settings(db=shapes_db(tmp_path / "claude-mem.db"), data_dir=tmp_path / "data",
                              chroma_mode="managed", chroma_port=free_port(), upstream_store=True, read_batch_rows=3,
                              batch_size=4)) as s:
        yield s


def _client(settings: Settings) -> Any:
    """A plain chromadb client of the test's server, as claude-mem's chroma-mcp makes one."""
    return chromadb.HttpClient(host=settings.chroma_host, port=settings.chroma_port)


def _upstream(settings: Settings) -> Any:
    """The collection as claude-mem's chroma-mcp opens it: no embedding function given."""
    return _client(settings).get_collection(settings.upstream_collection)


@pytest.mark.slow  # a real `chroma run`
def test_claude_mem_reads_the_store_exactly_through_a_plain_client(server_settings: Settings) -> None:
    s = server_settings
    result = resync(s)
    col = _upstream(s)
    expected = reference_documents(s.db)
    assert held(col) == expected
    assert result.upstream is not None and result.upstream.added == len(expected)  # resync reports both
    dry = resync(s, scope=Scope(dry_run=True)).upstream
    assert dry is not None and dry.dry_run and (dry.added, dry.written, dry.unchanged) == (0, 0, len(expected))
    # `memsync status` says what claude-mem must be told to read it.
    env = {"MEMSYNC_DB": str(s.db), "MEMSYNC_DATA_DIR": str(s.data_dir), "MEMSYNC_CHROMA_PORT": str(s.chroma_port),
           "MEMSYNC_UPSTREAM_STORE": "true"}
    out = CliRunner().invoke(main, ["status"], env=env)
    assert out.exit_code == 0, out.output
    assert (f"upstream store: cm__claude-mem, {len(expected)} documents; claude-mem reads it with "
            f"CLAUDE_MEM_CHROMA_MODE=remote CLAUDE_MEM_CHROMA_HOST=127.0.0.1 CLAUDE_MEM_CHROMA_PORT={s.chroma_port}"
            ) in out.output.splitlines()

    # Made as chroma-mcp's chroma_create_collection makes it: its queries embed with Chroma's default function.
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.utils.embedding_functions import DefaultEmbeddingFunction

    client = _client(s)
    probe = client.create_collection("cm__probe", configuration=CreateCollectionConfiguration(
        embedding_function=DefaultEmbeddingFunction()))
    assert col.configuration_json == probe.configuration_json
    assert col.configuration_json["embedding_function"]["name"] == "default"

    # Queried as claude-mem's SearchManager does (doc_type and project OR merged project), with the
    # vectors of the same model (Chroma's default function would download it).
    vector = upstream_embedder(s).embed(["which files had stale rows in the cache?"])
    where = {"$and": [{"doc_type": "observation"},
                      {"$or": [{"project": "alpha"}, {"merged_into_project": "alpha"}]}]}
    got = col.query(query_embeddings=vector.tolist(), n_results=5, where=where,
                    include=["documents", "metadatas", "distances"])
    assert got["ids"][0][0].startswith("obs_1_")
    assert {m["project"] for m in got["metadatas"][0]} <= {"alpha", "beta"}  # beta: merged into alpha
    assert "obs_5_narrative" in col.get(where=where)["ids"]


@pytest.mark.slow  # a real `chroma run`
def test_adds_edits_deletes_and_exclusions_reach_the_store(server_settings: Settings) -> None:
    s = server_settings
    resync(s)
    write(s.db, "UPDATE observations SET narrative = 'The cache is fixed now.', facts = '[\"one fact\"]' WHERE id = 1")
    write(s.db, "DELETE FROM observations WHERE id = 5")
    write(s.db, "INSERT INTO observations (memory_session_id, project, type, title, narrative, created_at, "
          "created_at_epoch) VALUES ('m1', 'alpha', 'feature', 'New', 'A new row.', 'x', 1793000400000)")
    write(s.db, "UPDATE user_prompts SET session_db_id = 1 WHERE id = 3")  # the prompt now has a session
    assert "obs_2_title" in held(_upstream(s))
    write(s.db, "UPDATE observations SET narrative = ? WHERE id = 2", "Now with a body\0.")  # its title document goes
    excluded = s.model_copy(update={"excluded_projects": "gam*"})
    Worker(excluded).once()  # the worker's pass this time (resync's is the same pass)
    expected = {k: v for k, v in reference_documents(s.db).items() if v[1].get("project") != "gamma"}
    got = held(_upstream(s))
    assert got == expected
    assert "obs_1_fact_1" not in got and "obs_5_narrative" not in got and "obs_8_narrative" in got
    assert "prompt_3" in got and not any(m.get("project") == "gamma" for _, m in got.values())
    assert got["obs_1_narrative"][0] == "The cache is fixed now."
    assert "obs_2_title" not in got and got["obs_2_narrative"][0] == "Now with a body\ufffd."

    Worker(s).once()  # the setting loses the project again: its rows come back
    assert held(_upstream(s)) == reference_documents(s.db)


@pytest.mark.slow  # a real `chroma run`
def test_a_store_claude_mem_wrote_is_adopted_and_a_lost_one_refilled(server_settings: Settings) -> None:
    s = server_settings
    expected = reference_documents(s.db)
    # claude-mem wrote the collection itself (the same documents): memsync adopts them, writes nothing.
    client = _client(s)
    col = stores.open_upstream(client, s.upstream_collection)
    ids = sorted(expected)
    col.add(ids=ids, documents=[expected[i][0] for i in ids], metadatas=[expected[i][1] for i in ids],
            embeddings=upstream_embedder(s).embed([expected[i][0] for i in ids]))
    with SourceReader.open(s) as reader, SyncState(s.state_path) as state, stores.connect(s) as handle:
        store = EmbeddingStore.open(s)
        try:
            first = upstream_resync(s, handle.client, reader, state, store)
            assert (first.added, first.updated, first.deleted, first.unchanged) == (0, 0, 0, len(expected))
            # The collection deleted behind memsync's back: the next pass writes it all again.
            handle.client.delete_collection(s.upstream_collection)
            again = upstream_resync(s, handle.client, reader, state, store)
            assert again.added == len(expected)
        finally:
            store.close()
    assert held(_upstream(s)) == expected


def test_the_older_schema_syncs_into_the_store(tmp_path: Path) -> None:
    """A 5.x database (no platform_source, no merged_into_project, prompts joined by content session)."""
    db = make_db(tmp_path / "claude-mem.db", [obs(1), obs(2, project="beta")], era=Era.LEGACY)
    docs = derived(Settings(db=db, data_dir=tmp_path / "data"))
    assert docs["obs_1_narrative"][1]["platform_source"] == "claude"
    assert "merged_into_project" not in docs["obs_1_narrative"][1]
    assert docs["obs_2_fact_1"][1]["project"] == "beta"


@pytest.mark.slow  # a real `chroma run`
def test_a_new_format_version_derives_every_row_again_and_rewrites_nothing_equal(
        server_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    s = server_settings
    resync(s)
    documents = len(reference_documents(s.db))
    monkeypatch.setattr(upstream, "UPSTREAM_FORMAT_VERSION", upstream.UPSTREAM_FORMAT_VERSION + 1)
    with SourceReader.open(s) as reader, SyncState(s.state_path) as state, stores.connect(s) as handle:
        assert upstream.bind_format(state, s.upstream_collection)
        assert state.watermarks(s.upstream_collection) == {}  # every row record forgotten
        assert state.live_docs(s.upstream_collection) == documents  # the document records kept
        result = upstream_resync(s, handle.client, reader, state)
        assert (result.added, result.updated, result.deleted, result.unchanged) == (0, 0, 0, documents)
        assert not upstream.bind_format(state, s.upstream_collection)  # bound once


@pytest.mark.slow  # a real `chroma run`
def test_a_store_left_behind_is_brought_level_by_the_next_step(server_settings: Settings) -> None:
    """Its pass failed after memsync's own had gone through (a Chroma restart between the two): no
    new row arrives, yet the worker's next step notices the lower watermark and passes again."""
    s = server_settings
    Worker(s).once()
    with SyncState(s.state_path) as state:
        own = state.get_meta("active_collection")
        assert own is not None
        level = state.watermarks(own)
        assert state.watermarks(s.upstream_collection) == level
        state.forget_rows(s.upstream_collection, Kind.OBSERVATION, [level[Kind.OBSERVATION]])
        assert state.watermarks(s.upstream_collection) != level
    worker = Worker(s)
    worker._start()
    try:
        worker.step()
    finally:
        worker._shutdown()
    with SyncState(s.state_path) as state:
        assert state.watermarks(s.upstream_collection) == level
    assert held(_upstream(s)) == reference_documents(s.db)


def test_status_tells_claude_mem_the_remote_servers_settings_without_the_token(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    env = {"MEMSYNC_DB": str(db), "MEMSYNC_DATA_DIR": str(tmp_path / "data"), "MEMSYNC_CHROMA_MODE": "http",
           "MEMSYNC_CHROMA_HOST": "chroma.example", "MEMSYNC_CHROMA_PORT": "8443", "MEMSYNC_CHROMA_SSL": "true",
           "MEMSYNC_CHROMA_TENANT": "acme", "MEMSYNC_CHROMA_API_KEY": "secret-token-123",
           "MEMSYNC_UPSTREAM_STORE": "true"}
    out = CliRunner().invoke(main, ["status"], env=env)
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("upstream store:"))
    assert line == ("upstream store: cm__claude-mem, 0 documents; claude-mem reads it with "
                    "CLAUDE_MEM_CHROMA_MODE=remote CLAUDE_MEM_CHROMA_HOST=chroma.example CLAUDE_MEM_CHROMA_PORT=8443 "
                    "CLAUDE_MEM_CHROMA_SSL=true "
                    "CLAUDE_MEM_CHROMA_TENANT=acme CLAUDE_MEM_CHROMA_API_KEY=(memsync's chroma_api_key)")
    assert "secret-token-123" not in out.output
