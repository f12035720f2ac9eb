"""Heavy-tenant benchmark (not a test): the SQLite dense leg, exact scan vs the per-tenant HNSW index.

One user grows through the given sizes in one store file; at each size the same queries run through
``SQLiteStore.search_vector`` (all memory types, ``leg_candidates`` = 80 hits, as recall asks) with the
index off (exact scan) and on (index built synchronously first; its build time is printed). Printed per
size: dense-leg p50/p95 for both paths and recall@10 of the approximate leg against the exact one.
A second user with 100 memories is measured the same way with the index on (it stays on the exact path).
Last, whole recalls (``UserMemory.recall``, k=10, no cross-encoder, no late interaction) of both users at
the largest size, with the index off and on.

Vectors: the first ``--real`` rows are real embeddings from the packaged embedder: the turns of the
LoCoMo dev conversations (``../shared/data/locomo-dev.json``, read in place) and, past them, generated
sentences from templates. Rows beyond that are synthesised from the real ones (a random mix of two real
embeddings plus a little noise, renormalised): embedding 250k texts takes hours on 2 cores. The queries
are LoCoMo questions (generated ones without the file), embedded as queries.

With ``--pg ROWS`` it measures PostgreSQL instead (pgvector via the bundled pgserver, a bare table, not
Engram's schema): one user's exact scan against a partial HNSW index on that user's rows
(``... USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE owner = 'heavy'``) at several
``hnsw.ef_search``, with 5,000 rows of 50 other users beside it.

    python bench/bench_ann.py [--sizes 1000 10000 50000 250000] [--real 10000] [--queries 100]
                              [--json bench/results/ann.json]
    python bench/bench_ann.py --pg 50000 [--real 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from engram import Engram
from engram.models import EpisodicMemory, new_id
from engram.providers.onnx import OnnxEmbedder
from engram.settings import EngramSettings
from engram.storage.ann import file_name
from engram.storage.base import SearchFilter
from engram.storage.sqlite import SQLiteStore

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
ALL_TYPES = SearchFilter(frozenset({"episodic", "semantic", "procedural", "catalog"}))
LIMIT = 80  # DEFAULT_LEG_CANDIDATES: what recall asks each leg for

SUBJECTS = ["I", "my sister", "our team", "the landlord", "my doctor", "the kids", "my manager", "we"]
VERBS = ["booked", "cancelled", "moved", "fixed", "forgot", "bought", "painted", "signed up for", "lost"]
THINGS = [
    "the hub",
    "a flight to Lisbon",
    "the dentist appointment",
    "a yoga class",
    "the blue car",
    "the kitchen",
    "a guitar",
    "the router firmware",
    "tickets for the concert",
    "a puppy",
]
WHEN = ["yesterday", "last week", "on Monday", "in May", "this morning", "two years ago", "after work"]
WHY = [
    "because it kept failing",
    "for the anniversary",
    "since the price dropped",
    "to save money",
    "after the storm",
    "for my daughter",
    "as the doctor said",
    "",
]


def corpus(n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """``n`` memory texts and the query texts: LoCoMo turns and questions, then generated sentences."""
    texts: list[str] = []
    questions: list[str] = []
    if LOCOMO.exists():
        for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
            questions += [q["question"] for q in conv["qa"]]
            sessions = conv["conversation"]
            for key, turns in sessions.items():
                if key.startswith("session_") and isinstance(turns, list):
                    texts += [t["text"] for t in turns if t.get("text")]
    while len(texts) < n:
        parts = [rng.choice(x) for x in (SUBJECTS, VERBS, THINGS, WHEN, WHY)]
        texts.append(" ".join(p for p in parts if p))
    while len(questions) < 200:
        questions.append(f"when did {rng.choice(SUBJECTS)} buy {rng.choice(THINGS)}?")
    rng.shuffle(questions)
    return texts[:n], questions


def synthesised(real: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors near the real ones: a * e_i + (1 - a) * e_j + noise, a in [0.5, 1)."""
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        i, j = rng.integers(0, len(real), m), rng.integers(0, len(real), m)
        a = rng.uniform(0.5, 1.0, (m, 1)).astype(np.float32)
        v = a * real[i] + (1 - a) * real[j] + rng.normal(0, 0.02, (m, real.shape[1])).astype(np.float32)
        out[start : start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def add_rows(store: SQLiteStore, user: str, vectors: np.ndarray, texts: list[str], first: int) -> None:
    at = datetime.now(UTC)
    for start in range(0, len(vectors), 2000):
        chunk = vectors[start : start + 2000]
        rows = [
            EpisodicMemory(
                id=new_id("episodic"),
                text=texts[(first + start + i) % len(texts)],
                user_id=user,
                created_at=at,
                timestamp=at,
            )
            for i in range(len(chunk))
        ]
        store.insert(user, rows, chunk)


def timed(store: SQLiteStore, user: str, queries: np.ndarray) -> tuple[list[float], list[list[str]]]:
    store.search_vector(user, queries[0], ALL_TYPES, LIMIT)  # warm the page cache and the index
    times, hits = [], []
    for q in queries:
        t = time.perf_counter()
        found = store.search_vector(user, q, ALL_TYPES, LIMIT)
        times.append((time.perf_counter() - t) * 1000)
        hits.append([h.id for h in found])
    return times, hits


def pct(values: list[float], p: float) -> float:
    return round(float(np.percentile(values, p)), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000, 250000])
    parser.add_argument("--real", type=int, default=10000, help="rows with real embeddings")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pg", type=int, metavar="ROWS", help="measure PostgreSQL at ROWS rows instead")
    args = parser.parse_args()
    rng = random.Random(7)
    embedder = OnnxEmbedder.packaged()
    real_n = min(args.real, max(args.sizes))
    texts, questions = corpus(real_n, rng)
    t = time.perf_counter()
    real = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    queries = np.stack(
        [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in questions[: args.queries]]
    )
    print(f"embedded {len(texts)} texts and {len(queries)} queries in {time.perf_counter() - t:.0f} s")
    nrng = np.random.default_rng(7)
    if args.pg:
        postgres(real, queries, args.pg, nrng)
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ann.db"
        exact = SQLiteStore(path, ann_min_rows=0)
        approx = SQLiteStore(path, ann_min_rows=1)
        exact.ensure_model(embedder.name, embedder.dim)
        add_rows(exact, "small", real[:100], texts, 0)
        have = 0
        for size in sorted(args.sizes):
            more = size - have
            fresh = real[have : min(size, real_n)]
            vectors = (
                np.concatenate([fresh, synthesised(real, more - len(fresh), nrng)])
                if more > len(fresh)
                else fresh
            )
            add_rows(exact, "heavy", vectors, texts, have)
            have = size
            approx.close()  # a full build, not an extension of the previous size's graph
            (approx.ann.folder / file_name("heavy")).unlink(missing_ok=True)
            approx = SQLiteStore(path, ann_min_rows=1)
            t = time.perf_counter()
            assert approx.ann.refresh("heavy") is not None
            build_s = time.perf_counter() - t
            exact_ms, exact_hits = timed(exact, "heavy", queries)
            approx_ms, approx_hits = timed(approx, "heavy", queries)
            recall = statistics.mean(
                len(set(a[:10]) & set(e[:10])) / max(1, min(10, len(e)))
                for a, e in zip(approx_hits, exact_hits, strict=True)
            )
            row = {
                "rows": size,
                "index_mb": round((approx.ann.folder / file_name("heavy")).stat().st_size / 2**20, 1),
                "real_rows": min(size, real_n),
                "build_s": round(build_s, 1),
                "exact_p50_ms": pct(exact_ms, 50),
                "exact_p95_ms": pct(exact_ms, 95),
                "ann_p50_ms": pct(approx_ms, 50),
                "ann_p95_ms": pct(approx_ms, 95),
                "recall_at_10": round(recall, 4),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
        # Rows written after the build: past 5% of the graph, the next refresh extends it with them.
        more = synthesised(real, have // 20 + 1, nrng)
        add_rows(exact, "heavy", more, texts, have)
        t = time.perf_counter()
        extended = approx.ann.refresh("heavy")
        assert extended is not None and extended.size == have + len(more)
        extend = {"rows": have, "extend_by_5pct_s": round(time.perf_counter() - t, 1)}
        print(json.dumps(extend))
        small_ms, _ = timed(approx, "small", queries)
        small = {"rows": 100, "p50_ms": pct(small_ms, 50), "p95_ms": pct(small_ms, 95), "path": "exact"}
        print(json.dumps({"small_user": small}))
        approx.close()
        exact.close()
        full = {
            f"{user}_{name}": whole_recall(path, embedder, user, questions[: args.queries], min_rows)
            for user in ("heavy", "small")
            for name, min_rows in (("exact", 0), ("ann", 1))
        }
        print(json.dumps({"recall_no_rerank": full}))
    if args.json:
        out = {"heavy_user": results, "extension": extend, "small_user": small, "recall_no_rerank": full}
        args.json.write_text(json.dumps(out, indent=2) + "\n")


def postgres(real: np.ndarray, queries: np.ndarray, n: int, rng: np.random.Generator) -> None:
    import pgserver
    import psycopg

    def literal(v: np.ndarray) -> str:
        return "[" + ",".join(f"{x:.6f}" for x in v) + "]"

    vectors = np.concatenate([real[:n], synthesised(real, max(0, n - len(real)), rng)])
    with tempfile.TemporaryDirectory() as folder:
        server = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(
                    "CREATE TABLE m (rid bigserial PRIMARY KEY, owner text NOT NULL, embedding vector)"
                )
                conn.execute("CREATE INDEX ON m (owner)")
                with conn.cursor().copy("COPY m (owner, embedding) FROM STDIN") as copy:
                    for i, v in enumerate(synthesised(real, 5000, rng)):
                        copy.write_row((f"u{i % 50}", literal(v)))
                    for v in vectors:
                        copy.write_row(("heavy", literal(v)))
                conn.execute("ANALYZE m")

                def run(sql: str) -> tuple[list[float], list[list[int]]]:
                    conn.execute(sql, (literal(queries[0]),))
                    times, hits = [], []
                    for q in queries:
                        t = time.perf_counter()
                        rows = conn.execute(sql, (literal(q),)).fetchall()
                        times.append((time.perf_counter() - t) * 1000)
                        hits.append([r[0] for r in rows])
                    return times, hits

                # "+ 0": what postgres.py does to keep the planner on the exact scan
                exact_ms, exact_hits = run(
                    "SELECT rid FROM m WHERE owner = 'heavy' "
                    f"ORDER BY (embedding <=> %s::vector) + 0 LIMIT {LIMIT}"
                )
                print(
                    json.dumps(
                        {"pg_rows": n, "exact_p50_ms": pct(exact_ms, 50), "exact_p95_ms": pct(exact_ms, 95)}
                    )
                )
                conn.execute("SET maintenance_work_mem = '1GB'")
                t = time.perf_counter()
                conn.execute(
                    "CREATE INDEX ON m USING hnsw ((embedding::vector(384)) vector_cosine_ops) "
                    "WITH (m = 16, ef_construction = 128) WHERE owner = 'heavy'"
                )
                build_s = round(time.perf_counter() - t, 1)
                for ef in (200, 400, 1000):
                    conn.execute(f"SET hnsw.ef_search = {ef}")
                    ann_ms, ann_hits = run(
                        "SELECT rid FROM m WHERE owner = 'heavy' "
                        f"ORDER BY embedding::vector(384) <=> %s::vector(384) LIMIT {LIMIT}"
                    )
                    recall = statistics.mean(
                        len(set(a[:10]) & set(e[:10])) / 10 for a, e in zip(ann_hits, exact_hits, strict=True)
                    )
                    row = {"ef_search": ef, "build_s": build_s, "hnsw_p50_ms": pct(ann_ms, 50)}
                    row |= {"hnsw_p95_ms": pct(ann_ms, 95), "recall_at_10": round(recall, 4)}
                    print(json.dumps(row), flush=True)
        finally:
            server.cleanup()


def whole_recall(path: Path, embedder: OnnxEmbedder, user: str, questions: list[str], min_rows: int) -> dict:
    """``UserMemory.recall`` end to end (query embedding, both legs, fusion, fetch, scoring), without
    the cross-encoder and late interaction (bulk rows have no token vectors), k=10: p50/p95 in ms."""
    store = SQLiteStore(path, ann_min_rows=min_rows)
    if min_rows:
        store.ann.refresh(user)
    settings = EngramSettings.defaults(rerank=False, late_interaction=False)
    with Engram(store, embedder, None, settings=settings) as eng:
        mem = eng.for_user(user)
        mem.recall(questions[0], k=10, record_use=False)
        times = []
        for q in questions:
            t = time.perf_counter()
            mem.recall(q, k=10, record_use=False)
            times.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}


if __name__ == "__main__":
    main()
