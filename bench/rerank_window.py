"""Quality vs latency of the cross-encoder window (not a test).

Loads the hand-written smoke corpus (tests/data/smoke_corpus.json) plus synthetic distractor turns
for each user (so that windows of 40-80 candidates hold real competition), then runs every question
at several rerank windows and prints R@1, R@5, MRR and recall latency p50/p95.

    python bench/rerank_window.py [--distractors 300] [--windows 0 10 20 40 80] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from engram import Engram
from engram.eval.corpus import load_corpus
from engram.eval.runner import run_questions
from engram.retrieval.config import RetrievalConfig

ROOT = Path(__file__).resolve().parents[1]
SUBJECTS = [
    "the boiler",
    "my sister",
    "the car",
    "work",
    "the weather",
    "dinner",
    "the garden",
    "my laptop",
    "the landlord",
    "our neighbours",
    "the bus",
    "the budget",
    "the kids' school",
    "a podcast",
    "the new phone",
    "the washing machine",
    "my knee",
    "the football",
    "the bank",
    "a film",
]
VERBS = [
    "is acting up again",
    "was great today",
    "keeps bugging me",
    "needs sorting before friday",
    "cost way more than expected",
    "made me laugh",
    "is on my mind",
    "broke down on monday",
    "was a total mess",
    "seems fine now",
    "got cancelled",
    "needs a call tomorrow",
]
TAILS = ["", " lol", ", any ideas?", " - whatever", ", remind me later", ". ugh", " tbh", ", not urgent"]


def distractors(user: str, n: int, rng: random.Random) -> dict:
    turns = {f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)}{rng.choice(TAILS)}" for _ in range(n * 3)}
    texts = sorted(turns)[:n]
    rng.shuffle(texts)
    return {"user_id": user, "episodic": [{"text": t, "days_ago": rng.uniform(0, 700)} for t in texts]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distractors", type=int, default=300)
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 10, 20, 40, 80])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp, Engram.open(f"sqlite:///{tmp}/bench.db") as eng:
        questions, _ = load_corpus(eng, ROOT / "tests" / "data" / "smoke_corpus.json")
        for user in sorted({q.user for q in questions}):
            eng.import_json(distractors(user, args.distractors, rng))
        run_questions(eng, questions[:3])  # warm-up
        rows = []
        print(f"{len(questions)} questions, {args.distractors} distractor turns per user")
        print(f"{'window':>6} {'R@1':>6} {'R@5':>6} {'MRR':>6} {'p50 ms':>8} {'p95 ms':>8}")
        for window in args.windows:
            config = RetrievalConfig(rerank=window > 0, rerank_window=window)
            r = run_questions(eng, questions, config)
            rows.append(
                {
                    "window": window,
                    **{k: v for k, v in r.items() if k not in ("misses", "per_type", "per_kind")},
                }
            )
            print(
                f"{window:>6} {r['r_at_1']:>6.3f} {r['r_at_5']:>6.3f} {r['mrr']:>6.3f} "
                f"{r['latency_p50_ms']:>8.1f} {r['latency_p95_ms']:>8.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
