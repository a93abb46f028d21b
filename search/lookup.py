"""A minimal semantic lookup straight from Chroma: enough to prove the vectors are there.

Embeds the query with the same model as the worker (identity checked by ``open_collection``),
takes the top-N documents, collapses field documents onto their row by (kind, id) (never by id
alone), and reads a one-line preview of each row from SQLite (read-only). The real hybrid search
replaces this in the search issue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from config import stores
from config.docids import DocIdError, parse_doc_id
from config.embedding import get_embedder
from config.schema import TABLES, Kind
from config.settings import Settings
from config.sources import open_source_db

PREVIEW_SQL = {
    Kind.OBSERVATION: "SELECT title, narrative, text, facts FROM observations WHERE id = ?",
    Kind.SUMMARY: "SELECT * FROM session_summaries WHERE id = ?",
    Kind.PROMPT: "SELECT prompt_text FROM user_prompts WHERE id = ?",
}


def _field_text(kind: Kind, row: Any, field: str | None) -> str:
    """The text of the field that matched, prefixed by the observation's title."""
    if kind is Kind.PROMPT:
        return str(row["prompt_text"] or "")
    if kind is Kind.SUMMARY:
        return str(row[field] or "") if field else ""  # parse_doc_id admits only real summary fields
    title = str(row["title"] or "")
    if field is not None and field.startswith("fact_"):
        try:
            facts = json.loads(row["facts"] or "[]")
            body = str(facts[int(field[5:])]) if isinstance(facts, list) else ""
        except (ValueError, IndexError):
            body = ""
    else:
        body = str(row[field] or "") if field in ("narrative", "text") else ""
    return f"{title}: {body}" if title and body and not body.startswith(title) else body or title


@dataclass(frozen=True, slots=True)
class Hit:
    """One row found: kind, id, the best-matching field, cosine similarity, project, preview."""

    kind: str
    id: int
    field: str | None
    score: float
    project: str
    preview: str


def lookup(settings: Settings, query: str, limit: int = 5) -> list[Hit]:
    """The ``limit`` rows whose documents are nearest to ``query`` (cosine), best first."""
    embedder = get_embedder(settings.embedding_model, settings.embedding_batch_size,
                            settings.embedding_max_tokens, settings.embedding_threads)
    vector = embedder.embed([query])
    with stores.connect(settings) as handle:
        collection = stores.open_collection(handle.client, settings, embedder.model_id, embedder.dimension)
        n = min(settings.candidates, max(1, collection.count()))
        got = collection.query(query_embeddings=vector, n_results=n, include=["metadatas", "distances"])
    best: dict[tuple[Kind, int], Hit] = {}
    for doc_id, meta, dist in zip(got["ids"][0], got["metadatas"][0], got["distances"][0], strict=True):
        try:
            key = parse_doc_id(doc_id)
        except DocIdError:
            continue
        row = (key.kind, key.sqlite_id)
        if row not in best:
            best[row] = Hit(key.kind.value, key.sqlite_id, key.field, max(0.0, 1.0 - float(dist)),
                            str((meta or {}).get("project", "")), "")
        if len(best) >= limit:
            break
    conn = open_source_db(settings.db, settings.sqlite_busy_timeout_ms)
    try:
        hits = []
        for (kind, sid), hit in best.items():
            found = conn.execute(PREVIEW_SQL[kind], (sid,)).fetchone()
            text = _field_text(kind, found, hit.field) if found else f"(gone from {TABLES[kind]})"
            preview = " ".join(text.split())[:160]
            hits.append(Hit(hit.kind, hit.id, hit.field, hit.score, hit.project, preview))
    finally:
        conn.close()
    return hits
