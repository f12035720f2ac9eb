"""Ablation (not a test): each retrieval stage's contribution on the smoke corpus plus distractors.

    python bench/ablation.py [--distractors 1000] [--json bench/results/ablation.json]

Stages, from engram.retrieval.recipes.ABLATION: BM25 alone, dense alone, hybrid (RRF), + cross-encoder,
+ scoring without the playbook success prior, + scoring (everything, the default).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rerank_window import ROOT, distractors

from engram import Engram
from engram.eval.corpus import load_corpus
from engram.eval.runner import run_questions
from engram.retrieval.recipes import ABLATION


def main() -> None:
    parser = argparse.ArgumentParser(description="retrieval ablation")
    parser.add_argument("--distractors", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(7)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Engram.open(f"sqlite:///{tmp}/ablation.db") as eng:
        questions, _ = load_corpus(eng, ROOT / "tests" / "data" / "smoke_corpus.json")
        for user in sorted({q.user for q in questions}):
            eng.import_json(distractors(user, args.distractors, rng))
        print(f"{len(questions)} questions, {args.distractors} distractor turns per user")
        print(f"{'stage':<32} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} {'p50 ms':>8}")
        for name, config in ABLATION.items():
            r = run_questions(eng, questions, config)
            rows.append(
                {"stage": name, **{k: v for k, v in r.items() if k not in ("misses", "per_type", "per_kind")}}
            )
            print(
                f"{name:<32} {r['r_at_1']:>6.3f} {r['r_at_5']:>6.3f} {r['r_at_10']:>6.3f} {r['mrr']:>6.3f} "
                f"{r['latency_p50_ms']:>8.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
