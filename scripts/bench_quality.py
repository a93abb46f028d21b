"""Search quality on real conversational memory: LoCoMo evidence-turn retrieval.

    .venv/bin/python -m scripts.bench_quality [--data ../shared/data/locomo-dev.json] [--out FILE]

Builds a claude-mem database from the LoCoMo conversations (protocol in ``../shared/data/README.md``
and ``scripts/locomo.py``), syncs it into an embedded Chroma with the shipped model, then asks
every question of categories 1-4 within its own conversation (project filter, window disabled,
prompts only) and scores the returned prompts against the evidence turns: recall@5/10/20, MRR
and nDCG@10, overall and per category, for lexical only, semantic only and the shipped hybrid,
side by side. Writes JSON (default ``.bench/bench_quality.json``). The synced data directory is
kept (``--work``) so a rerun skips the embedding.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from memsync.config.claude_mem.schema import Kind
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher
from memsync.search.fusion import Weights
from memsync.worker.importer import import_records, init_db
from memsync.worker.resync import resync
from scripts.benchlib import ROOT, print_table, write_json
from scripts.locomo import DEFAULT_DATA, Question, load

KS = (5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def build(data: Path, work: Path) -> tuple[Settings, list[Question]]:
    """The database and synced store in ``work`` (reused when present), and the questions."""
    recs, questions = load(data)
    db = work / "claude-mem.db"
    if not db.exists():
        init_db(db)
        import_records(db, recs)
    settings = Settings(db=db, data_dir=work / "data", chroma_mode="embedded", window_days=0)
    t = time.monotonic()
    result = resync(settings)
    print(f"synced: {result.written} documents written in {time.monotonic() - t:.1f} s")
    return settings, questions


def evidence_ids(searcher: Searcher, questions: list[Question]) -> dict[tuple[str, int, int], int]:
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


def score(ranked: list[int], gold: set[int]) -> dict[str, float]:
    """recall@k, MRR, nDCG@10 of one ranked list."""
    out = {f"recall@{k}": len(gold & set(ranked[:k])) / len(gold) for k in KS}
    first = next((i for i, x in enumerate(ranked) if x in gold), None)
    out["mrr"] = 1.0 / (first + 1) if first is not None else 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, x in enumerate(ranked[:10]) if x in gold)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), 10)))
    out["ndcg@10"] = dcg / idcg
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code (1 when the bar is missed)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--work", type=Path, default=ROOT / ".bench" / "quality")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_quality.json")
    p.add_argument("--weights", default=None, metavar="K,LEX,SEM,LINKED_SEM,LINKED_LEX",
                   help="fusion constants to try instead of the shipped ones, e.g. 10,1,0.5,0.5,0.5")
    p.add_argument("--only-hybrid", action="store_true", help="skip the lexical and semantic runs")
    args = p.parse_args(argv)
    settings, questions = build(args.data, args.work)
    weights = Weights()
    if args.weights:
        k, *ws = (float(x) for x in args.weights.split(","))
        weights = Weights(int(k), *ws)
    print(f"fusion: {weights}")
    searcher = Searcher(settings, weights=weights)
    turn_ids = evidence_ids(searcher, questions)
    modes = {"lexical": Mode.LEXICAL, "semantic": Mode.SEMANTIC, "hybrid": Mode.HYBRID}
    if args.only_hybrid:
        modes = {"hybrid": Mode.HYBRID}
    sums: dict[str, dict[str, dict[str, list[float]]]] = {m: defaultdict(lambda: defaultdict(list)) for m in modes}
    latency: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        gold = {turn_ids[(q.project, s, t)] for s, t in q.evidence if (q.project, s, t) in turn_ids}
        if not gold:
            continue
        for name, mode in modes.items():
            t = time.perf_counter()
            resp = searcher.search(q.question, [Kind.PROMPT], Filters(project=q.project), window_days=0,
                                   limit=max(KS), mode=mode)
            latency[name].append((time.perf_counter() - t) * 1000)
            if resp.mode is not mode:
                raise SystemExit(f"{name} answered as {resp.mode}: {resp.reason}")
            s = score([r.id for r in resp.results], gold)
            for metric, value in s.items():
                sums[name]["all"][metric].append(value)
                sums[name][CATEGORIES[q.category]][metric].append(value)
    searcher.close()
    groups = ["all", *CATEGORIES.values()]
    metrics = [*(f"recall@{k}" for k in KS), "mrr", "ndcg@10"]
    table = []
    for group in groups:
        for name in modes:
            vals = sums[name][group]
            row: dict[str, object] = {"group": group, "n": len(vals["mrr"]), "retriever": name}
            row.update({m: round(sum(vals[m]) / len(vals[m]), 3) for m in metrics})
            table.append(row)
    for name in modes:
        lat = sorted(latency[name])
        table.append({"group": "latency", "retriever": name, "n": len(lat),
                      "p50_ms": round(lat[len(lat) // 2], 1), "p95_ms": round(lat[int(len(lat) * 0.95)], 1)})
    r10 = {(row["group"], row["retriever"]): row.get("recall@10") for row in table}
    if args.only_hybrid:
        print_table(table)
        return 0
    bar = all(r10[(g, "hybrid")] > max(r10[(g, "lexical")], r10[(g, "semantic")]) for g in groups)  # type: ignore[operator]
    ok = bar and float(r10[("all", "hybrid")]) >= 0.70  # type: ignore[arg-type]
    print_table(table)
    write_json({"questions": len(questions), "bar_met": ok, "fusion": asdict(weights), "table": table}, args.out)
    print("bar (hybrid beats both on recall@10 everywhere, overall >= 0.70):", "MET" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
