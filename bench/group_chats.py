"""Group-chat benchmark (not a test): recall in conversations of two to four people.

``bench/data/group_chats.json`` holds four conversations (two friends, a work group chat of three, a
family of four, a patient with her doctor and a nurse; 726 turns, 130 questions), written for Engram
by a helper who never saw its retrieval code, with the turn-level evidence of each question. Question
kinds: ``about_person`` (what a named person did or likes), ``told_by_other`` (the answer was said by
someone other than the person named), ``no_name``, ``inference`` and ``agent_voice`` (third person,
pronouns, none of the stored words). Each conversation is one tenant in a fresh SQLite store; each
turn one episode at its time, in its session. Variants say how a turn's speaker reaches Engram:

- ``metadata``: the text as written, the speaker in ``metadata["speaker"]`` (the API's way);
- ``prefix``: the text as a transcript line, ``"Priya: ..."``, with no metadata;
- ``none``: the text alone (who said it is lost);
- ``...,boost=X``: the same with ``ENGRAM_SPEAKER_MATCH_BOOST`` = X (1.0 switches speaker match off).

    python bench/group_chats.py [--variant metadata --variant prefix,boost=1.0 ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from locomo import print_table, record, summarise

from engram import Engram
from engram.storage.sqlite import SQLiteStore

DATA = Path(__file__).resolve().parent / "data" / "group_chats.json"
KINDS = ("about_person", "told_by_other", "no_name", "inference", "agent_voice")


def episode(turn: dict[str, Any], speaker: str) -> dict[str, Any]:
    record = {
        "key": turn["key"],
        "text": turn["text"],
        "timestamp": turn["at"],
        "session_id": turn["session"],
    }
    if speaker == "metadata":
        record["metadata"] = {"speaker": turn["speaker"]}
    elif speaker == "prefix":
        record["text"] = f"{turn['speaker']}: {turn['text']}"
    return record


def run(eng: Engram, conversations: list[dict[str, Any]], variant: str, tmp: Path) -> dict[str, Any]:
    speaker, _, boost = variant.partition(",boost=")
    config = eng.config.but(speaker_match_boost=float(boost)) if boost else None
    values: dict[str, list[float]] = defaultdict(list)
    for conversation in conversations:
        store = SQLiteStore(tmp / f"{variant}-{conversation['id']}.db")
        with Engram(
            store, eng.embedder, eng.reranker, token_encoder=eng.token_encoder, settings=eng.settings
        ) as e:
            records = [episode(t, speaker) for t in conversation["turns"]]
            ids = e.import_json({"user_id": "group", "episodic": records})["ids"]
            key_of = {v: k for k, v in ids.items()}
            present = max(datetime.fromisoformat(t["at"]) for t in conversation["turns"])
            mem = e.for_user("group")
            for q in conversation["questions"]:
                gold = set(q["gold"])
                started = time.perf_counter()
                hits = mem.recall(q["q"], k=10, config=config, record_use=False, as_of=present)
                record(values, q["kind"], gold, [key_of.get(h.memory.id) for h in hits], started)
    return summarise(values, KINDS)


def main() -> None:
    parser = argparse.ArgumentParser(description="Group-chat recall benchmark (turn-level evidence)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--variant", action="append", help="metadata | prefix | none [,boost=X]; repeatable")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    conversations = json.loads(args.data.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        base = Engram.open(str(Path(tmp) / "base.db"))
        try:
            results = {v: run(base, conversations, v, Path(tmp)) for v in args.variant or ["metadata"]}
        finally:
            base.close()
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
