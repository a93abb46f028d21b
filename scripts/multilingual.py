"""The parallel multilingual set (``tests/data/multilingual/*.json``): the same coding-agent memories
and queries written in English, Chinese, Japanese and Korean, with their relevance judgments, and
its evaluation for ``scripts.bench_quality --set multilingual``.

Each file holds one domain's memories (observations, session summaries, prompts; English
identifiers and paths kept in every language) and queries (``question``, ``phrase`` or one
``word``), each query naming the memories that answer it. Per language, one claude-mem database
holds every memory of every domain in that language; a query is asked over all kinds, all time.

Retrievers: ``fts5`` (the app's own FTS5 tables, ``unicode61``, the query's words OR-ed and ranked
by bm25 across the three tables: what FTS5 alone gives), ``claude-mem`` (the real claude-mem's
``search`` tool, ``limit=10`` over all time, in front of its worker with its Chroma path on:
``scripts.real_claude_mem``, as in the LoCoMo run; its backfill is kept beside each language's
database), memsync's ``lexical``, ``semantic`` and
``hybrid`` (``semantic`` and ``hybrid`` once per model: ``local``, the bundled English MiniLM, and
``local-multilingual``).

Bars (exit 1 when missed):
- per CJK language, hybrid recall@10 with the multilingual model >= 0.9 x the English twin's with
  the same model;
- the lexical side finds every single-word CJK query whose word appears in a relevant row: such a
  row among its matches (the top 100, the depth the hybrid fuses).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config.cjk import has_cjk
from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest
from memsync.search.fts import expression_for
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.importer import import_records, init_db
from scripts.benchlib import ROOT, built, records_fingerprint, reusable

DATA = ROOT / "tests" / "data" / "multilingual"
LANGUAGES = ("en", "zh", "ja", "ko")
MODELS = ("local", "local-multilingual")
KS = (5, 10)
DEPTH = 100  # the lexical side's depth for "found": the candidates the hybrid fuses
PARITY = 0.9  # CJK hybrid recall@10 >= PARITY x English, with the multilingual model
DAY_MS = 86_400_000
FIELDS = {"observation": ("title", "subtitle", "narrative", "facts"),
          "summary": ("request", "investigated", "learned", "completed", "next_steps"),
          "prompt": ("prompt_text",)}

Key = tuple[str, int]  # (kind, row id)


@dataclass(frozen=True, slots=True)
class Query:
    """One query in every language, and the memories that answer it."""

    id: str
    style: str
    relevant: tuple[str, ...]
    text: dict[str, str]


def load(data: Path = DATA) -> tuple[list[dict[str, Any]], list[Query]]:
    """Every memory and query of the set's files, in file order."""
    memories: list[dict[str, Any]] = []
    queries: list[Query] = []
    for path in sorted(data.glob("*.json")):
        part = json.loads(path.read_text("utf-8"))
        memories += part["memories"]
        queries += [Query(q["id"], q["style"], tuple(q["relevant"]), q["text"]) for q in part["queries"]]
    return memories, queries


def memory_text(memory: dict[str, Any], language: str) -> str:
    """All of one memory's text in one language (what a relevant row holds)."""
    fields = memory["text"][language]
    return "\n".join(" ".join(v) if isinstance(v, list) else str(v) for v in fields.values())


def records(memories: Sequence[dict[str, Any]], language: str, now_ms: int) -> list[dict[str, Any]]:
    """Import records of the memories in one language (one session per project and day)."""
    out = []
    for m in memories:
        text = m["text"][language]
        rec: dict[str, Any] = {"kind": m["kind"], "project": m["project"],
                               "session": f"{m['project']}-d{m['days_ago']}",
                               "created_at_epoch": now_ms - int(m["days_ago"]) * DAY_MS, "prompt_number": 1}
        if m["kind"] == "observation":
            rec.update(type=m.get("type", "discovery"), title=text["title"], subtitle=text["subtitle"],
                       narrative=text["narrative"], facts=list(text["facts"]), concepts=[],
                       files_read=list(m.get("files", [])), files_modified=[])
        else:
            rec.update({f: text[f] for f in FIELDS[m["kind"]]})
        out.append(rec)
    return out


def row_keys(memories: Sequence[dict[str, Any]]) -> dict[str, Key]:
    """Memory id → (kind, row id): rows are numbered per kind in import order."""
    counts: dict[str, int] = defaultdict(int)
    out = {}
    for m in memories:
        counts[m["kind"]] += 1
        out[m["id"]] = (m["kind"], counts[m["kind"]])
    return out


def build(work: Path, memories: Sequence[dict[str, Any]], language: str, model: str) -> Settings:
    """One language's database (shared by the models, and copied for the real claude-mem beside it)
    and one model's synced store, reused when built from the same memories."""
    db = work / language / "claude-mem.db"
    fingerprint = records_fingerprint(records(memories, language, 0))
    if not reusable(db.parent, fingerprint):
        db.parent.mkdir(parents=True)
        init_db(db)
        import_records(db, records(memories, language, int(time.time() * 1000)))
        built(db.parent, fingerprint)
    settings = Settings(db=db, data_dir=work / language / f"data-{model}", chroma_mode="embedded", window_days=0,
                        embedding_provider=model)  # type: ignore[arg-type]
    t = time.monotonic()
    result = resync(settings)
    print(f"[{language} {model}] synced: {result.written} documents written in {time.monotonic() - t:.1f} s")
    return settings


_WORDS = re.compile(r"\w+", re.UNICODE)
_FTS_TABLES = (("observation", "observations_fts"), ("summary", "session_summaries_fts"),
               ("prompt", "user_prompts_fts"))


def fts5(db: Path, query: str, limit: int) -> list[Key]:
    """The app's own FTS5 tables (unicode61) alone: the query's words OR-ed, bm25 across tables."""
    # unicode61's words (a CJK run is one), not memsync's cut: what these tables can match
    expr = expression_for([(w,) for w in dict.fromkeys(w.lower() for w in _WORDS.findall(query))])
    if expr is None:
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        hits: list[tuple[float, Key]] = []
        for kind, table in _FTS_TABLES:
            try:
                hits += [(float(r[1]), (kind, int(r[0]))) for r in conn.execute(
                    f"SELECT rowid, bm25({table}) FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT ?",
                    (expr, limit))]
            except sqlite3.OperationalError:
                continue
    finally:
        conn.close()
    return [key for _, key in sorted(hits)[:limit]]


def ranked(searcher: Searcher, query: str, mode: Mode, limit: int) -> tuple[list[Key], float]:
    """memsync's ranking (kind, id) for one query over all kinds and all time, and its ms."""
    t = time.perf_counter()
    resp = searcher.search(SearchRequest(query=query, window_days=0, limit=limit, mode=mode, show_all=True))
    ms = (time.perf_counter() - t) * 1000
    if resp.mode is not mode:
        raise SystemExit(f"{mode.value} answered as {resp.mode.value}: {resp.reason}")
    return [(r.kind.value, r.id) for r in resp.results], ms


ROW_REF = re.compile(r"^\| #([SP]?)(\d+) \|", re.M)  # a row of claude-mem's answer: #123, #S12, #P5
REF_KINDS = {"": "observation", "S": "summary", "P": "prompt"}


def claude_mem(settings: Settings, queries: Sequence[Query], language: str) -> tuple[list[list[Key]], list[float]]:
    """The real claude-mem's ``search`` tool on a copy of the language's database (its worker
    backfilled into its own Chroma first): each query with ``limit=10`` over all time, read back
    from its markdown answer."""
    import asyncio

    from mcp import Client

    from scripts.bench_quality import ALL_TIME, real_claude_mem
    from scripts.real_claude_mem import mcp_server_params

    rankings: list[list[Key]] = []
    latency: list[float] = []

    async def ask(server: Any) -> None:
        async with Client(server, read_timeout_seconds=120) as client:
            for q in queries:
                t = time.perf_counter()
                result = await client.call_tool("search", {"query": q.text[language], "limit": max(KS),
                                                           "dateStart": ALL_TIME})
                latency.append((time.perf_counter() - t) * 1000)
                text = "\n".join(getattr(c, "text", "") for c in result.content)
                if result.is_error:
                    raise SystemExit(f"claude-mem search failed: {text}")
                rankings.append([(REF_KINDS[letter], int(i)) for letter, i in ROW_REF.findall(text)])

    with real_claude_mem(settings) as worker:
        asyncio.run(ask(mcp_server_params(worker)))
    if not any(rankings):  # a changed answer format must not pass as zero recall
        raise SystemExit("claude-mem: no row (| #<id> |) in any answer")
    return rankings, latency


def evaluate(work: Path, with_claude_mem: bool = True) -> tuple[list[dict[str, Any]], dict[str, bool],
                                                                list[dict[str, Any]]]:
    """Table rows (language x retriever x query style), the bars, and the single-word misses."""
    memories, queries = load()
    keys = row_keys(memories)
    by_id = {m["id"]: m for m in memories}
    work.mkdir(parents=True, exist_ok=True)
    scores: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    latency: dict[tuple[str, str], list[float]] = defaultdict(list)
    misses: list[dict[str, Any]] = []
    words_checked: dict[str, int] = defaultdict(int)
    for language in LANGUAGES:
        for model in MODELS:
            settings = build(work, memories, language, model)
            upstream: list[list[Key]] = []
            if with_claude_mem and model == MODELS[0]:
                upstream, ms_list = claude_mem(settings, queries, language)
                latency[(language, "claude-mem")] += ms_list
            searcher = Searcher(settings)
            try:
                for n, q in enumerate(queries):
                    text = q.text[language]
                    gold = {keys[r] for r in q.relevant}
                    lists: dict[str, list[Key]] = {}
                    if model == MODELS[0]:  # the lexical rankings do not depend on the model
                        lists["fts5"] = fts5(settings.db, text, max(KS))
                        deep, ms = ranked(searcher, text, Mode.LEXICAL, DEPTH)
                        latency[(language, "lexical")].append(ms)
                        lists["lexical"] = deep
                        if upstream:
                            lists["claude-mem"] = upstream[n]
                        if q.style == "word" and has_cjk(text):
                            holding = {keys[r] for r in q.relevant if text in memory_text(by_id[r], language)}
                            if holding:
                                words_checked[language] += 1
                                if not holding & set(deep):
                                    misses.append({"language": language, "query": q.id, "word": text})
                    for mode in (Mode.SEMANTIC, Mode.HYBRID):
                        got, ms = ranked(searcher, text, mode, max(KS))
                        latency[(language, f"{mode.value} {model}")].append(ms)
                        lists[f"{mode.value} {model}"] = got
                    for name, got in lists.items():
                        for k in KS:
                            value = len(gold & set(got[:k])) / len(gold)
                            scores[(language, name, f"recall@{k}")].append(value)
                            if k == 10:
                                scores[(language, name, f"{q.style} recall@10")].append(value)
            finally:
                searcher.close()
    table: list[dict[str, Any]] = []
    names = ["fts5", *(["claude-mem"] if with_claude_mem else []), "lexical",
             *(f"{m.value} {model}" for model in MODELS for m in (Mode.SEMANTIC, Mode.HYBRID))]
    for language in LANGUAGES:
        for name in names:
            row: dict[str, Any] = {"language": language, "retriever": name}
            for metric in ("recall@5", "recall@10", "question recall@10", "phrase recall@10", "word recall@10"):
                vals = scores.get((language, name, metric), [])
                row[metric] = round(sum(vals) / len(vals), 3) if vals else None
            lat = sorted(latency.get((language, name), []))
            row["p50_ms"] = round(lat[len(lat) // 2], 1) if lat else None
            row["p95_ms"] = round(lat[int(len(lat) * 0.95)], 1) if lat else None
            table.append(row)
    r10 = {(r["language"], r["retriever"]): r["recall@10"] for r in table}
    hybrid = "hybrid local-multilingual"
    bars = {f"{lang}: hybrid (multilingual) >= {PARITY} x English": r10[(lang, hybrid)] >= PARITY * r10[("en", hybrid)]
            for lang in LANGUAGES[1:]}
    for lang in LANGUAGES[1:]:
        bars[f"{lang}: lexical finds all {words_checked[lang]} single-word queries"] = not any(
            m["language"] == lang for m in misses)
    print(f"multilingual set: {len(memories)} memories, {len(queries)} queries per language")
    return table, bars, misses


Unit = tuple[str, int, int]  # bench_inject's evidence unit; here a memory is its own: (kind, row id, 0)


def inject_prompts(memories: Sequence[dict[str, Any]], queries: Sequence[Query], language: str
                   ) -> tuple[list[tuple[str, str, frozenset[Unit], str]], dict[str, Unit]]:
    """For ``scripts.bench_inject --set multilingual``: each query in ``language`` as a prompt
    (group: its style) in the project holding most of its relevant memories (5 of the 128 have
    relevant memories in two projects: the other project's cannot be injected), its evidence the
    relevant memories; and each memory's ref (``#12``, ``#S3``, ``#P5``) → its unit."""
    keys = row_keys(memories)
    projects = {m["id"]: m["project"] for m in memories}
    units: dict[str, Unit] = {format_ref(Kind(kind), i): (kind, i, 0) for kind, i in keys.values()}
    prompts = []
    for q in queries:
        counts = [projects[r] for r in q.relevant]
        project = max(dict.fromkeys(counts), key=counts.count)  # the most relevant memories; ties: first listed
        prompts.append((q.style, q.text[language], frozenset((*keys[r], 0) for r in q.relevant), project))
    return prompts, units

