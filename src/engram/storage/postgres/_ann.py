"""Heavy tenants on PostgreSQL: one partial HNSW index per tenant past a size, instead of an exact scan.

The dense leg scans a tenant's vectors exactly, which grows with the tenant (a 50k-row tenant: ~20 ms;
250k: ~200 ms). A pgvector HNSW index over the whole table lost recall under a tenant filter (it
filters after the graph search), so a heavy tenant gets its own graph: a partial index
``... USING hnsw ((embedding::vector(dim)) vector_cosine_ops) WHERE owner = '<tenant>'`` (measured on
real embeddings, bench/bench_ann.py --pg: 50k rows, exact 19.3 ms p50, ef_search 400: 2.8 ms at
recall@10 0.980). PostgreSQL keeps it up to date on every insert, so rows written later are found at
once. Building one needs the table's owner (the admin URL): ``index_heavy_tenants`` runs from
``engram reindex``; the runtime role only reads which indexes exist (``AnnIndexes``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import TYPE_CHECKING, Any

from engram.errors import StorageError

if TYPE_CHECKING:
    from engram.storage.postgres._statements import Connection

PREFIX = "memories_ann_"
EF_SEARCH = 400  # hnsw.ef_search: recall@10 0.980 of the exact scan at 50k rows (0.947 at 200)
MAX_EF_SEARCH = 1000  # pgvector refuses more
USER_TYPES = frozenset({"episodic", "semantic", "procedural"})
_BUILD_LOCK = 743275  # one index build at a time (advisory lock id; migrate uses 743274)
REFRESH_S = 60.0  # how stale the runtime's list of indexed tenants may be


def index_name(owner: str) -> str:
    """A valid identifier for any tenant id: the prefix and 24 hex digits of its SHA-256."""
    return PREFIX + hashlib.sha256(owner.encode()).hexdigest()[:24]


def index_heavy_tenants(admin_url: str, min_rows: int, dim: int) -> list[str]:
    """As the tables' owner: give every tenant with at least ``min_rows`` rows its index (built
    concurrently: writes go on meanwhile), drop the invalid leftovers of an interrupted build first,
    then refresh the planner's statistics. Returns the tenants indexed now; none when ``min_rows`` is 0
    (graphs off). One run at a time: a second one raises StorageError instead of racing the first."""
    import psycopg
    from psycopg import sql

    if min_rows <= 0:
        return []
    built: list[str] = []
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            locked = conn.execute("SELECT pg_try_advisory_lock(%s)", (_BUILD_LOCK,)).fetchone()
            if not locked or not locked[0]:
                raise StorageError("another `engram reindex` is building the heavy tenants' indexes")
            try:
                _drop_invalid(conn)
                present = {name for (name,) in conn.execute(_INDEXES, (PREFIX + "%", False)).fetchall()}
                for owner in _heavy(conn, min_rows):
                    if index_name(owner) in present:
                        continue
                    conn.execute(
                        sql.SQL(
                            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON memories USING hnsw "
                            "((embedding::vector({})) vector_cosine_ops) "
                            "WITH (m = 16, ef_construction = 128) WHERE owner = {}"
                        ).format(sql.Identifier(index_name(owner)), sql.Literal(dim), sql.Literal(owner))
                    )
                    built.append(owner)
                if built:
                    conn.execute("ANALYZE memories")  # the planner picks a new index by its statistics
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_BUILD_LOCK,))
    except psycopg.Error as exc:
        raise StorageError(f"building the heavy tenants' indexes failed: {exc}") from exc
    return built


# Index names of memories with the prefix; the second parameter: also the invalid ones (a build
# that was interrupted, or is running now).
_INDEXES = """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = 'memories'::regclass AND c.relname LIKE %s AND (i.indisvalid OR %s)"""


def drop_index(admin_url: str, owner: str) -> bool:
    """As the tables' owner: drop the tenant's index (a deleted user's: its definition names them);
    whether there was one."""
    import psycopg
    from psycopg import sql

    name = index_name(owner)
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            there = conn.execute(_INDEXES, (name, True)).fetchone() is not None
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise StorageError(f"dropping a deleted user's index failed: {exc}") from exc
    return there


def _drop_invalid(conn: Any) -> None:
    from psycopg import sql

    valid = {name for (name,) in conn.execute(_INDEXES, (PREFIX + "%", False)).fetchall()}
    for (name,) in conn.execute(_INDEXES, (PREFIX + "%", True)).fetchall():
        if name not in valid:  # no other build runs (the advisory lock): a leftover
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))


def _heavy(conn: Any, min_rows: int) -> list[str]:
    """The tenants with at least ``min_rows`` rows, counted as each tenant: the owner role is under
    FORCE ROW LEVEL SECURITY too, unless it is a superuser."""
    heavy = []
    for (owner,) in conn.execute("SELECT owner FROM engram_tenants ORDER BY owner").fetchall():
        with conn.transaction():
            conn.execute("SELECT set_config('engram.tenant', %s, true)", (owner,))
            (count,) = conn.execute("SELECT count(*) FROM memories WHERE owner = %s", (owner,)).fetchone()
        if count >= min_rows:
            heavy.append(owner)
    return heavy


class AnnIndexes:
    """Which tenants have a valid index, read by the runtime role and cached for ``REFRESH_S``."""

    def __init__(self) -> None:
        self._names: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def has(self, conn: Connection, owner: str) -> bool:
        with self._lock:
            stale = time.monotonic() - self._read_at > REFRESH_S
            if stale:
                self._read_at = time.monotonic()  # one reader refreshes; the others use the old list
        if stale:
            rows = conn.execute(_INDEXES, (PREFIX + "%", False)).fetchall()
            self._names = frozenset(name for (name,) in rows)
        return index_name(owner) in self._names

    def forget_cache(self) -> None:
        """Read the list again on next use (after building indexes in this process)."""
        with self._lock:
            self._read_at = float("-inf")


def search_width(limit: int) -> int:
    """How many of the tenant's nearest rows the graph returns before the filters: ``4 x limit``,
    between EF_SEARCH and pgvector's maximum (never below ``limit``, which is at most 1000)."""
    return min(MAX_EF_SEARCH, max(EF_SEARCH, 4 * limit))


def dense_leg(dim: int, live: str, graph: bool) -> str:
    """The dense leg's SQL: the tenant's nearest rows (through its graph when ``graph``, else an exact
    scan) and the catalog's (always exact), nearest first. Parameters: vector, tenant, others (the
    other owners in scope: the catalog), types, limit, and with a graph ann_limit.

    Through the graph the type and supersession filters apply after the search, over ``ann_limit``
    (>= limit) nearest rows, so it is used only when every user type is wanted (a recall of one type
    among a tenant's turns could keep few of them) and with few superseded rows among the nearest.
    """
    if not graph:
        return f"""SELECT id, (embedding <=> %(vector)s::vector) + 0 AS distance, rid FROM memories
                   WHERE owner = ANY(%(owners)s) AND memory_type = ANY(%(types)s) {live}
                   ORDER BY distance, rid LIMIT %(limit)s"""
    return f"""SELECT id, distance, rid FROM (
                   SELECT id, distance, rid FROM (
                       SELECT id, rid, memory_type, superseded_by,
                              embedding::vector({dim}) <=> %(vector)s::vector({dim}) AS distance
                       FROM memories WHERE owner = %(tenant)s
                       ORDER BY embedding::vector({dim}) <=> %(vector)s::vector({dim})
                       LIMIT %(ann_limit)s) AS nearest
                   WHERE memory_type = ANY(%(types)s) {live}
                   UNION ALL
                   SELECT id, (embedding <=> %(vector)s::vector) + 0, rid FROM memories
                   WHERE owner = ANY(%(others)s) AND memory_type = ANY(%(types)s) {live}) AS both_parts
               ORDER BY distance, rid LIMIT %(limit)s"""
