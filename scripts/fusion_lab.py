"""The relevance model's data and its ablation on the LoCoMo dev set, leave-one-conversation-out.

    .venv/bin/python -m scripts.fusion_lab dump [--provider local] [--links turn,session-end,none]
    .venv/bin/python -m scripts.fusion_lab ablation [--dump FILE] [--nested] [--out FILE]
    .venv/bin/python -m scripts.fusion_lab cutoff [--dump FILE] [--out FILE]

``dump`` asks every question of categories 1-4 as ``bench_quality`` asks it (hybrid, its project, all
time, prompts only), and in the linkings whose links say which turn an observation came from
(``turn``, and ``none``, which has no observations) once more over every kind, through the shipped
``Searcher``; it keeps what the relevance model reads of each search's fused top
``relevance.DEPTH`` (the ingredients, ``search.relevance.features``) and whether each candidate is
relevant: an evidence turn, an observation recorded under one, a summary of a session holding one.
No text is written: the dump is committed (``tests/data/relevance/``) and ``make test`` checks that
the shipped model is what ``memsync.search.relevance.fit`` makes of it.

``ablation`` refits the model once per held-out conversation on the other four (all linkings at
once), with each idea's features taken out in turn, and reports the pooled held-out recall@10 of the
prompt searches per linking and category (beside the fused order as shipped before, and the
whole-set fit), and the reliability of the confidence on the held-out folds (10 bins, the top 10 of
every search): the table in docs/benchmarks.md. ``--nested`` adds the honest check of the choices
made by reading that table (which ideas to keep, the L2 penalty): each made again per held-out
conversation from the other four alone.

``cutoff`` chooses the lists' ``min_confidence`` the same way: per held-out conversation, the
largest threshold that keeps ``KEEP`` of the evidence the top 10 holds on the other four (held-out
confidences there too), then reports on the held-out one what share of the evidence its top 10
keeps, what share of the rest it hides, and how many results a list shows.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memsync.config.claude_mem.schema import Kind
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.engine import LexicalAnswer, LinkedAnswer
from memsync.search.hydrate import PageEntry
from memsync.search.relevance import DEPTH
from memsync.search.relevance.features import COL, FEATURES, Matrix
from memsync.search.relevance.fit import L2, LEXICAL_FEATURES, feature_matrix, fit, without_dense
from memsync.search.semantic import SemanticAnswer
from memsync.search.sql import SourceRows
from scripts.bench_quality import CATEGORIES, build, evidence_ids, parse_list
from scripts.benchlib import ROOT, print_table, write_json
from scripts.locomo import DEFAULT_DATA, LINKS

MIXED_LINKS = ("turn", "none")  # observations' links name their evidence turn (or there are none)
TOP = 10
KEEP = 0.99  # a list hides at most one in a hundred of the results a person would have read: --all shows the rest
THRESHOLDS = tuple(round(0.005 * i, 3) for i in range(1, 61))  # 0.005 .. 0.3
# Each idea and the features it adds (the ablation takes them out together).
IDEAS: dict[str, tuple[str, ...]] = {
    "neighbours in the session": ("near_2", "near_3", "near_2_x_similarity", "near_2_x_fused"),
    "prompt length": ("prompt_length",),
    "session support": ("session_support",),
    "squares": ("fused_squared", "similarity_squared", "near_2_squared"),
    "cosine and its gap": ("similarity", "similarity_gap", "near_2_x_similarity"),
    "log ranks": ("lexical_log_rank", "semantic_log_rank"),
    "fused sum and its gap": ("fused", "fused_gap", "near_2_x_fused"),
}
ALL_KINDS = [Kind.PROMPT, Kind.OBSERVATION, Kind.SUMMARY]


class DumpSearcher(Searcher):
    """The shipped searcher in fused order, keeping the relevance model's ingredients of its last search."""

    captured: tuple[list[PageEntry], Matrix] | None = None

    def _rank(self, rows: SourceRows, entries: list[PageEntry], lex: LexicalAnswer, sem: SemanticAnswer,
              linked: LinkedAnswer, reorder: bool = True) -> list[PageEntry]:
        head = entries[:DEPTH]
        self.captured = (head, self._ingredients(rows, head, lex, sem, linked))
        return entries


def dump_linking(links: str, data: Path, work: Path, provider: str, first: int) -> dict[str, list[Any]]:
    """Every question's searches in one linking: ingredient rows and their labels."""
    suffix = "" if provider == "local" else f"-{provider}"
    settings, questions = build(data, work / f"quality-{links}{suffix}", links, provider)
    s = DumpSearcher(settings)
    turn_ids = evidence_ids(s)
    projects = sorted({q.project for q in questions})
    rows = s._rows()  # noqa: SLF001 - the lab reads the same database
    try:
        where = rows.positions([(Kind.PROMPT, i) for i in turn_ids.values()])
    finally:
        rows.close()
    out: dict[str, list[Any]] = {k: [] for k in ("ingredients", "label", "search", "group", "setting",
                                                 "category", "evidence")}
    n, t = first, time.monotonic()
    for q in questions:
        gold = {turn_ids[(q.project, a, b)] for a, b in q.evidence if (q.project, a, b) in turn_ids}
        if not gold:
            continue
        turns = {where[(Kind.PROMPT, i)][:2] for i in gold if (Kind.PROMPT, i) in where}
        sessions = {sess for sess, _ in turns}
        for mixed in (False, True) if links in MIXED_LINKS else (False,):
            req = SearchRequest(query=q.question, kinds=ALL_KINDS if mixed else [Kind.PROMPT],
                                filters=Filters(project=q.project), window_days=0, limit=20, mode=Mode.HYBRID,
                                show_all=True)
            resp = s.search(req)
            if resp.mode is not Mode.HYBRID:
                raise SystemExit(f"hybrid answered as {resp.mode.value}: {resp.reason}")
            assert s.captured is not None
            head, ing = s.captured
            for e, row in zip(head, ing, strict=True):
                kind = e.key[0]
                place = (int(row[COL["session"]]), int(row[COL["number"]]))
                label = (e.key[1] in gold if kind is Kind.PROMPT else place in turns if kind is Kind.OBSERVATION
                         else place[0] in sessions)
                out["ingredients"].append(row)
                out["label"].append(float(label))
            size = len(head)
            out["search"].extend([n] * size)
            out["group"].extend([projects.index(q.project)] * size)
            out["setting"].extend([LINKS.index(links) * 2 + int(mixed)] * size)
            out["category"].extend([q.category] * size)
            out["evidence"].extend([len(gold)] * size)
            n += 1
        if n % 400 < 2:
            print(f"[{links}] {n - first} searches, {time.monotonic() - t:.0f} s", flush=True)
    s.close()
    print(f"[{links}] {n - first} searches in {time.monotonic() - t:.0f} s", flush=True)
    return out


def dump(args: argparse.Namespace) -> int:
    parts: dict[str, list[Any]] = {}
    first = 0
    for links in parse_list(args.links, LINKS, "links"):
        got = dump_linking(links, args.data, args.work, args.provider, first)
        first = max(got["search"]) + 1
        for k, v in got.items():
            parts.setdefault(k, []).extend(v)
    out = args.out or ROOT / "tests" / "data" / "relevance" / f"{args.provider}.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {k: np.array(parts[k], dtype=np.int32)
                              for k in ("search", "group", "setting", "category", "evidence")}
    arrays["ingredients"] = np.array(parts["ingredients"], dtype=np.float32)
    arrays["label"] = np.array(parts["label"], dtype=np.int8)
    np.savez_compressed(out, **arrays)
    print(f"wrote {out}: {len(parts['label'])} candidates of {first} searches, {out.stat().st_size} bytes")
    return 0


def recall_at(score: np.ndarray, label: np.ndarray, search: np.ndarray, k: int = TOP) -> dict[int, float]:
    """Per search: the relevant candidates within the top ``k`` by ``score`` (ties: the dump's order,
    which is the fused order)."""
    hits: dict[int, float] = {}
    for s in np.unique(search):
        rows = np.flatnonzero(search == s)
        order = rows[np.argsort(-score[rows], kind="stable")]
        hits[int(s)] = float(label[order[:k]].sum())
    return hits


def held_out(x: Matrix, y: np.ndarray, group: np.ndarray, names: Sequence[str], l2: float = L2) -> np.ndarray:
    """Each candidate's confidence from the model fitted on the other conversations."""
    out = np.zeros(len(y))
    for g in np.unique(group):
        model = fit(x[group != g], y[group != g], "fold", tuple(names), l2)
        out[group == g] = model.probability(x[group == g])
    return out


def prompt_recall(score: np.ndarray, y: np.ndarray, search: np.ndarray, setting: np.ndarray,
                  evidence: np.ndarray, rows: np.ndarray) -> float:
    """Mean recall@10 of the prompt searches among ``rows`` (all linkings pooled)."""
    keep = rows[setting[rows] % 2 == 0]
    hits = recall_at(score[keep], y[keep], search[keep])
    first = {int(s): i for i, s in reversed(list(enumerate(search[keep])))}
    return float(np.mean([h / evidence[keep][first[s]] for s, h in hits.items()]))


def nested(x: Matrix, y: np.ndarray, d: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[int, Any]]:
    """Held-out confidences with the feature set (all, or all but one idea) and the L2 penalty
    chosen per held-out conversation by a leave-one-conversation-out inside the other four: no
    choice sees the conversation it is scored on."""
    group, search, setting, evidence = d["group"], d["search"], d["setting"], d["evidence"]
    configs = [(name, tuple(f for f in FEATURES if f not in drop), l2)
               for name, drop in {"all": (), **{f"without {k}": v for k, v in IDEAS.items()}}.items()
               for l2 in (0.1, 1.0, 10.0)]
    out = np.zeros(len(y))
    chosen: dict[int, Any] = {}
    for g in np.unique(group):
        train = np.flatnonzero(group != g)
        best = max(configs, key=lambda c: prompt_recall(held_out(x[train], y[train], group[train], c[1], c[2]),
                                                         y[train], search[train], setting[train], evidence[train],
                                                         np.arange(len(train))))
        chosen[int(g)] = [best[0], best[2]]
        test = group == g
        out[test] = fit(x[train], y[train], "fold", best[1], best[2]).probability(x[test])
        print(f"fold {g}: chose {best[0]}, L2 {best[2]}", flush=True)
    return out, chosen


def lexical_fallback(ing: Matrix, y: np.ndarray, d: Any) -> dict[str, Any]:
    """The lexical model as a search without the dense side reads it: the candidates a lexical list
    holds, the dense ingredients taken away; held-out recall@10 of the prompt searches against the
    lexical fusion's own order, and the reliability of its top 10."""
    keep = (ing[:, COL["lexical_rank"]] >= 0) | (ing[:, COL["linked_lexical_rank"]] >= 0)
    bare = without_dense(ing[keep])
    search, group, setting, evidence = (d[k][keep] for k in ("search", "group", "setting", "evidence"))
    x = feature_matrix(bare, search)
    held = held_out(x, y[keep], group, LEXICAL_FEATURES)
    rows = np.arange(len(held))
    fused = x[:, FEATURES.index("fused")]
    before = prompt_recall(fused, y[keep], search, setting, evidence, rows)
    after = prompt_recall(held, y[keep], search, setting, evidence, rows)
    top = np.zeros(len(held), dtype=bool)
    for s in np.unique(search):
        r = np.flatnonzero(search == s)
        top[r[np.argsort(-held[r], kind="stable")[:TOP]]] = True
    err, rel = reliability(held[top], y[keep][top])
    print(f"lexical fallback: recall@10 of prompt searches (all linkings) {before:.3f} fused -> {after:.3f} "
          f"model (held-out); ECE {err:.4f} (top {TOP})")
    print_table(rel)
    return {"recall@10 fused": round(before, 3), "recall@10 model": round(after, 3), "ece": round(err, 4),
            "table": rel}


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 10) -> tuple[float, list[dict[str, Any]]]:
    """Expected calibration error over equal-width bins, and the table."""
    table: list[dict[str, Any]] = []
    err = 0.0
    for b in range(bins):
        m = (p >= b / bins) & ((p < (b + 1) / bins) if b < bins - 1 else (p <= 1.0))
        if m.any():
            err += m.sum() / len(p) * abs(float(p[m].mean()) - float(y[m].mean()))
            table.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "n": int(m.sum()),
                          "confidence": round(float(p[m].mean()), 3), "relevant": round(float(y[m].mean()), 3)})
    return err, table


def ablation(args: argparse.Namespace) -> int:
    d = np.load(args.dump)
    ing, y = d["ingredients"].astype(np.float64), d["label"].astype(np.float64)
    search, group, setting, category, evidence = (d[k] for k in ("search", "group", "setting", "category",
                                                                  "evidence"))
    t = time.monotonic()
    x = feature_matrix(ing, search)
    print(f"features of {len(y)} candidates in {time.monotonic() - t:.1f} s")
    prompt_only = setting % 2 == 0
    first = {int(s): i for i, s in reversed(list(enumerate(search)))}
    fused_order = -np.arange(len(y), dtype=np.float64)  # the dump keeps each search's fused order
    variants: dict[str, np.ndarray] = {"fused (before)": fused_order}
    variants["model, whole set (in-sample)"] = fit(x, y, "all").probability(x)
    held = held_out(x, y, group, FEATURES)
    variants["model (held-out)"] = held
    for idea, names in IDEAS.items():
        keep = [f for f in FEATURES if f not in names]
        variants[f"model without {idea} (held-out)"] = held_out(x, y, group, keep)
    chosen: dict[int, Any] = {}
    if args.nested:
        variants["model, features and L2 chosen per fold (nested)"], chosen = nested(x, y, dict(d))
    table: list[dict[str, Any]] = []
    for name, score in variants.items():
        hits = recall_at(score, y, search)
        for li, links in enumerate(LINKS):
            ids = [s for s in hits if setting[first[s]] == li * 2]
            if not ids:
                continue
            row: dict[str, Any] = {"links": links, "ranking": name, "n": len(ids)}
            rec = {s: hits[s] / evidence[first[s]] for s in ids}
            row["all"] = round(float(np.mean(list(rec.values()))), 3)
            for cat, label in CATEGORIES.items():
                sub = [rec[s] for s in ids if category[first[s]] == cat]
                row[label] = round(float(np.mean(sub)), 3) if sub else None
            table.append(row)
    print_table(table)
    top = np.zeros(len(y), dtype=bool)
    for s in np.unique(search):
        rows = np.flatnonzero(search == s)
        top[rows[np.argsort(-held[rows], kind="stable")[:TOP]]] = True
    calib: dict[str, Any] = {}
    for name, mask in (("prompts", top & prompt_only), ("every kind", top & ~prompt_only), ("all", top)):
        err, rel = reliability(held[mask], y[mask])
        calib[name] = {"ece": round(err, 4), "table": rel}
        print(f"reliability, held-out top {TOP} ({name}): ECE {err:.4f}")
        print_table(rel)
    calib["lexical fallback"] = lexical_fallback(ing, y, d)
    write_json({"dump": str(args.dump), "l2": L2, "table": table, "calibration": calib, "nested_choices": chosen},
               args.out)
    return 0


def shown_top(held: np.ndarray, search: np.ndarray, setting: np.ndarray) -> np.ndarray:
    """The candidates a list's first page holds: the top 10 of each search in the order the engine
    gives it (prompt searches by confidence, searches over every kind in fused order)."""
    top = np.zeros(len(held), dtype=bool)
    for s in np.unique(search):
        rows = np.flatnonzero(search == s)
        order = rows[np.argsort(-held[rows], kind="stable")] if setting[rows[0]] % 2 == 0 else rows
        top[order[:TOP]] = True
    return top


def cutoff_effect(held: np.ndarray, y: np.ndarray, search: np.ndarray, top: np.ndarray,
                  t: float | np.ndarray) -> dict[str, Any]:
    """What a threshold (one, or one per candidate) does to the first pages ``top``: the share of
    their evidence kept, the share of the rest hidden, results shown per list, empty lists."""
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), held.shape)
    rel, non = top & (y == 1), top & (y == 0)
    ids = np.unique(search[top])
    shown = np.bincount(search[top & (held >= t)], minlength=int(search.max()) + 1)[ids]
    return {"evidence kept": round(float((held[rel] >= t[rel]).mean()), 3),
            "others hidden": round(float((held[non] < t[non]).mean()), 3),
            "mean shown": round(float(shown.mean()), 2), "empty lists": round(float((shown == 0).mean()), 3)}


def largest_keeping(conf: np.ndarray, y: np.ndarray, top: np.ndarray) -> float:
    """The largest threshold of ``THRESHOLDS`` that keeps ``KEEP`` of the evidence the first pages hold."""
    kept = conf[top & (y == 1)]
    return max((t for t in THRESHOLDS if (kept >= t).mean() >= KEEP), default=THRESHOLDS[0])


def cutoff(args: argparse.Namespace) -> int:
    d = np.load(args.dump)
    ing, y = d["ingredients"].astype(np.float64), d["label"].astype(np.float64)
    search, group, setting = d["search"], d["group"], d["setting"]
    x = feature_matrix(ing, search)
    held, chosen = np.zeros(len(y)), np.zeros(len(y))
    for g in np.unique(group):
        train, test = np.flatnonzero(group != g), group == g
        inner = held_out(x[train], y[train], group[train], FEATURES)  # the choice sees no held-out confidence
        chosen[test] = largest_keeping(inner, y[train], shown_top(inner, search[train], setting[train]))
        held[test] = fit(x[train], y[train], "fold").probability(x[test])
        print(f"fold {g}: chose {chosen[test][0]}", flush=True)
    top = shown_top(held, search, setting)
    rows = [{"held out": int(g), "min_confidence": float(chosen[group == g][0]),
             **cutoff_effect(held, y, search, top & (group == g), chosen)} for g in np.unique(group)]
    rows.append({"held out": "pooled", "min_confidence": "per fold", **cutoff_effect(held, y, search, top, chosen)})
    grid = [{"min_confidence": t, **cutoff_effect(held, y, search, top, t)}
            for t in (0.01, 0.02, 0.03, 0.035, 0.05, 0.1, 0.2)]
    whole = fit(x, y, "all").probability(x)
    ship = largest_keeping(whole, y, shown_top(whole, search, setting))
    print_table(rows)
    print("each threshold on the held-out confidences:")
    print_table(grid)
    print(f"the same rule on the whole set (what ships): {ship}")
    write_json({"dump": str(args.dump), "keep": KEEP, "folds": rows, "grid": grid, "whole set": ship}, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("dump", help="the feature dump of the dev set")
    d.add_argument("--data", type=Path, default=DEFAULT_DATA)
    d.add_argument("--links", default=",".join(LINKS))
    d.add_argument("--provider", default="local", choices=("local", "local-multilingual"))
    d.add_argument("--work", type=Path, default=ROOT / ".bench")
    d.add_argument("--out", type=Path, help="default tests/data/relevance/PROVIDER.npz")
    a = sub.add_parser("ablation", help="held-out recall and reliability, each idea on and off")
    a.add_argument("--dump", type=Path, default=ROOT / "tests" / "data" / "relevance" / "local.npz")
    a.add_argument("--out", type=Path, default=ROOT / ".bench" / "relevance_ablation.json")
    a.add_argument("--nested", action="store_true",
                   help="also choose the feature set and L2 per fold inside the other four (a few minutes)")
    c = sub.add_parser("cutoff", help="the lists' min_confidence, chosen leave-one-conversation-out")
    c.add_argument("--dump", type=Path, default=ROOT / "tests" / "data" / "relevance" / "local.npz")
    c.add_argument("--out", type=Path, default=ROOT / ".bench" / "relevance_cutoff.json")
    args = p.parse_args(argv)
    return {"dump": dump, "ablation": ablation, "cutoff": cutoff}[args.what](args)


if __name__ == "__main__":
    raise SystemExit(main())
