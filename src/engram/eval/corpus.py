"""A corpus file: users' import documents, a catalog and questions whose gold answers are keys.

{"users": [<import document with "key"s>...], "catalog": [<catalog records>...],
 "questions": [{"user": "...", "q": "...", "gold": ["key", ...]}]}
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.eval.metrics import first_gold_rank, mean_reciprocal_rank, recall_at_k
from engram.memory import Engram
from engram.retrieval.config import RetrievalConfig


@dataclass(frozen=True)
class Question:
    user: str
    text: str
    gold: frozenset[str]  # memory ids


def load_corpus(eng: Engram, path: Path) -> tuple[list[Question], dict[str, str]]:
    """Import every user and the catalog; return the questions with gold keys resolved to ids."""
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ids: dict[str, str] = {}
    if doc.get("catalog"):
        ids.update(eng.import_json(doc["catalog"])["ids"])
    for user_doc in doc.get("users", []):
        ids.update(eng.import_json(user_doc)["ids"])
    questions = [
        Question(user=q["user"], text=q["q"], gold=frozenset(ids[k] for k in q["gold"]))
        for q in doc.get("questions", [])
    ]
    return questions, ids


def evaluate(
    eng: Engram, questions: list[Question], config: RetrievalConfig | None = None, k: int = 10
) -> dict[str, Any]:
    """Run each question through the public API; R@1/5/10, MRR, latency and any foreign hits."""
    ranks: list[int | None] = []
    latencies: list[float] = []
    foreign = 0
    for q in questions:
        start = time.perf_counter()
        hits = eng.for_user(q.user).recall(q.text, k=k, config=config, record_use=False)
        latencies.append(time.perf_counter() - start)
        foreign += sum(1 for h in hits if h.memory.user_id not in (q.user, None))
        ranks.append(first_gold_rank([h.memory.id for h in hits], q.gold))
    latencies.sort()
    return {
        "questions": len(questions),
        "r_at_1": recall_at_k(ranks, 1),
        "r_at_5": recall_at_k(ranks, 5),
        "r_at_10": recall_at_k(ranks, 10),
        "mrr": mean_reciprocal_rank(ranks),
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else 0.0,
        "p95_ms": 1000 * latencies[int(len(latencies) * 0.95)] if latencies else 0.0,
        "leaks": foreign,
        "ranks": ranks,
    }
