"""LoCoMo development benchmark (not a test): turn-level evidence retrieval on real long conversations.

Reads ``../shared/data/locomo-dev.json`` (five LoCoMo conversations, CC BY-NC: read in place, never
copied into this repository; format and protocol in ../shared/data/README.md). Each conversation is one
tenant in a fresh store; each turn is one episodic memory ("Speaker: text", plus " [image: caption]")
at its session's date, with its session as ``session_id``. Every question of categories 1-4 is recalled
through the public API (``record_use=False``, ``as_of`` = the end of the conversation, so time decay
sees the conversation's present, not today's date). R@K is the share of a question's gold turns among
the top K, averaged over questions; MRR uses the first gold turn.

    python bench/locomo.py [--preset default --preset no-rerank ...] [--conversations 2]
                           [--store sqlite|postgres|opensearch] [--os-heap 1g] [--data PATH]
                           [--json bench/results/locomo.json]

--store opensearch starts one OpenSearch 2.19 test node for the run (tests/opensearch_node, through
bench/os_node.py: java 17, mvn, openssl) and gives each conversation its own index prefix on it.

Presets: see PRESETS below; ``default`` is the pipeline Engram ships with.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram import Engram
from engram.providers.onnx import OnnxEmbedder, OnnxTokenEncoder
from engram.providers.onnx_rerank import OnnxCrossEncoder
from engram.retrieval import recipes
from engram.retrieval.config import RetrievalConfig
from engram.settings import EngramSettings
from engram.storage.base import Store
from engram.storage.sqlite import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from os_node import BenchNode, opensearch_node  # bench scripts run as files, not as a package

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TURN_SPACING = timedelta(seconds=30)  # turns of one session, in order, half a minute apart

PRESETS: dict[str, RetrievalConfig | None] = {
    "default": None,  # whatever Engram.config is: the shipped pipeline
    "no-current-first": RetrievalConfig(current_first=False),  # without engram.retrieval.currency
    "no-rerank": RetrievalConfig(rerank=False),  # late interaction still on
    "full-rerank": RetrievalConfig(rerank_gap=1.0),  # the whole window reranked, as before contenders.py
    "no-late": RetrievalConfig(late_interaction=False),  # Engram 0.1's stages
    "fused": RetrievalConfig(late_interaction=False, rerank=False),
    "bm25": recipes.BM25_ONLY,
    "dense": recipes.DENSE_ONLY,
    "hybrid": recipes.HYBRID,
    "hybrid+rerank": recipes.HYBRID_RERANK,
    "no-late-window-30": RetrievalConfig(late_interaction=False, rerank_window=30),
    "late-80": RetrievalConfig(late_window=80),
    "window-20": RetrievalConfig(rerank_window=20),
}


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime (the dataset gives no zone: UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def dia_ids(evidence: list[str]) -> set[str]:
    """Normalise the evidence list: several ids in one string, 'D:11:26' and 'D30:05' forms."""
    ids = set()
    for entry in evidence:
        for part in re.split(r"[;,\s]+", entry):
            m = re.fullmatch(r"D:?(\d+):(\d+)", part.strip())
            if m:
                ids.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return ids


def turns_of(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], datetime]:
    """The conversation as import records, and the time its last turn was said."""
    conv = sample["conversation"]
    records = []
    last = datetime.min.replace(tzinfo=UTC)
    n = 1
    while f"session_{n}" in conv:
        start = session_time(conv[f"session_{n}_date_time"])
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            at = start + i * TURN_SPACING
            last = max(last, at)
            records.append(
                {"key": turn["dia_id"], "text": text, "timestamp": at.isoformat(), "session_id": f"s{n}"}
            )
        n += 1
    return records, last


class Stores:
    """A fresh store per conversation: a SQLite file, a database on a bundled PostgreSQL server
    (pgserver, started on first use) as the non-owner runtime role, like the test suite, or an index
    prefix of its own on one OpenSearch test node (started on first use) as the service account."""

    def __init__(self, kind: str, tmp: Path, os_heap: str = "1g") -> None:
        self.kind, self.tmp, self.os_heap = kind, tmp, os_heap
        self.pg: Any = None
        self.node: BenchNode | None = None
        self.stack = contextlib.ExitStack()  # what close() stops: the server or node started here

    def new(self, name: str) -> Store:
        if self.kind == "sqlite":
            return SQLiteStore(self.tmp / f"{name}.db")
        if self.kind == "opensearch":
            return self.new_opensearch(name)
        import pgserver
        import psycopg
        from psycopg.conninfo import make_conninfo

        from engram.storage.postgres import PostgresStore

        if self.pg is None:
            self.pg = pgserver.get_server(self.tmp / "pg", cleanup_mode="stop")
            self.stack.callback(self.pg.cleanup)
        database = "locomo_" + re.sub(r"\W", "_", name)
        with psycopg.connect(self.pg.get_uri(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        admin = make_conninfo(self.pg.get_uri(), dbname=database)
        return PostgresStore(make_conninfo(admin, user="engram_app"), admin_url=admin)

    def new_opensearch(self, name: str) -> Store:
        from engram.storage.opensearch import OpenSearchStore

        if self.node is None:
            self.node = self.stack.enter_context(opensearch_node(self.tmp / "os", self.os_heap))
        prefix = "locomo-" + re.sub(r"[^a-z0-9_.-]", "-", name.lower()) + "-"
        return OpenSearchStore(self.node.url, self.node.options(prefix))

    def close(self) -> None:
        self.stack.close()


def run(
    eng: Engram, samples: list[dict[str, Any]], presets: list[str], stores: Stores
) -> dict[str, dict[str, Any]]:
    per_preset: dict[str, dict[str, list[float]]] = {p: defaultdict(list) for p in presets}
    for number, sample in enumerate(samples):
        user = re.sub(r"[^A-Za-z0-9._-]", "-", str(sample.get("sample_id", f"conv-{number}")))
        records, present = turns_of(sample)
        store = stores.new(user)
        with Engram(
            store, eng.embedder, eng.reranker, token_encoder=eng.token_encoder, settings=eng.settings
        ) as e:
            t0 = time.perf_counter()
            ids = e.import_json({"user_id": user, "episodic": records})["ids"]
            load_s = time.perf_counter() - t0
            key_of = {v: k for k, v in ids.items()}
            mem = e.for_user(user)
            questions = [q for q in sample["qa"] if q.get("category") in CATEGORIES]
            print(f"{user}: {len(records)} turns imported in {load_s:.1f} s, {len(questions)} questions")
            for preset in presets:
                out = per_preset[preset]
                for q in questions:
                    gold = dia_ids(q["evidence"])
                    if not gold:
                        continue
                    started = time.perf_counter()
                    hits = mem.recall(
                        q["question"], k=10, config=PRESETS[preset], record_use=False, as_of=present
                    )
                    ranked = [key_of.get(h.memory.id) for h in hits]
                    record(out, CATEGORIES[q["category"]], gold, ranked, started)
    return {p: summarise(values) for p, values in per_preset.items()}


def record(
    values: dict[str, list[float]], category: str, gold: set[str], ranked: list[str | None], started: float
) -> None:
    """One question's R@1/5/10 and reciprocal rank, overall and in its category, and the latency of
    its recall (started at ``started``, a perf_counter reading)."""
    values["latency_ms"].append(1000 * (time.perf_counter() - started))
    first = next((r for r, key in enumerate(ranked, 1) if key in gold), None)
    for k in (1, 5, 10):
        share = len(gold & set(ranked[:k])) / len(gold)
        values[f"r_at_{k}"].append(share)
        values[f"{category}:r_at_{k}"].append(share)
    values["mrr"].append(1.0 / first if first else 0.0)
    values[f"{category}:mrr"].append(1.0 / first if first else 0.0)


def summarise(
    values: dict[str, list[float]], categories: Iterable[str] = CATEGORIES.values()
) -> dict[str, Any]:
    latencies = sorted(values.pop("latency_ms"))
    result: dict[str, Any] = {"questions": len(values["mrr"])}
    result.update({k: round(statistics.fmean(v), 4) for k, v in values.items() if ":" not in k})
    result["per_category"] = {
        c: {
            "questions": len(values[f"{c}:mrr"]),
            **{
                m: round(statistics.fmean(values[f"{c}:{m}"]), 4)
                for m in ("r_at_1", "r_at_5", "r_at_10", "mrr")
            },
        }
        for c in categories
        if values.get(f"{c}:mrr")
    }
    result["latency_p50_ms"] = round(latencies[len(latencies) // 2], 1)
    result["latency_p95_ms"] = round(latencies[int(len(latencies) * 0.95)], 1)
    return result


def print_table(results: dict[str, dict[str, Any]]) -> None:
    w = max(16, *(len(name) + 1 for name in results))
    print(
        f"\n{'preset':<{w}} {'n':>5} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} {'p50 ms':>7} {'p95 ms':>7}"
    )
    for name, r in results.items():
        print(
            f"{name:<{w}} {r['questions']:>5} {r['r_at_1']:>6.3f} {r['r_at_5']:>6.3f} {r['r_at_10']:>6.3f} "
            f"{r['mrr']:>6.3f} {r['latency_p50_ms']:>7.1f} {r['latency_p95_ms']:>7.1f}"
        )
        for category, c in r["per_category"].items():
            print(
                f"  {category:<{w - 2}} {c['questions']:>5} {c['r_at_1']:>6.3f} {c['r_at_5']:>6.3f} "
                f"{c['r_at_10']:>6.3f} {c['mrr']:>6.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo development benchmark (turn-level evidence)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS), help="repeatable")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--store", choices=["sqlite", "postgres", "opensearch"], default="sqlite")
    parser.add_argument("--os-heap", default="1g", help="the OpenSearch test node's heap (default 1g)")
    args = parser.parse_args()
    presets = args.preset or ["default"]
    samples = json.loads(args.data.read_text())[: args.conversations]
    settings = EngramSettings()
    embedder = OnnxEmbedder.packaged(threads=settings.model_threads)
    reranker = OnnxCrossEncoder.packaged()
    with tempfile.TemporaryDirectory() as tmp:
        base = Engram(
            SQLiteStore(Path(tmp) / "base.db"),
            embedder,
            reranker,
            token_encoder=OnnxTokenEncoder.packaged(threads=settings.model_threads),
            settings=settings,
        )
        stores = Stores(args.store, Path(tmp), args.os_heap)
        try:
            results = run(base, samples, presets, stores)
        finally:
            base.close()
            stores.close()
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
