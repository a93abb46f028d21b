"""Search quality on real conversational memory: LoCoMo evidence-turn retrieval, side by side.

    .venv/bin/python -m scripts.bench_quality [--links turn,session-end,none] [--out FILE]

For each way of linking observations to prompts (``--links``, see ``scripts/locomo.py``: ``turn``
precise, ``session-end`` coarse, ``none`` no observations) it builds a claude-mem database from the
LoCoMo conversations (protocol in ``../shared/data/README.md``), syncs it into an embedded Chroma
with the shipped model, then asks every question of categories 1-4 within its own conversation
(project filter, window disabled, prompts only) and scores the returned prompts against the
evidence turns: recall@5/10/20, MRR and nDCG@10, overall and per category. Retrievers, each
through the public library call:

- ``lexical``: memsync's BM25 side alone; ``semantic``: its dense side alone (MiniLM);
- ``hybrid``: what memsync ships (``mode=hybrid``);
- ``rrf60``: the peer a user would otherwise build (LangChain's ``EnsembleRetriever``): equal-weight
  reciprocal-rank fusion, k=60, of the BM25 (memsync's text index without its query expansion) and
  dense top-100 lists;
- ``profile``: ``memsync mcp --profile claude-mem``'s ``search`` tool (``type=prompts``, the
  project, ``limit=20``), called through the MCP SDK's client on an in-process server and read
  back from its markdown answer: what an agent following claude-mem's skill gets from memsync;
- ``claude-mem``: the real claude-mem's ``search`` tool, the same call, through the same client:
  its published ``mcp-server.cjs`` on Bun, in front of its worker with its Chroma path on
  (``scripts.real_claude_mem``; ``make test`` installs both, pinned). Its worker gets a copy of the
  database (its migrations write) and backfills its own Chroma store, a managed ``chroma run``,
  before the questions: about 25 minutes for the 5,710 documents of a linking with observations on
  two cores, kept in ``quality-LINKS/claude-mem`` so a rerun only checks it. The call adds
  ``dateStart=2000-01-01``: the conversations are from 2023, and without a date range claude-mem
  keeps only its last 90 days (memsync's side runs with the window off, the same all-time question).

For the two MCP retrievers the answer's size is reported too (WordPiece tokens of the text, as
``scripts.bench_tokens`` counts them, and rows per answer).

``--set multilingual`` runs the parallel English/Chinese/Japanese/Korean set instead, with the
English and the multilingual model (its protocol and bars: ``scripts/multilingual.py``).

Writes JSON (default ``.bench/bench_quality.json``) and exits 1 when a bar is missed. Each
linking's synced data directory is kept (``--work``/quality-LINKS) so a rerun skips embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import signal
import sqlite3
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import chromadb

from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.fusion import Weights
from memsync.search.models import Result
from memsync.servers.claude_mem_tools import build_profile_server
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.importer import import_records, init_db
from scripts.benchlib import ROOT, built, free_port, print_table, records_fingerprint, reusable, write_json
from scripts.locomo import DEFAULT_DATA, LINKS, Question, load
from scripts.real_claude_mem import (
    BACKFILL_DONE,
    CLAUDE_MEM_VERSION,
    ClaudeMemWorker,
    mcp_server_params,
    write_user_settings,
)

KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
RETRIEVERS = ("lexical", "semantic", "hybrid", "rrf60", "profile", "claude-mem")
MCP_RETRIEVERS = ("profile", "claude-mem")  # asked through an MCP client, each answer read back
PEER_DEPTH = 100  # each list the peers fuse or re-sort: the same candidate depth memsync uses
TURN_BAR = 0.77  # hybrid recall@10 with precise links: the bar for turn-level evidence


def build(data: Path, work: Path, links: str, provider: str = "local") -> tuple[Settings, list[Question]]:
    """The database and synced store in ``work`` (reused when it was built from the same records),
    embedded by ``provider``, and the questions."""
    recs, questions = load(data, links)
    db = work / "claude-mem.db"
    fingerprint = records_fingerprint(recs)
    if not reusable(work, fingerprint):
        work.mkdir(parents=True)
        init_db(db)
        import_records(db, recs)
        built(work, fingerprint)
    settings = Settings(db=db, data_dir=work / "data", chroma_mode="embedded", window_days=0,
                        embedding_provider=provider)
    t = time.monotonic()
    result = resync(settings)
    print(f"[{links}] synced: {result.written} documents written in {time.monotonic() - t:.1f} s")
    return settings, questions


def evidence_ids(searcher: Searcher) -> dict[tuple[str, int, int], int]:
    """(project, session number, turn number) → prompt id."""
    rows = searcher._rows()  # noqa: SLF001 - a benchmark may read the same database directly
    try:
        got = rows.query("SELECT p.id, p.prompt_number, s.project, s.content_session_id FROM user_prompts p "
                         "JOIN sdk_sessions s ON s.id = p.session_db_id")
    finally:
        rows.close()
    out = {}
    for r in got:
        session = int(str(r["content_session_id"]).rsplit("-s", 1)[1])
        out[(str(r["project"]), session, int(r["prompt_number"]))] = int(r["id"])
    return out


def score(ranked: Sequence[int], gold: set[int]) -> dict[str, float]:
    """recall@k, MRR, nDCG@10 of one ranked list."""
    out = {f"recall@{k}": len(gold & set(ranked[:k])) / len(gold) for k in KS}
    first = next((i for i, x in enumerate(ranked) if x in gold), None)
    out["mrr"] = 1.0 / (first + 1) if first is not None else 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, x in enumerate(ranked[:10]) if x in gold)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), 10)))
    out["ndcg@10"] = dcg / idcg
    return out


def rrf(lists: Sequence[Sequence[int]], k: int = 60) -> list[int]:
    """Equal-weight reciprocal-rank fusion (LangChain's EnsembleRetriever with weights 0.5/0.5:
    equal weights rank identically), ties in first-seen order."""
    total: dict[int, float] = defaultdict(float)
    for ranked in lists:
        for rank, key in enumerate(dict.fromkeys(ranked)):
            total[key] += 1.0 / (k + rank + 1)
    return sorted(total, key=lambda key: -total[key])


class Runner:
    """The retrievers over one synced linking, each returning prompt ids best first."""

    def __init__(self, searcher: Searcher, plain: Searcher) -> None:
        self.searcher = searcher
        self.plain = plain  # plain BM25 (no query expansion), for the peers
        self.latency: dict[str, list[float]] = defaultdict(list)

    def _search(self, q: Question, mode: Mode, limit: int, searcher: Searcher | None = None) -> list[Result]:
        resp = (searcher or self.searcher).search(SearchRequest(
            query=q.question, kinds=[Kind.PROMPT], filters=Filters(project=q.project), window_days=0, limit=limit,
            mode=mode, show_all=True))  # the ranking is measured, not the lists' cutoff
        if resp.mode is not mode:
            raise SystemExit(f"{mode.value} answered as {resp.mode.value}: {resp.reason}")
        return resp.results

    def run(self, q: Question, retrievers: Sequence[str]) -> dict[str, list[int]]:
        """Each retriever's ranking for ``q`` (the peers reuse the deep lexical and dense lists)."""
        out: dict[str, list[int]] = {}
        deep: dict[Mode, list[Result]] = {}
        for name, mode in (("lexical", Mode.LEXICAL), ("semantic", Mode.SEMANTIC), ("hybrid", Mode.HYBRID)):
            if name in retrievers or (mode is not Mode.HYBRID and "rrf60" in retrievers):
                t = time.perf_counter()
                deep[mode] = self._search(q, mode, PEER_DEPTH if mode is not Mode.HYBRID else max(KS))
                self.latency[name].append((time.perf_counter() - t) * 1000)
                out[name] = [r.id for r in deep[mode]]
        if "rrf60" in retrievers:
            bm25 = [r.id for r in self._search(q, Mode.LEXICAL, PEER_DEPTH, self.plain)]
            out["rrf60"] = rrf([bm25, out["semantic"]])
        return {name: out[name] for name in retrievers}


PROMPT_ROW = re.compile(r"^\| #P(\d+) \|", re.M)  # an index row of a prompt, in both servers' answers
ALL_TIME = "2000-01-01"  # claude-mem's dateStart for "all time" (its default keeps the last 90 days)


class Answers:
    """Each question's prompt ids from one MCP server's ``search`` tool, with latency and size."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rankings: list[list[int]] = []
        self.latency: list[float] = []
        self.tokens: list[int] = []

    async def ask(self, server: Any, questions: Sequence[Question], extra: dict[str, Any], tokens: Any) -> None:
        """Ask every question through the MCP SDK's client connected to ``server`` (an in-process
        server or stdio parameters): ``type=prompts``, the question's project, ``limit=20``."""
        from mcp import Client

        async with Client(server, read_timeout_seconds=120) as client:
            for q in questions:
                t = time.perf_counter()
                result = await client.call_tool("search", {"query": q.question, "type": "prompts",
                                                           "project": q.project, "limit": max(KS), **extra})
                self.latency.append((time.perf_counter() - t) * 1000)
                text = "\n".join(getattr(c, "text", "") for c in result.content)
                if result.is_error:
                    raise SystemExit(f"{self.name} search failed: {text}")
                self.rankings.append([int(i) for i in PROMPT_ROW.findall(text)])
                self.tokens.append(tokens(text))
        if not any(self.rankings):  # a changed answer format must not pass as zero recall
            raise SystemExit(f"{self.name}: no prompt row (| #P<id> |) in any answer")

    def size_row(self, links: str) -> dict[str, Any]:
        """Mean rows and WordPiece tokens per answer."""
        n = len(self.tokens)
        rows = sum(len(r) for r in self.rankings) / n
        mean = sum(self.tokens) / n
        return {"links": links, "group": "answer size", "retriever": self.name, "n": n,
                "rows": round(rows, 1), "tokens": round(mean), "tokens/row": round(mean / rows, 1) if rows else None}


def wordpiece_counter() -> Any:
    """Tokens of a text as ``scripts.bench_tokens`` counts them (``memsync.config.tokens``)."""
    from memsync.config.tokens import count_tokens

    return count_tokens


@contextlib.contextmanager
def real_claude_mem(settings: Settings, prepare: Callable[[Path], None] | None = None,
                    user_settings: Mapping[str, str] | None = None) -> Iterator[ClaudeMemWorker]:
    """The real claude-mem worker on a copy of ``settings.db``, its Chroma path on against a managed
    ``chroma run``, backfilled; both kept beside the database for a rerun, stopped at the end.
    ``prepare`` changes the fresh copy once, before claude-mem first reads it (and backfills it);
    ``user_settings`` go into its ``settings.json``, as a user turns a feature on."""
    from memsync.chroma.server import ManagedServer

    root = settings.db.parent / "claude-mem"
    home = root / "home"
    db = home / ".claude-mem" / "claude-mem.db"
    if not db.exists():  # claude-mem's migrations write to the database: it gets its own copy
        db.parent.mkdir(parents=True, exist_ok=True)
        tmp = db.with_suffix(".db.tmp")  # renamed once prepared: an interrupted copy is redone
        tmp.unlink(missing_ok=True)
        with sqlite3.connect(settings.db) as src, sqlite3.connect(tmp) as dst:
            src.backup(dst)
        if prepare is not None:
            prepare(tmp)
        tmp.replace(db)
    if user_settings:
        write_user_settings(db.parent, user_settings)
    chroma = Settings(db=db, data_dir=root / "chroma", chroma_mode="managed", chroma_port=free_port())
    server = ManagedServer(chroma)
    server.ensure()
    worker = ClaudeMemWorker(home, free_port(), chroma_port=chroma.chroma_port)
    try:
        done = worker.own_log().count(BACKFILL_DONE) if worker.data_dir.exists() else 0
        t = time.monotonic()
        worker.start().wait_backfilled(runs=done + 1, timeout=4 * 3600)
        client = chromadb.HttpClient(host=chroma.chroma_host, port=chroma.chroma_port)
        # claude-mem creates its collection on its first write: none when no project has observations
        count = sum(c.count() for c in client.list_collections() if c.name == "cm__claude-mem")
        print(f"claude-mem {CLAUDE_MEM_VERSION}: its Chroma store holds {count} documents "
              f"(backfill checked in {time.monotonic() - t:.0f} s)")
        yield worker
    finally:
        worker.stop()
        server.stop()


def evaluate(settings: Settings, questions: list[Question], weights: Weights, retrievers: Sequence[str],
             links: str) -> list[dict[str, Any]]:
    """Table rows (per group and retriever) for one linking, plus latency rows."""
    searcher = Searcher(settings, weights=weights)
    plain = Searcher(settings.model_copy(update={"lexical_feedback": False}))
    turn_ids = evidence_ids(searcher)
    runner = Runner(searcher, plain)
    sums: dict[str, dict[str, dict[str, list[float]]]] = {
        m: defaultdict(lambda: defaultdict(list)) for m in retrievers}
    answers = {name: Answers(name) for name in MCP_RETRIEVERS if name in retrievers}
    try:
        tokens = wordpiece_counter()
        if "profile" in answers:
            asyncio.run(answers["profile"].ask(build_profile_server(settings, searcher), questions, {}, tokens))
        if "claude-mem" in answers:
            with real_claude_mem(settings) as worker:
                asyncio.run(answers["claude-mem"].ask(mcp_server_params(worker), questions,
                                                      {"dateStart": ALL_TIME}, tokens))
        for n, q in enumerate(questions):
            gold = {turn_ids[(q.project, s, t)] for s, t in q.evidence if (q.project, s, t) in turn_ids}
            if not gold:
                continue
            ranked_by = runner.run(q, [r for r in retrievers if r not in answers])
            ranked_by.update({name: a.rankings[n] for name, a in answers.items()})
            for name, ranked in ranked_by.items():
                for metric, value in score(ranked, gold).items():
                    sums[name]["all"][metric].append(value)
                    sums[name][CATEGORIES[q.category]][metric].append(value)
    finally:
        searcher.close()
        plain.close()
    metrics = [*(f"recall@{k}" for k in KS), "mrr", "ndcg@10"]
    table: list[dict[str, Any]] = []
    for group in ["all", *CATEGORIES.values()]:
        for name in retrievers:
            vals = sums[name][group]
            row: dict[str, Any] = {"links": links, "group": group, "n": len(vals["mrr"]), "retriever": name}
            row.update({m: round(sum(vals[m]) / len(vals[m]), 3) for m in metrics})
            table.append(row)
    latency = {**runner.latency, **{name: a.latency for name, a in answers.items()}}
    for name, values in latency.items():
        lat = sorted(values)
        table.append({"links": links, "group": "latency", "retriever": name, "n": len(lat),
                      "p50_ms": round(lat[len(lat) // 2], 1), "p95_ms": round(lat[int(len(lat) * 0.95)], 1)})
    table.extend(a.size_row(links) for a in answers.values())
    return table


def bars(table: list[dict[str, Any]], linkings: Sequence[str]) -> dict[str, bool]:
    """The issue's hard bars on recall@10, each named, for the linkings that ran."""
    r10 = {(r["links"], r["group"], r["retriever"]): r.get("recall@10") for r in table}
    groups = ["all", *CATEGORIES.values()]
    out: dict[str, bool] = {}
    for links in linkings:
        if (links, "all", "lexical") not in r10:
            continue
        for peer in ("lexical", "rrf60"):
            out[f"{links}: hybrid > {peer} in every category"] = all(
                r10[(links, g, "hybrid")] > r10[(links, g, peer)] for g in groups)
    if {"session-end", "none"} <= set(linkings):
        out["session-end >= none"] = r10[("session-end", "all", "hybrid")] >= r10[("none", "all", "hybrid")]
    if "turn" in linkings:
        out[f"turn >= {TURN_BAR}"] = r10[("turn", "all", "hybrid")] >= TURN_BAR
    return out


def parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated choice of ``allowed`` values, in the given order."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise SystemExit(f"--{what}: choose from {', '.join(allowed)} (got {text!r})")
    return values


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code (1 when a bar is missed)."""
    # SIGTERM unwinds like Ctrl-C, so the real claude-mem's worker and its Chroma server (started by
    # real_claude_mem) are stopped by their pids in its finally, not left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--links", default=",".join(LINKS),
                   help=f"linkings of observations to prompts to build and score (default {','.join(LINKS)})")
    p.add_argument("--retrievers", default=",".join(RETRIEVERS), help=f"default {','.join(RETRIEVERS)}")
    p.add_argument("--work", type=Path, default=ROOT / ".bench", help="parent of the quality-LINKS directories")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON written (default .bench/bench_quality.json; with --set multilingual "
                   ".bench/bench_quality_multilingual.json)")
    p.add_argument("--weights", default=None, metavar="K,LEX,SEM,LINKED_SEM,LINKED_LEX[,CONTEXT]",
                   help="fusion constants to try instead of the shipped ones, e.g. 10,1,0.5,0.5,0.5,0.5")
    p.add_argument("--set", choices=("locomo", "multilingual"), default="locomo", dest="dataset",
                   help="locomo (default): the English LoCoMo set above; multilingual: the parallel "
                   "English/Chinese/Japanese/Korean set of tests/data/multilingual (scripts/multilingual.py)")
    args = p.parse_args(argv)
    if args.dataset == "multilingual":
        return multilingual_main(args.work / "quality-multilingual",
                                 args.out or ROOT / ".bench" / "bench_quality_multilingual.json",
                                 "claude-mem" in parse_list(args.retrievers, RETRIEVERS, "retrievers"))
    linkings = parse_list(args.links, LINKS, "links")
    retrievers = parse_list(args.retrievers, RETRIEVERS, "retrievers")
    weights = Weights()
    if args.weights:
        k, *ws = (float(x) for x in args.weights.split(","))
        weights = Weights(int(k), *ws)
    print(f"fusion: {weights}")
    table: list[dict[str, Any]] = []
    for links in linkings:
        settings, questions = build(args.data, args.work / f"quality-{links}", links)
        table.extend(evaluate(settings, questions, weights, retrievers, links))
    for part in ([r for r in table if r["group"] not in ("latency", "answer size")],
                 [r for r in table if r["group"] == "latency"], [r for r in table if r["group"] == "answer size"]):
        if part:
            print_table(part)
    met = bars(table, linkings) if {"hybrid", "lexical", "rrf60"} <= set(retrievers) else {}
    for name, ok in met.items():
        print(f"bar {name}: {'MET' if ok else 'MISSED'}")
    write_json({"questions": len(questions), "linkings": linkings, "bars": met, "fusion": asdict(weights),
                "table": table}, args.out or ROOT / ".bench" / "bench_quality.json")
    return 0 if all(met.values()) else 1


def multilingual_main(work: Path, out: Path, with_claude_mem: bool) -> int:
    """``--set multilingual``: the parallel set's table, its bars, and the single-word misses
    (the real claude-mem too unless ``--retrievers`` leaves it out)."""
    from scripts import multilingual

    table, met, misses = multilingual.evaluate(work, with_claude_mem)
    print_table([{k: v for k, v in r.items() if "ms" not in k} for r in table])
    print_table([{"language": r["language"], "retriever": r["retriever"], "p50_ms": r["p50_ms"], "p95_ms": r["p95_ms"]}
                 for r in table if r["p50_ms"] is not None])
    for miss in misses:
        print(f"lexical missed: {miss}")
    for name, ok in met.items():
        print(f"bar {name}: {'MET' if ok else 'MISSED'}")
    write_json({"set": "multilingual", "bars": met, "misses": misses, "table": table}, out)
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
