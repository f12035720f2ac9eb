"""The small hand-written smoke corpus format (tests/data/smoke_corpus.json):

    {"users": [<import document with "key"s>...], "catalog": [<catalog records>...],
     "questions": [{"user": "...", "q": "...", "gold": ["key", ...]}]}

Its questions are asked with ``engram.eval.runner.run_questions``, like the evaluation corpus's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engram.eval.runner import EvalQuestion, type_of
from engram.memory import Engram


def load_corpus(eng: Engram, path: Path) -> tuple[list[EvalQuestion], dict[str, str]]:
    """Import every user and the catalog; return the questions with gold keys resolved to ids."""
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ids: dict[str, str] = {}
    if doc.get("catalog"):
        ids.update(eng.import_json(doc["catalog"])["ids"])
    for user_doc in doc.get("users", []):
        ids.update(eng.import_json(user_doc)["ids"])
    questions = []
    for i, q in enumerate(doc.get("questions", [])):
        gold = [ids[k] for k in q["gold"]]
        questions.append(
            EvalQuestion(
                f"smoke-{i + 1:03d}", q["user"], q["q"], frozenset(gold), type_of(gold[0]), "para", "all"
            )
        )
    return questions, ids
