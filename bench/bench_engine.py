"""Engine benchmark (not a test): write and recall latency at several store sizes over 1,000 users.

For each size, a fresh store is bulk-loaded with synthetic rows (real words, Zipf-distributed, skewed user
sizes, 60% episodic / 30% semantic / 10% procedural, plus 200 catalog items). Bulk rows get random
unit vectors: an exact vector scan costs the same whatever the values, and embedding 100k texts would
take ~9 minutes here. Then, through the public API with the real models:
  * write: remember_turn in a session (previous-turn lookup, embedding, token vectors, commit), p50/p95
  * recall with no model stage (fused legs), with late interaction but no cross-encoder, and the
    default pipeline (late interaction + rerank window), p50/p95

    python bench/bench_engine.py [--sizes 10000 100000] [--users 1000] [--store sqlite|postgres|opensearch]
                                 [--pg-url ADMIN_URL] [--os-url URL] [--json bench/results/engine.json]

--store opensearch starts a single OpenSearch 2.19 node from Maven Central jars like the test suite
(tests/opensearch_node: java 17, mvn, openssl; --os-heap, default 1g) with one shard and no replica, or
uses the cluster at --os-url (service account and CA from ENGRAM_OS_USER / ENGRAM_OS_PASSWORD /
ENGRAM_OS_CA_CERTS; indices under the prefix engrambench-, deleted afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np

from engram import Engram
from engram.models import EpisodicMemory, ProceduralMemory, SemanticMemory, new_id, search_text_of, utcnow
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.late_interaction import pack_all
from engram.storage.base import Store, TenantIndexing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from os_node import opensearch_node  # bench scripts run as files, not as a package


def vocabulary() -> list[str]:
    """Real English words, one wordpiece each (from the packaged model's vocab, roughly by frequency):
    synthetic pseudo-words would split into many wordpieces and inflate model cost 3-4x."""
    from engram.providers.onnx import PACKAGED_EMBEDDER

    lines = (PACKAGED_EMBEDDER.locate() / "vocab.txt").read_text(encoding="utf-8").split()
    return [w for w in lines if w.isalpha() and w.isascii() and len(w) >= 3][:12000]


class TextGen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = vocabulary()
        weights = 1.0 / np.arange(1, len(self.words) + 1)  # Zipf: a few words are very common
        self.cum = np.cumsum(weights / weights.sum())

    def sentence(self, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        idx = np.searchsorted(self.cum, [self.rng.random() for _ in range(n)])
        return " ".join(self.words[min(i, len(self.words) - 1)] for i in idx)


def user_sizes(rng: random.Random, users: int, total: int) -> list[int]:
    """Skewed: a few heavy users, many light ones (Pareto), summing to ``total``."""
    raw = [rng.paretovariate(1.2) for _ in range(users)]
    scale = total / sum(raw)
    sizes = [max(1, int(r * scale)) for r in raw]
    sizes[0] += total - sum(sizes)
    return sizes


def bulk_load(
    eng: Engram,
    gen: TextGen,
    rng: random.Random,
    total: int,
    users: int,
    legacy_tokens: bool = False,
    chunk_rows: int = 2000,
) -> float:
    """Load ``total`` rows over ``users`` tenants, ``chunk_rows`` a Store.insert; the seconds it took."""
    dim = eng.embedder.dim
    now = utcnow()
    start = time.perf_counter()
    for u, size in enumerate(user_sizes(rng, users, total)):
        user = f"user{u:04d}"
        rows = []
        for _ in range(size):
            kind = rng.random()
            at = now - timedelta(days=rng.uniform(0, 900))
            if kind < 0.6:
                rows.append(
                    EpisodicMemory(
                        id=new_id("episodic"),
                        text=gen.sentence(6, 20),
                        user_id=user,
                        created_at=at,
                        timestamp=at,
                    )
                )
            elif kind < 0.9:
                rows.append(
                    SemanticMemory(
                        id=new_id("semantic"), text=gen.sentence(5, 12), user_id=user, created_at=at
                    )
                )
            else:
                rows.append(
                    ProceduralMemory(
                        id=new_id("procedural"),
                        text="",
                        name=gen.sentence(2, 4),
                        trigger_text=gen.sentence(4, 8),
                        description=gen.sentence(6, 12),
                        user_id=user,
                        created_at=at,
                    )
                )
        vectors = np.asarray([rng.gauss(0, 1) for _ in range(len(rows) * dim)], dtype=np.float32)
        vectors = vectors.reshape(len(rows), dim)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        tokens = random_tokens(eng, rows, legacy_tokens) if eng.token_encoder is not None else None
        for i in range(0, len(rows), chunk_rows):
            chunk = tokens[i : i + chunk_rows] if tokens is not None else None
            eng.store.insert(user, rows[i : i + chunk_rows], vectors[i : i + chunk_rows], None, chunk)
    return time.perf_counter() - start


def random_tokens(eng: Engram, rows: list, legacy: bool = False) -> list[bytes]:
    """Packed random token vectors, one per text token plus [CLS], marker and [SEP]: scoring costs the
    same whatever the values, and encoding 100k texts would take ~6 minutes here. In the format new
    writes use (int8 unless ``ENGRAM_LEAN_TOKEN_VECTORS=true``), or (``legacy``) int8 whatever the
    setting. From 2026-12-01 21:49 (ca2e01c) to 2026-12-02 they were always lean: the OpenSearch 100k
    figures of that day in docs/benchmarks.md are the lean format's."""
    assert eng.token_encoder is not None
    dim = eng.token_encoder.dim
    gen = np.random.default_rng(len(rows))
    matrices = []
    for row in rows:
        n = 3 + int(1.3 * len(search_text_of(row).split()))
        m = gen.standard_normal((n, dim)).astype(np.float32)
        matrices.append(m / np.linalg.norm(m, axis=1, keepdims=True))
    lean = eng.settings.lean_token_vectors and not legacy
    blobs = pack_all(matrices, eng.token_encoder.name if lean else None)
    return blobs


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


@contextlib.contextmanager
def open_engram(
    backend: str, tmp: str, pg_url: str | None, os_url: str | None = None, os_heap: str = "1g"
) -> Iterator[Engram]:
    """A fresh store: a SQLite file in ``tmp``, a new database on the PostgreSQL server at ``pg_url``
    (default: a bundled pgserver instance started in ``tmp``), or a new index prefix on OpenSearch at
    ``os_url`` (default: a test node started in ``tmp``)."""
    if backend == "sqlite":
        with Engram.open(f"sqlite:///{tmp}/bench.db") as eng:
            yield eng
        return
    if backend == "opensearch":
        with open_opensearch(tmp, os_url, os_heap) as eng:
            yield eng
        return
    import psycopg
    from psycopg.conninfo import make_conninfo

    from engram.storage.postgres import PostgresStore

    server = None
    if pg_url is None:
        import pgserver

        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        pg_url = server.get_uri()
    name = f"engram_bench_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    admin = make_conninfo(pg_url, dbname=name)
    store = PostgresStore(make_conninfo(admin, user="engram_app"), admin_url=admin)
    try:
        with with_default_models(store) as eng:
            yield eng
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if server is not None:
            server.cleanup()


def with_default_models(store: Store) -> Engram:
    """The store with the models and settings `Engram.open` would give the embedded store (the same
    threads per model, cross-encoder sessions and priorities), so the backends are compared alone."""
    from engram.providers import default_embedder, default_reranker, default_token_encoder
    from engram.settings import load_settings

    settings = load_settings()
    return Engram(
        store,
        default_embedder(settings),
        default_reranker(settings),
        token_encoder=default_token_encoder(settings),
        settings=settings,
    )


OS_PREFIX = "engrambench-"
_tenant_hash: list[str] = []  # a bcrypt hash for the bench's tenant users on the test node (see below)


@contextlib.contextmanager
def open_opensearch(tmp: str, url: str | None, heap: str) -> Iterator[Engram]:
    from engram.settings import load_settings
    from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore

    if url is not None:
        options = replace(OpenSearchOptions.from_settings(load_settings()), index_prefix=OS_PREFIX)
        store = OpenSearchStore(url, options)
        try:
            with with_default_models(store) as eng:
                yield eng
        finally:  # a cluster of someone's: take the bench's indices away
            cleanup = OpenSearchStore(url, options)
            cleanup._client.indices.delete(index=f"{OS_PREFIX}*", expand_wildcards="all", ignore=404)
            cleanup.close()
        return
    with opensearch_node(Path(tmp) / "os", heap=heap) as node:
        _tenant_hash[:] = [bcrypt_hash(random_password())]
        with with_default_models(OpenSearchStore(node.url, node.options(OS_PREFIX))) as eng:
            yield eng


def random_password() -> str:
    """A strong random password (192 random bits) that a command line never reads as an option: a
    letter first. ``token_urlsafe`` alone starts with "-" one time in 64, and the Hasher reads "-p...",
    "-h...", "-a..." as its own options ("Missing argument for option: p", exit 255). A capital, a digit
    and a symbol at the end, for password rules that want them."""
    return "p" + secrets.token_urlsafe(24) + "-A1"


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash made by the security plugin's own Hasher (in the test node's jars)."""
    import subprocess

    if password.startswith("-"):
        raise ValueError("the Hasher may read a password that starts with '-' as an option")

    from tests.opensearch_node.node import ensure_dist

    dist = ensure_dist()
    cp = f"{dist}/sec/*:{dist}/lib/*"
    done = subprocess.run(
        ["java", "-cp", cp, "org.opensearch.security.tools.Hasher", "-p", password],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def create_tenant_users(eng: Engram, users: int) -> float:
    """OpenSearch test node: the bench's tenants' internal users in one security-API PATCH, with one
    bcrypt hash (of a random password nobody keeps) for all. The store makes a tenant's user on its
    first request with a password the server hashes (bcrypt, cost 12) and one security-config update:
    ~0.7 s a new tenant here, 12 minutes of a 10k load over 1,000 users. Made here, the store finds the
    users and only looks them up. On a cluster of --os-url the store makes them (timed in the load)."""
    from engram.storage.opensearch._layout import tenant_user

    if not _tenant_hash:
        return 0.0
    start = time.perf_counter()
    ops = [
        {
            "op": "add",
            "path": f"/{tenant_user(f'user{u:04d}')}",
            "value": {"hash": _tenant_hash[0], "attributes": {"owner": f"user{u:04d}"}},
        }
        for u in range(users)
    ]
    eng.store._admin("PATCH", "/_plugins/_security/api/internalusers", ops)  # type: ignore[attr-defined]
    return time.perf_counter() - start


def disk_mb(eng: Engram, tmp: str) -> float:
    if type(eng.store).__name__ == "OpenSearchStore":  # primaries, after a flush (translog excluded)
        client = eng.store._client  # type: ignore[attr-defined]
        client.indices.flush(index=f"{OS_PREFIX}*")
        found = client.indices.stats(index=f"{OS_PREFIX}*", metric="store")
        return round(found["_all"]["primaries"]["store"]["size_in_bytes"] / 2**20, 1)
    if hasattr(eng.store, "url"):
        import psycopg

        with psycopg.connect(eng.store.url) as conn:
            return round(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20, 1)
    return round(sum(os.path.getsize(p) for p in Path(tmp).glob("bench.db*")) / 2**20, 1)


def extremes(
    eng: Engram, gen: TextGen, sizes: dict[str, int], heavy: str, light: str, suffix: str = ""
) -> dict:
    """Recall p50 without the cross-encoder for the heaviest and the lightest user."""
    result: dict = {}
    for label, user in (("heaviest_user", heavy), ("lightest_user", light)):
        lat, failed = [], []
        for _ in range(30):
            t = time.perf_counter()
            try:  # a server that runs out of heap on the largest tenant: counted, the rest kept
                eng.for_user(user).recall(gen.sentence(3, 8), config=RetrievalConfig(rerank=False))
            except Exception as exc:
                failed.append(f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            lat.append((time.perf_counter() - t) * 1000)
        result[f"{label}_rows"] = sizes[user]
        if lat:
            result[f"recall_norerank_{label}{suffix}_p50_ms"] = pct(lat, 50)
        if failed:
            result[f"recall_norerank_{label}{suffix}_failed"] = len(failed)
            result[f"recall_norerank_{label}{suffix}_error"] = failed[0]
    return result


def run_size(
    total: int,
    users: int,
    samples: int,
    backend: str,
    pg_url: str | None,
    os_url: str | None = None,
    os_heap: str = "1g",
    disk_only: bool = False,
    legacy_tokens: bool = False,
) -> dict:
    gen = TextGen(random.Random(total))
    rng = random.Random(total + 1)
    with tempfile.TemporaryDirectory() as tmp, open_engram(backend, tmp, pg_url, os_url, os_heap) as eng:
        eng.import_json([{"title": gen.sentence(2, 4), "text": gen.sentence(8, 20)} for _ in range(200)])
        if backend == "opensearch":
            result_users_s = create_tenant_users(eng, users)
        load_s = bulk_load(eng, gen, random.Random(total), total, users, legacy_tokens)
        print(f"{total} rows loaded in {load_s:.1f} s", flush=True)
        if disk_only:
            mb = disk_mb(eng, tmp)
            return {
                "backend": backend,
                "rows": total,
                "legacy_tokens": legacy_tokens,
                "disk_mb": mb,
                "bytes_per_memory": round(mb * 2**20 / total),
            }
        sizes = {f"user{u:04d}": n for u, n in enumerate(user_sizes(random.Random(total), users, total))}
        heavy, light = max(sizes, key=sizes.__getitem__), min(sizes, key=sizes.__getitem__)
        pick = [f"user{rng.randrange(users):04d}" for _ in range(samples)]
        writes = []
        for user in pick:
            text = gen.sentence(6, 20)
            t = time.perf_counter()
            # In a session: the write looks up the session's previous turn to index the turn with it.
            eng.for_user(user).remember_turn(text, session_id=f"chat-{user}")
            writes.append((time.perf_counter() - t) * 1000)
        result: dict = {
            "backend": backend,
            "rows": total,
            "users": users,
            "bulk_load_s": round(load_s, 1),
            **({"tenant_users_s": round(result_users_s, 1)} if backend == "opensearch" else {}),
            "write_p50_ms": pct(writes, 50),
            "write_p95_ms": pct(writes, 95),
        }
        fused = RetrievalConfig(rerank=False, late_interaction=False)
        lat: dict[str, list[float]] = {"fused": [], "norerank": [], "rerank": []}
        for user in pick:
            query = gen.sentence(3, 8)
            t = time.perf_counter()
            eng.for_user(user).recall(query, config=fused)
            lat["fused"].append((time.perf_counter() - t) * 1000)
        # The two late-interaction columns take turns on the same query, in alternating order: run one
        # column after the other, the second found the users' rows warm (on OpenSearch a first pass over
        # a user cost ~9 ms more p50), which hid the cross-encoder's cost (docs/benchmarks.md).
        for n, user in enumerate(pick):
            query = gen.sentence(3, 8)
            columns = [("norerank", RetrievalConfig(rerank=False))]
            if n < max(20, samples // 2):
                columns.append(("rerank", eng.config))
            for label, config in columns if n % 2 else columns[::-1]:
                t = time.perf_counter()
                eng.for_user(user).recall(query, config=config)
                lat[label].append((time.perf_counter() - t) * 1000)
        for label, values in lat.items():
            result[f"recall_{label}_p50_ms"] = pct(values, 50)
            result[f"recall_{label}_p95_ms"] = pct(values, 95)
        result |= extremes(eng, gen, sizes, heavy, light)
        if isinstance(eng.store, TenantIndexing):  # PostgreSQL: heavy users get their graphs on request
            t = time.perf_counter()
            indexed = eng.index_heavy_tenants() or []
            result["ann_build_s"], result["ann_users"] = time.perf_counter() - t, len(indexed)
            result |= extremes(eng, gen, sizes, heavy, light, suffix="_ann")
        result["disk_mb"] = disk_mb(eng, tmp)
        result["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description="Engram engine benchmark")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--store", choices=["sqlite", "postgres", "opensearch"], default="sqlite")
    parser.add_argument("--pg-url", help="admin URL of a PostgreSQL server (default: start pgserver)")
    parser.add_argument("--os-url", help="an OpenSearch cluster (default: start a test node)")
    parser.add_argument("--os-heap", default="1g", help="the test node's heap (default 1g)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--disk-only", action="store_true", help="bulk load and measure the disk, no latency")
    parser.add_argument("--legacy-tokens", action="store_true", help="int8 whatever the setting")
    args = parser.parse_args()
    results = []
    for size in args.sizes:
        r = run_size(
            size,
            args.users,
            args.samples,
            args.store,
            args.pg_url,
            args.os_url,
            args.os_heap,
            args.disk_only,
            args.legacy_tokens,
        )
        results.append(r)
        print(json.dumps(r))
    if args.disk_only:
        return
    keys = [
        "rows",
        "write_p50_ms",
        "write_p95_ms",
        "recall_fused_p50_ms",
        "recall_fused_p95_ms",
        "recall_norerank_p50_ms",
        "recall_norerank_p95_ms",
        "recall_rerank_p50_ms",
        "recall_rerank_p95_ms",
        "disk_mb",
    ]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in results:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
