"""Ranking lab: two re-ranking ideas measured on the LoCoMo dev set, leave-one-conversation-out,
without changing the search.

    .venv/bin/python -m scripts.ranking_lab [--links turn,session-end,none] [--ideas mmr,quota,adjacent,prf]
                                            [--out FILE]

Each linking's database and synced store come from ``scripts.bench_quality``'s ``build`` (the same
``.bench/quality-LINKS`` directories, reused). Every question of categories 1-4 is asked as
``bench_quality`` asks it (hybrid, prompts only, its project, window off), through a ``Searcher``
that keeps what its fusion was given (the lexical lists, the semantic answer with the vector copy
it read, the linked votes); the lab then re-ranks from there, the product untouched:

- ``baseline``: the fusion as shipped (checked against the search's own page, to prove the lab
  reproduces ``bench_quality``'s numbers);
- ``mmr``: maximal marginal relevance over the fused top ``depth``: the next place goes to
  ``lam * score/top score - (1 - lam) * max cosine with the prompts already placed`` (prompt
  vectors from the vector copy, nothing embedded);
- ``quota``: at most ``m`` prompts of one session in the top 10 (the rest move down, in order);
- ``adjacent``: a prompt within ``d`` turns of one already placed, in the same session, moves down;
- ``dedup``: a near-copy (cosine at least ``tau`` with a prompt already placed) moves down;
- ``prf``: dense pseudo-relevance feedback (Rocchio): ``q' = q + beta * mean(top-k vectors)``,
  normalised, the top k taken from the dense side's prompts (``src=dense``) or the fused list
  (``src=fused``), their vectors from the copy; the semantic side, the context list and the linked
  votes are computed again with ``q'`` and fused as the search fuses (the lexical side unchanged).

Each idea's parameter (``off`` included) is chosen per fold on the four other conversations by
mean recall@10; only the pooled held-out folds are reported, overall and per category, beside the
baseline, with the parameter chosen per fold. Writes JSON (default ``.bench/ranking_lab.json``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import Kind
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.engine import LexicalAnswer, LinkedAnswer
from memsync.search.hydrate import PageEntry
from memsync.search.plan import Plan
from memsync.search.semantic import SemanticAnswer, SemanticSide
from scripts.bench_quality import CATEGORIES, build, evidence_ids, parse_list
from scripts.benchlib import ROOT, print_table, write_json
from scripts.locomo import DEFAULT_DATA, LINKS, Question

TOP = 10
Vec = npt.NDArray[np.float32]
Param = tuple[Any, ...]
OFF: Param = ("off",)

MMR_GRID: list[Param] = [OFF, *((lam, depth) for depth in (20, 40) for lam in (0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5))]
QUOTA_GRID: list[Param] = [OFF, *((m,) for m in (1, 2, 3, 4, 5))]
ADJACENT_GRID: list[Param] = [OFF, *((d,) for d in (1, 2, 3))]
DEDUP_GRID: list[Param] = [OFF, *((tau,) for tau in (0.95, 0.9, 0.85, 0.8, 0.75, 0.7))]
PRF_GRID: list[Param] = [OFF, *((src, k, beta) for src in ("dense", "fused") for k in (3, 5, 10)
                                for beta in (0.25, 0.5, 1.0))]
IDEAS = ("mmr", "quota", "adjacent", "dedup", "prf")


class LabSearcher(Searcher):
    """The shipped searcher, keeping what its last fusion was given."""

    captured: tuple[LexicalAnswer, SemanticAnswer, LinkedAnswer] | None = None

    def _fuse(self, lex: LexicalAnswer, sem: SemanticAnswer, linked: LinkedAnswer) -> list[PageEntry]:
        self.captured = (lex, sem, linked)
        return super()._fuse(lex, sem, linked)


class FixedQuery:
    """The search's vector store, answering ``embed`` with a given vector (the moved query)."""

    def __init__(self, store: Any, vec: Vec) -> None:
        self._store = store
        self._vec = vec

    def embed(self, text: str) -> Vec:
        return self._vec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def recall(ranked: Sequence[int], gold: set[int], k: int = TOP) -> float:
    return len(gold & set(ranked[:k])) / len(gold)


def mmr(entries: list[PageEntry], vecs: dict[int, Vec], lam: float, depth: int) -> list[int]:
    """The top 10 by maximal marginal relevance over the first ``depth`` entries; the rest in order."""
    cand = entries[:depth]
    if not cand:
        return []
    top = cand[0].score or 1.0
    ids = [e.key[1] for e in cand]
    rel = np.array([e.score / top for e in cand])
    dim = next(iter(vecs.values())).shape[0] if vecs else 1
    mat = np.stack([vecs.get(i, np.zeros(dim, np.float32)) for i in ids])
    sim = mat @ mat.T
    chosen: list[int] = []
    left = list(range(len(ids)))
    maxsim = np.full(len(ids), -np.inf)
    while left and len(chosen) < TOP:
        pen = np.where(np.isfinite(maxsim[left]), maxsim[left], 0.0)
        val = lam * rel[left] - (1 - lam) * pen
        pick = left[int(np.argmax(val))]  # argmax: ties to the better fused place
        chosen.append(pick)
        left.remove(pick)
        maxsim = np.maximum(maxsim, sim[pick])
    head = [ids[i] for i in chosen]
    return head + [e.key[1] for e in entries if e.key[1] not in set(head)]


def demote(ids: list[int], keep: Callable[[int, list[int]], bool]) -> list[int]:
    """The top 10 filled in order with the ids ``keep`` accepts given those placed; then the
    deferred ones and the rest, in order."""
    head: list[int] = []
    deferred: list[int] = []
    for i in ids:
        if len(head) >= TOP:
            break
        (head if keep(i, head) else deferred).append(i)
    placed = set(head) | set(deferred)
    head.extend(deferred)
    return head + [i for i in ids if i not in placed]


def unit(v: Vec) -> Vec:
    n = float(np.linalg.norm(v))
    return (v / n).astype(np.float32) if n else v


class Lab:
    """One linking's searcher and the per-question recall@10 of every idea and parameter."""

    def __init__(self, searcher: LabSearcher, where: dict[int, tuple[int, int]]) -> None:
        self.s = searcher
        self.where = where  # prompt id -> (session, turn)
        self.checked = 0
        self.mismatch = 0

    def prompt_vecs(self, sem: SemanticAnswer, ids: Sequence[int]) -> dict[int, Vec]:
        if sem.copy is None:
            raise SystemExit("no vector copy in the semantic answer: the lab needs it")
        got = sem.copy.row_vectors([(Kind.PROMPT, i) for i in ids])
        return {k[1]: unit(v.mean(axis=0)) for k, v in got.items()}

    def refuse(self, req: SearchRequest, lex: LexicalAnswer, vec: Vec) -> list[int]:
        """The fusion with the semantic side (and what hangs on it) asked again with ``vec``."""
        plan = Plan.of(req, self.s.settings)
        sem = SemanticSide(self.s.settings, FixedQuery(self.s.vector, vec)).search(plan)
        rows = self.s._rows()  # noqa: SLF001 - the lab runs the engine's own stages
        try:
            linked = self.s._link(rows, plan, lex, sem)  # noqa: SLF001
        finally:
            rows.close()
        return [e.key[1] for e in self.s._fuse(lex, sem, linked)]  # noqa: SLF001

    def question(self, q: Question, gold: set[int], ideas: Sequence[str]) -> dict[str, dict[Param, float]]:
        req = SearchRequest(query=q.question, kinds=[Kind.PROMPT], filters=Filters(project=q.project),
                            window_days=0, limit=20, mode=Mode.HYBRID)
        resp = self.s.search(req)
        if resp.mode is not Mode.HYBRID:
            raise SystemExit(f"hybrid answered as {resp.mode.value}: {resp.reason}")
        assert self.s.captured is not None
        lex, sem, linked = self.s.captured
        entries = self.s._fuse(lex, sem, linked)  # noqa: SLF001 - the same lists again: the same order
        base = [e.key[1] for e in entries]
        self.checked += 1
        self.mismatch += base[:20] != [r.id for r in resp.results]
        out: dict[str, dict[Param, float]] = {"baseline": {OFF: recall(base, gold)}}
        # Where the evidence is before the top 10: the fused top 30, and the union of the lexical
        # and dense top 30 (the ceiling of any re-ranking of those candidates).
        dense = [h.id for h in sem.hits if h.kind is Kind.PROMPT]
        union = set(lex.ranked.get(Kind.PROMPT, [])[:30]) | set(dense[:30])
        out["ceiling"] = {("fused@30",): recall(base, gold, 30), ("union30",): len(gold & union) / len(gold)}
        if {"mmr", "quota", "adjacent", "dedup"} & set(ideas):
            vecs = self.prompt_vecs(sem, base[:max(p[1] for p in MMR_GRID if p != OFF)])
        if "mmr" in ideas:
            out["mmr"] = {p: recall(base if p == OFF else mmr(entries, vecs, p[0], p[1]), gold) for p in MMR_GRID}
        if "quota" in ideas:
            out["quota"] = {}
            for p in QUOTA_GRID:
                ranked = base if p == OFF else demote(
                    base, lambda i, head, m=p[0]: sum(self.where[h][0] == self.where[i][0] for h in head) < m)
                out["quota"][p] = recall(ranked, gold)
        if "adjacent" in ideas:
            out["adjacent"] = {}
            for p in ADJACENT_GRID:
                ranked = base if p == OFF else demote(base, lambda i, head, d=p[0]: not any(
                    self.where[h][0] == self.where[i][0] and abs(self.where[h][1] - self.where[i][1]) <= d
                    for h in head))
                out["adjacent"][p] = recall(ranked, gold)
        if "dedup" in ideas:
            out["dedup"] = {}
            for p in DEDUP_GRID:
                ranked = base if p == OFF else demote(base, lambda i, head, tau=p[0]: not any(
                    i in vecs and h in vecs and float(vecs[i] @ vecs[h]) >= tau for h in head))
                out["dedup"][p] = recall(ranked, gold)
        if "prf" in ideas:
            qvec = self.s.vector.embed(q.question)
            pool = self.prompt_vecs(sem, list(dict.fromkeys(dense[:10] + base[:10])))
            out["prf"] = {OFF: out["baseline"][OFF]}
            for p in PRF_GRID[1:]:
                src, k, beta = p
                top = (dense if src == "dense" else base)[:k]
                fb = [pool[i] for i in top if i in pool]
                moved = unit(qvec + beta * np.mean(fb, axis=0)) if fb else qvec
                out["prf"][p] = recall(self.refuse(req, lex, moved), gold)
            if self.checked == 1:  # the rerun itself, unmoved, must give the shipped order
                same = self.refuse(req, lex, qvec)[:TOP] == base[:TOP]
                print(f"prf rerun with the query unmoved reproduces the order: {same}")
        return out


def loco(rows: list[dict[str, Any]], idea: str) -> tuple[list[float], dict[str, Param]]:
    """Per held-out conversation, the parameter best on the others (ties: earlier in the grid,
    ``off`` first); the held-out recall of each question under its fold's choice."""
    projects = sorted({r["project"] for r in rows})
    grid = list(rows[0][idea])
    held: dict[int, float] = {}
    chosen: dict[str, Param] = {}
    for proj in projects:
        train = [r for r in rows if r["project"] != proj]
        means = {p: sum(r[idea][p] for r in train) / len(train) for p in grid}
        best = max(grid, key=lambda p: (round(means[p], 9), -grid.index(p)))
        chosen[proj] = best
        for n, r in enumerate(rows):
            if r["project"] == proj:
                held[n] = r[idea][best]
    return [held[n] for n in range(len(rows))], chosen


def summarise(links: str, rows: list[dict[str, Any]], ideas: Sequence[str]) -> tuple[list[dict[str, Any]], dict]:
    """Table rows: baseline and each idea's pooled held-out recall@10, overall and per category."""
    table: list[dict[str, Any]] = []
    detail: dict[str, Any] = {}
    columns = {"baseline": [r["baseline"][OFF] for r in rows]}
    for p in rows[0]["ceiling"]:
        columns[f"ceiling: {p[0]}"] = [r["ceiling"][p] for r in rows]
    for idea in ideas:
        held, chosen = loco(rows, idea)
        columns[f"{idea} (held-out)"] = held
        grid = list(rows[0][idea])
        insample = {p: sum(r[idea][p] for r in rows) / len(rows) for p in grid}
        best = max(grid, key=lambda p: (round(insample[p], 9), -grid.index(p)))
        base = [r["baseline"][OFF] for r in rows]
        detail[idea] = {"chosen": {k: list(v) for k, v in chosen.items()},
                        "held_out_better_worse": [sum(h > b for h, b in zip(held, base, strict=True)),
                                                  sum(h < b for h, b in zip(held, base, strict=True))],
                        "in_sample_best": [list(best), round(insample[best], 4)],
                        "grid": [[list(p), round(v, 4)] for p, v in insample.items()]}
    for name, vals in columns.items():
        row: dict[str, Any] = {"links": links, "ranking": name, "n": len(vals)}
        row["all"] = round(sum(vals) / len(vals), 3)
        for cat, label in CATEGORIES.items():
            sub = [v for v, r in zip(vals, rows, strict=True) if r["category"] == cat]
            row[label] = round(sum(sub) / len(sub), 3) if sub else None
        table.append(row)
    counts = {label: sum(r["category"] == cat for r in rows) for cat, label in CATEGORIES.items()}
    table.append({"links": links, "ranking": "questions", "n": len(rows), **counts})
    return table, detail


def run(links: str, data: Path, work: Path, ideas: Sequence[str]) -> tuple[list[dict[str, Any]], dict]:
    settings, questions = build(data, work / f"quality-{links}", links)
    searcher = LabSearcher(settings)
    turn_ids = evidence_ids(searcher)
    where = {i: (s, t) for (_, s, t), i in turn_ids.items()}
    lab = Lab(searcher, where)
    rows: list[dict[str, Any]] = []
    t = time.monotonic()
    try:
        for q in questions:
            gold = {turn_ids[(q.project, s, t)] for s, t in q.evidence if (q.project, s, t) in turn_ids}
            if not gold:
                continue
            rows.append({"project": q.project, "category": q.category, **lab.question(q, gold, ideas)})
            if len(rows) % 100 == 0:
                print(f"[{links}] {len(rows)} questions, {time.monotonic() - t:.0f} s", flush=True)
    finally:
        searcher.close()
    print(f"[{links}] {len(rows)} questions in {time.monotonic() - t:.0f} s; lab order differs from the "
          f"search's page in {lab.mismatch} of {lab.checked}")
    table, detail = summarise(links, rows, ideas)
    detail["mismatch"] = lab.mismatch
    detail["questions"] = len(rows)
    return table, detail


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--links", default="turn", help=f"comma-separated, of {','.join(LINKS)} (default turn)")
    p.add_argument("--ideas", default=",".join(IDEAS), help=f"default {','.join(IDEAS)}")
    p.add_argument("--work", type=Path, default=ROOT / ".bench", help="parent of the quality-LINKS directories")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "ranking_lab.json")
    args = p.parse_args(argv)
    linkings = parse_list(args.links, LINKS, "links")
    ideas = parse_list(args.ideas, IDEAS, "ideas")
    table: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    for links in linkings:
        part, details[links] = run(links, args.data, args.work, ideas)
        table.extend(part)
        print_table(part)
        for idea in ideas:
            d = details[links][idea]
            print(f"[{links}] {idea}: chosen per held-out fold {d['chosen']}; in-sample best "
                  f"{d['in_sample_best']}; held-out questions better/worse {d['held_out_better_worse']}")
    print_table(table)
    write_json({"linkings": linkings, "ideas": ideas, "table": table, "details": details}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
