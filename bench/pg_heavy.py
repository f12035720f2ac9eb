"""One heavy PostgreSQL tenant, exact scan against its own HNSW graph (not a test).

    python bench/pg_heavy.py --rows 50000 [--others 200 --other-rows 430]

Starts a bundled PostgreSQL (pgserver), loads one tenant with ``--rows`` rows (random unit vectors and
random token vectors, bench_engine's text generator) beside ``--others`` tenants, then times each part
of that tenant's recall (text leg, dense leg, both legs with the token vectors, a whole recall without
the cross-encoder) first on the exact scan, then after ``index_heavy_tenants`` built its graph, and
prints p50 / p95 in ms.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import TextGen, random_tokens, with_default_models

from engram.models import EpisodicMemory, new_id, utcnow
from engram.storage.base import SearchFilter


def load(store, eng, gen: TextGen, rng: np.random.Generator, user: str, n: int) -> None:
    for start in range(0, n, 2000):
        rows = [
            EpisodicMemory(
                id=new_id("episodic"),
                text=gen.sentence(6, 20),
                user_id=user,
                timestamp=utcnow(),
                created_at=utcnow(),
            )
            for _ in range(min(2000, n - start))
        ]
        vectors = rng.standard_normal((len(rows), eng.embedder.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.insert(user, rows, vectors, None, random_tokens(eng, rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--others", type=int, default=200)
    parser.add_argument("--other-rows", type=int, default=430)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    import pgserver
    import psycopg
    from psycopg.conninfo import make_conninfo

    from engram.storage.postgres import PostgresStore

    with tempfile.TemporaryDirectory() as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                conn.execute("CREATE DATABASE heavy")
            admin = make_conninfo(server.get_uri(), dbname="heavy")
            store = PostgresStore(make_conninfo(admin, user="engram_app"), admin_url=admin)
            eng = with_default_models(store)
            gen, rng = TextGen(random.Random(1)), np.random.default_rng(1)
            load(store, eng, gen, rng, "heavy", args.rows)
            for u in range(args.others):
                load(store, eng, gen, rng, f"user{u:04d}", args.other_rows)
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("ANALYZE memories")
            where = SearchFilter(
                memory_types=frozenset({"episodic", "semantic", "procedural", "catalog"}),
                include_superseded=False,
            )
            config = eng.config.but(rerank=False)

            def timed(work) -> str:
                ms = []
                for _ in range(args.samples):
                    query = gen.sentence(3, 8)
                    vector = eng.embedder.embed_query(query)
                    start = time.perf_counter()
                    work(query, vector)
                    ms.append(1000 * (time.perf_counter() - start))
                ms.sort()
                return f"{ms[len(ms) // 2]:.1f} / {ms[int(len(ms) * 0.95)]:.1f}"

            mem = eng.for_user("heavy")
            stages = {
                "text leg": lambda q, v: store.search_text("heavy", q, where, 80),
                "dense leg": lambda q, v: store.search_vector("heavy", v, where, 80),
                "legs + tokens": lambda q, v: store.search_candidates("heavy", q, v, where, 80, True),
                "recall without cross-encoder": lambda q, v: mem.recall(q, config=config, record_use=False),
            }

            def parts(label: str) -> None:
                print(
                    label + ": " + ", ".join(f"{k} {timed(w)}" for k, w in stages.items()) + " ms", flush=True
                )

            parts(f"exact scan, {args.rows} rows")
            start = time.perf_counter()
            store.index_heavy_tenants(min(args.rows, 5000))
            print(f"graph built in {time.perf_counter() - start:.1f} s")
            parts("own HNSW graph")
            eng.close()
        finally:
            server.cleanup()


if __name__ == "__main__":
    main()
