"""Knowledge updates and abstention: does recall find what is true *now*, and know when nothing is there?

Data: bench/data/updates.json, 28 users chatting with an assistant over 9-16 months while facts about them
change (a move, a new job, a new car, a correction...), with four kinds of questions asked after the last
turn: "current" (the present value of a changed fact; its outdated statements are "stale"), "past" (an
earlier value), "unchanged" and "never" (something the user never said: gold is empty). The set was
written blind to the retrieval code; 16 users are "dev", 12 "check" (held back to see over-fitting): the
first five dev users and the first three check users by one writer, dev users 6-11 later by another,
check users 4-7 (added 2026-12-03) by a third, dev users 12-16 (added the same day, later) by a fourth,
check users 8-12 (added 2026-12-04) by a fifth.

Each user's turns go in through the public API only (remember_turn with the turn's time and session), then
each question is recalled with as_of = its asked_at and record_use=False. With --with-facts the
hand-written consolidated facts (with supersession) are written too, interleaved with the turns by time;
no question passes include_superseded (a question about the past sees superseded facts by itself; until
2026-12-02 "past" questions passed it, which gave the same figures).

Figures, per kind and overall, with counts:
  current@1    share of "current" questions whose top hit is gold (a gold turn, or a gold fact)
  stale-above  share of "current" questions where a stale turn ranks above the best gold item (a stale
               turn in the top K with no gold there counts); stale@1: a stale turn ranked first
  R@1/5/10     share of the question's gold items in the top K, averaged; MRR on the first gold item
  abstention   answerable = kind != "never"; predicted answerable = top hit's confidence >= threshold
               (no hit: not answerable); balanced accuracy (TPR + TNR) / 2, AUROC of the top confidence,
               and the best balanced accuracy over all thresholds (for information)
  latency      recall p50 / p95

    python bench/updates.py                      # dev split, fresh SQLite store in a temp directory
    python bench/updates.py --split all --with-facts --json /tmp/updates.json --verbose
"""

import argparse
import json
import math
import tempfile
import time
from datetime import datetime
from pathlib import Path

import engram.settings
from engram import Engram

DATA = Path(__file__).parent / "data" / "updates.json"
RANKED = ("current", "past", "unchanged")


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def confidence(hit):
    value = getattr(hit, "confidence", None)
    return hit.score if value is None else value


def load_user(mem, user, with_facts):
    """Write the user's turns (and facts) in time order; return key -> row id."""
    events = [(ts(t["at"]), 0, t) for t in user["turns"]]
    if with_facts:
        events += [(ts(f["at"]), 1, f) for f in user.get("facts", [])]
    ids = {}
    for at, is_fact, item in sorted(events, key=lambda e: (e[0], e[1])):
        if not is_fact:
            ids[item["key"]] = mem.remember_turn(item["text"], at=at, session_id=item["session_id"]).id
            continue
        row = mem.write(
            item["text"],
            fact_type=item["fact_type"],
            supporting_episode_ids=[ids[k] for k in item["supporting"]],
            supersedes_id=ids[item["supersedes"]] if "supersedes" in item else None,
            contradiction=item.get("contradiction"),
            created_at=at,
        )
        ids[item["key"]] = row.id
    return ids


def evaluate(mem, user, ids, args):
    keys = {v: k for k, v in ids.items()}
    results = []
    for q in user["questions"]:
        gold = [ids[k] for k in q["gold"]]
        if args.with_facts:
            gold += [ids[k] for k in q.get("gold_facts", [])]
        stale = {ids[k] for k in q.get("stale", [])}
        start = time.perf_counter()
        # no include_superseded: a question about the past sees superseded facts by itself (pipeline.py)
        hits = mem.recall(q["query"], k=args.k, as_of=ts(q["asked_at"]), record_use=False)
        ms = (time.perf_counter() - start) * 1000
        order = [h.memory.id for h in hits]
        gold_ranks = [order.index(g) + 1 for g in gold if g in order]
        stale_ranks = [order.index(s) + 1 for s in stale if s in order]
        first_gold = min(gold_ranks) if gold_ranks else None
        first_stale = min(stale_ranks) if stale_ranks else None
        results.append(
            {
                "id": q["id"],
                "user": user["user_id"],
                "kind": q["kind"],
                "query": q["query"],
                "gold": gold,
                "first_gold": first_gold,
                "first_stale": first_stale,
                "recall": {
                    n: sum(r <= n for r in gold_ranks) / len(gold) if gold else None for n in (1, 5, 10)
                },
                "rr": 1 / first_gold if first_gold else 0.0,
                "stale_above": first_stale is not None and (first_gold is None or first_stale < first_gold),
                "top_confidence": confidence(hits[0]) if hits else None,
                "latency_ms": ms,
                "hits": [
                    {
                        "rank": h.rank,
                        "key": keys.get(h.memory.id, h.memory.id),
                        "score": h.score,
                        "confidence": confidence(h),
                        "memory_type": h.memory.memory_type,
                        "at": str(getattr(h, "event_time", None) or h.memory.created_at),
                        "text": h.memory.text,
                    }
                    for h in hits
                ],
            }
        )
    return results


def balanced_accuracy(pos, neg, threshold):
    tpr = sum(s >= threshold for s in pos) / len(pos) if pos else 0.0
    tnr = sum(s < threshold for s in neg) / len(neg) if neg else 0.0
    return (tpr + tnr) / 2, tpr, tnr


def auroc(pos, neg):
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else float("nan")


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def summarize(results, threshold):
    figures = {"ranking": {}}
    for kind in (*RANKED, "answerable"):
        rows = [r for r in results if (r["kind"] == kind if kind != "answerable" else r["kind"] != "never")]
        figures["ranking"][kind] = {
            "n": len(rows),
            **{f"R@{n}": mean([r["recall"][n] for r in rows]) for n in (1, 5, 10)},
            "MRR": mean([r["rr"] for r in rows]),
        }
    current = [r for r in results if r["kind"] == "current"]
    figures["current"] = {
        "n": len(current),
        "current@1": sum(r["first_gold"] == 1 for r in current),
        "stale_above": sum(r["stale_above"] for r in current),
        "stale@1": sum(r["first_stale"] == 1 for r in current),
    }
    score = [-math.inf if r["top_confidence"] is None else r["top_confidence"] for r in results]
    pos = [s for s, r in zip(score, results, strict=True) if r["kind"] != "never"]
    neg = [s for s, r in zip(score, results, strict=True) if r["kind"] == "never"]
    ba, tpr, tnr = balanced_accuracy(pos, neg, threshold)
    best = max((balanced_accuracy(pos, neg, t)[0], t) for t in {*score, math.inf})
    figures["abstention"] = {
        "threshold": threshold,
        "answerable": len(pos),
        "never": len(neg),
        "TPR": tpr,
        "TNR": tnr,
        "balanced_accuracy": ba,
        "AUROC": auroc(pos, neg),
        "best_balanced_accuracy": best[0],
        "best_threshold": best[1],
    }
    latencies = [r["latency_ms"] for r in results]
    figures["latency_ms"] = {
        "n": len(latencies),
        "p50": percentile(latencies, 0.5),
        "p95": percentile(latencies, 0.95),
    }
    return figures


def report(figures):
    print(f"\n{'kind':<11}{'n':>5}{'R@1':>8}{'R@5':>8}{'R@10':>8}{'MRR':>8}")
    for kind, f in figures["ranking"].items():
        print(f"{kind:<11}{f['n']:>5}{f['R@1']:>8.3f}{f['R@5']:>8.3f}{f['R@10']:>8.3f}{f['MRR']:>8.3f}")
    c = figures["current"]
    n = c["n"] or 1
    for name in ("current@1", "stale_above", "stale@1"):
        print(f"{name:<12} {c[name]:>3}/{c['n']:<3} = {c[name] / n:.3f}")
    a = figures["abstention"]
    print(
        f"abstention   threshold {a['threshold']:.3f}: TPR {a['TPR']:.3f} (of {a['answerable']}), "
        f"TNR {a['TNR']:.3f} (of {a['never']}), balanced accuracy {a['balanced_accuracy']:.3f}"
    )
    auc = "n/a" if a["AUROC"] is None else f"{a['AUROC']:.3f}"
    print(
        f"             AUROC {auc}; best balanced accuracy {a['best_balanced_accuracy']:.3f} "
        f"at threshold {a['best_threshold']:.4f}"
    )
    lat = figures["latency_ms"]
    print(f"latency      p50 {lat['p50']:.0f} ms, p95 {lat['p95']:.0f} ms over {lat['n']} recalls")


def failed(r, threshold):
    answered = r["top_confidence"] is not None and r["top_confidence"] >= threshold
    if r["kind"] == "never":
        return answered
    return r["first_gold"] != 1 or r["stale_above"]


def main():
    default_min = getattr(engram.settings, "DEFAULT_MIN_CONFIDENCE", 0.5)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=("dev", "check", "all"), default="dev")
    p.add_argument("--data", type=Path, default=DATA, help="a set in the same format (default: %(default)s)")
    p.add_argument("--store", help="URL of an empty store (default: a fresh SQLite file in a temp directory)")
    p.add_argument("--with-facts", action="store_true", help="also write the consolidated facts")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--min-confidence", type=float, default=default_min, help="abstention threshold")
    p.add_argument("--json", help="write every figure and the per-question results here")
    p.add_argument("--verbose", action="store_true", help="print failed questions with their top 5 hits")
    args = p.parse_args()

    users = [
        u
        for u in json.loads(args.data.read_text(encoding="utf-8"))["users"]
        if args.split == "all" or u["split"] == args.split
    ]
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{Path(tmp) / 'updates.db'}"
        results = []
        with Engram.open(url) as eng:
            for user in users:
                mem = eng.for_user(user["user_id"])
                start = time.perf_counter()
                ids = load_user(mem, user, args.with_facts)
                elapsed = time.perf_counter() - start
                print(f"{user['user_id']:<8} {len(ids):>4} rows written in {elapsed:.1f} s")
                results += evaluate(mem, user, ids, args)
    figures = summarize(results, args.min_confidence)
    print(
        f"\nsplit={args.split} users={len(users)} questions={len(results)} k={args.k} "
        f"with_facts={args.with_facts}"
    )
    report(figures)
    if args.verbose:
        for r in (r for r in results if failed(r, args.min_confidence)):
            print(
                f"\n[{r['kind']}] {r['id']}: {r['query']}  (first gold rank {r['first_gold']}, "
                f"first stale rank {r['first_stale']}, top confidence {r['top_confidence'] or 0:.3g})"
            )
            for h in r["hits"][:5]:
                print(
                    f"  {h['rank']:>2} {h['score']:<9.3g} {h['confidence']:<9.3g} {h['at'][:16]} "
                    f"{h['key']:<5} {h['text'][:110]}"
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "figures": figures, "questions": results}, indent=1, default=str),
            encoding="utf-8",
        )
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
