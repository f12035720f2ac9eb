"""The embedded backend: one SQLite file (WAL) through apsw, FTS5 for BM25, sqlite-vec for vectors.

Layout (the schema is in ``_schema``)
* ``memories``: one row per memory of any type. Columns that change after the write (use counts,
  supersession) are real columns; the rest of a type's fields live in the ``attrs`` JSON.
* ``memory_fts``: FTS5 over the searchable text, each token prefixed by its owner (see
  ``_fts.owner_prefix``), so the tenant filter runs inside the full-text match and BM25 statistics are
  per tenant.
* ``memory_vec``: float32 embeddings clustered by owner (``WITHOUT ROWID``, primary key (owner, rid)),
  so an exact scan of one tenant's vectors reads contiguous pages. Exact for most tenants (a shared ANN
  index with a tenant filter loses recall); a tenant past ``ann_min_rows`` rows gets its own HNSW graph
  next to the file (``<db>.ann/``, see engram.storage.ann), a cache of these rows.
* ``memory_tokens``: each row's late-interaction token vectors (packed by
  engram.retrieval.late_interaction), clustered by owner like ``memory_vec``; rows written before it
  existed have none and are encoded at recall time.
* ``tombstones``: what is left of forgotten rows (no text).
* ``owner_rows``: each owner's row count, kept by triggers: BM25 ranks over the owner's rows only
  (``_fts.owner_bm25``), so a tenant's scores never move with another tenant's writes.

The Store rules are shared (engram.storage._rules); this module opens connections and transactions and
runs the two search legs; ``_statements`` holds the statements the rules run.

Concurrency: one connection per thread, closed when its thread ends; writers take ``BEGIN IMMEDIATE``
and wait on a busy timeout, so several processes can share the file. ``synchronous=FULL``: an
acknowledged write survives power loss.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from engram.errors import StorageError, StoreBusy
from engram.models import Vectors
from engram.settings import DEFAULT_ANN_MIN_ROWS
from engram.storage._narrowing import narrowing_sql
from engram.storage._rules import StoreRules
from engram.storage.ann import MIN_WANTED_SHARE, TenantIndex, TenantIndexes
from engram.storage.base import LegHit, SearchFilter, Tenant, owner_of
from engram.storage.sqlite._erase import erase_owner
from engram.storage.sqlite._fts import fts_query
from engram.storage.sqlite._schema import BUSY_TIMEOUT_MS, connect, prepare
from engram.storage.sqlite._statements import SQLiteMeta, SQLiteRows, fetch_all, marks, timestamp
from engram.validation import validate_user_id

_Nearest = list[tuple[str, float]]  # (id, cosine distance), nearest first


class SQLiteStore(StoreRules[int]):
    """Store backend on one SQLite file; see the module docstring for the layout."""

    def __init__(self, path: str | Path, ann_min_rows: int = DEFAULT_ANN_MIN_ROWS) -> None:
        self.path = Path(path)
        # Per-tenant HNSW indexes for heavy tenants, beside the file; 0 rows: exact scans only.
        self.ann = TenantIndexes(self.path.with_name(self.path.name + ".ann"), ann_min_rows, self._connect)
        self._local = threading.local()
        self._open: dict[int, apsw.Connection] = {}  # every live thread's connection, for close()
        self._lock = threading.Lock()
        self._writer = threading.Lock()  # this process's writers queue here (see _write)
        self._writer_thread: int | None = None  # the thread inside _write, to refuse nesting at once
        try:
            # every tenant's memories: a new folder and file are the owner's alone (0700 / 0600; the
            # -wal and -shm files take the database file's mode), whatever the umask
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if str(path) != ":memory:" and not self.path.exists():
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError as exc:
            raise StorageError(f"cannot create {self.path}: {exc}") from exc
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                prepare(conn, self.path)

    # -- connections and transactions ----------------------------------------------------------
    @property
    def _label(self) -> str:
        return str(self.path)

    def _conn(self) -> apsw.Connection:
        held: _HeldConnection | None = getattr(self._local, "held", None)
        if held is None:
            held = _HeldConnection(self._connect())
            self._local.held = held
            with self._lock:
                self._open[id(held.conn)] = held.conn
            # A thread's locals die with it: close its connection then, not at close() (issue 12.1).
            weakref.finalize(held, _release, self._open, self._lock, held.conn)
        return held.conn

    def _connect(self) -> apsw.Connection:
        return connect(self.path)

    @contextlib.contextmanager
    def _write(self, conn: apsw.Connection, max_wait_s: float | None = None) -> Iterator[None]:
        """One write transaction, waiting at most ``max_wait_s`` (else the busy timeout) for the lock.

        This process's writers wait for each other on a mutex, which hands over the moment the writer
        before them commits; only other processes' writers meet SQLite's busy handler, which polls in
        growing sleeps (up to 100 ms) and stretched the write tail of a loaded server to ~1 s
        (bench/load.py, docs/benchmarks.md).
        """
        if self._writer_thread == threading.get_ident():
            raise StorageError(f"a write transaction on {self.path} is already open in this thread")
        wait = BUSY_TIMEOUT_MS / 1000 if max_wait_s is None else max_wait_s
        deadline = time.monotonic() + wait
        if not self._writer.acquire(timeout=wait):
            raise apsw.BusyError(f"another thread held the write lock of {self.path} for {wait:g} s")
        self._writer_thread = threading.get_ident()
        try:
            if max_wait_s is not None:  # what is left of the wait, for another process's writer
                conn.set_busy_timeout(max(1, round(1000 * (deadline - time.monotonic()))))
            try:
                conn.execute("BEGIN IMMEDIATE")
            finally:
                if max_wait_s is not None:
                    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            try:
                yield
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            self._writer_thread = None
            self._writer.release()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except apsw.Error as exc:
            raise StorageError(f"SQLite error on {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _tenant_statements(self, tenant: Tenant, *, write: bool) -> Iterator[SQLiteRows]:
        with self._errors():
            conn = self._conn()
            if not write:  # reads run on their own (autocommit): each statement sees the latest commit
                yield SQLiteRows(conn, owner_of(tenant))
                return
            with self._write(conn):
                yield SQLiteRows(conn, owner_of(tenant))

    @contextlib.contextmanager
    def _store_statements(self, *, write: bool) -> Iterator[SQLiteMeta]:
        with self._errors():
            conn = self._conn()
            if not write:
                yield SQLiteMeta(conn)
                return
            with self._write(conn):
                yield SQLiteMeta(conn)

    # -- search legs ---------------------------------------------------------------------------
    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        owners = where.owners(tenant)
        terms = fts_query(owners, query)
        if terms is None or not where.memory_types:
            return []
        # Type and state are filtered on the joined row, not as FTS terms: BM25 counts the document
        # frequency of every phrase in the query, and a "live" or "episodic" token is in every row of
        # the store (measured: 4 ms of a 4.4 ms query at 100k rows). The owner is checked again here,
        # as a second wall behind the owner-prefixed terms. engram_bm25 (``_fts.owner_bm25``) ranks
        # over each owner's rows: the row counts are the owners' (``owner_rows``; the subqueries run once).
        counts = ", ".join(["coalesce((SELECT n FROM owner_rows WHERE owner = ?), 0)"] * len(owners))
        narrow, narrow_params = narrowing_sql(where.narrow, "sqlite", "m.")
        sql = f"""
            SELECT m.id, engram_bm25(memory_fts, {counts}) AS score
            FROM memory_fts JOIN memories m ON m.rid = memory_fts.rowid
            WHERE memory_fts MATCH ? AND m.owner IN ({marks(len(owners))})
              AND m.memory_type IN ({marks(len(where.memory_types))})
              {"" if where.include_superseded else "AND m.superseded_by IS NULL"}{narrow}
            ORDER BY score DESC, m.rid LIMIT ?"""
        params = (*owners, terms, *owners, *sorted(where.memory_types), *narrow_params, limit)
        with self._errors():
            rows = fetch_all(self._conn(), sql, params)
        return [LegHit(id=i, score=s) for i, s in rows]

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        if not where.memory_types:
            return []
        owners = where.owners(tenant)
        query = np.asarray(vector, dtype=np.float32)
        with self._errors():
            conn = self._conn()
            with conn:  # one read snapshot for the index checks and the search
                indexes = {owner: self.ann.get(conn, owner) for owner in owners}
                # a filtered recall scans exactly: the graph's nearest rows may hold few that match
                if where.narrow.narrows or not any(
                    indexes.values()
                ):  # small tenants: the exact scan, as it always was
                    rows = _exact_vector(conn, owners, query, where, limit)
                else:  # each owner on its own path, merged by distance
                    rows = []
                    for owner, index in indexes.items():
                        if index is None:
                            rows += _exact_vector(conn, [owner], query, where, limit)
                        else:
                            rows += self._approximate_vector(conn, owner, index, query, where, limit)
                    rows = sorted(rows, key=lambda r: r[1])[:limit]
        return [LegHit(id=i, score=1.0 - d) for i, d in rows]

    def _approximate_vector(
        self,
        conn: apsw.Connection,
        owner: str,
        index: TenantIndex,
        query: np.ndarray,
        where: SearchFilter,
        limit: int,
    ) -> _Nearest:
        """One heavy owner: the graph's candidates plus the rows written since it was built (exact),
        re-scored exactly and filtered on the current rows (type, live, owner), as the exact path does."""
        share = index.wanted_share(where.memory_types, where.include_superseded)
        if share < MIN_WANTED_SHARE:  # a rare type of this owner: the graph would not reach enough
            return _exact_vector(conn, [owner], query, where, limit)
        filters = f"AND memory_type IN ({marks(len(where.memory_types))}) " + (
            "" if where.include_superseded else "AND live = 1"
        )
        sql = f"""
            SELECT m.id, nearest.distance FROM (
                SELECT rid, owner, vec_distance_cosine(embedding, ?) AS distance FROM memory_vec
                WHERE owner = ? AND rid IN (SELECT value FROM json_each(?)) {filters}
                UNION ALL
                SELECT rid, owner, vec_distance_cosine(embedding, ?) AS distance FROM memory_vec
                WHERE owner = ? AND rid > ? {filters}
                ORDER BY distance LIMIT ?
            ) AS nearest JOIN memories m ON m.rid = nearest.rid AND m.owner = nearest.owner
            ORDER BY nearest.distance"""
        blob, types = query.tobytes(), sorted(where.memory_types)
        count = index.candidates(limit, share, self.ann.min_candidates)
        while True:
            rids = index.search(query, count)
            params = (blob, owner, json.dumps(rids), *types, blob, owner, index.hwm, *types, limit)
            rows: _Nearest = fetch_all(conn, sql, params)
            # Too few survived the filters (forgotten, superseded or other-type rows among the
            # candidates): widen the search, up to the whole graph.
            if len(rows) >= limit or count >= index.size:
                return rows
            count = min(index.size, count * 4)
            self.ann.schedule(owner)  # rebuilt if it holds many forgotten rows (ann._fresh)

    # -- what the engine does its own way ------------------------------------------------------
    def _record_use(
        self, owner: str, uses: Mapping[str, int], at: datetime, max_wait_s: float | None
    ) -> dict[str, int]:
        by_increment: dict[int, list[str]] = {}
        for memory_id, n in uses.items():
            by_increment.setdefault(n, []).append(memory_id)
        counts: dict[str, int] = {}
        with self._errors():
            conn = self._conn()
            try:
                with self._write(conn, max_wait_s):
                    for n, ids in by_increment.items():
                        sql = f"""UPDATE memories SET use_count = use_count + ?,
                                      last_used_at = max(coalesce(last_used_at, ''), ?)
                                  WHERE +owner = ? AND +memory_type = 'semantic'
                                    AND id IN ({marks(len(ids))})
                                  RETURNING id, use_count"""
                        counts.update(fetch_all(conn, sql, (n, timestamp(at), owner, *ids)))
            except apsw.BusyError as exc:
                if max_wait_s is None:
                    raise
                raise StoreBusy(f"another writer holds {self.path}") from exc
        return counts

    def delete_user(self, user_id: str) -> dict[str, int]:
        owner = validate_user_id(user_id)
        with self._errors():
            conn = self._conn()
            conn.execute("PRAGMA secure_delete = ON")  # the freed pages are zeroed, not left readable
            try:
                with self._write(conn):
                    counts = erase_owner(conn, owner)
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
            # The write-ahead log still holds earlier images of those pages: copy it back and empty it
            # (best effort: a reader in another process may keep it until its next checkpoint).
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if self.ann.drop(owner):  # a cache of the rows just deleted, in a file of its own
            counts["ann_index"] = 1
        return counts

    def stats(self) -> dict[str, Any]:
        """Row counts per type and the recorded model, for `engram info`."""
        with self._errors():
            conn = self._conn()
            counts = dict(fetch_all(conn, "SELECT memory_type, count(*) FROM memories GROUP BY 1"))
            meta = dict(fetch_all(conn, "SELECT key, value FROM meta"))
            users = fetch_all(conn, "SELECT count(DISTINCT owner) FROM memories WHERE owner != ''")[0][0]
        return {"path": str(self.path), "counts": counts, "users": users, "meta": meta}

    def close(self) -> None:
        self.ann.close()  # first: its build thread reads through a connection of its own
        with self._lock:
            for conn in self._open.values():
                conn.close()
            self._open.clear()
        self._local = threading.local()


def _exact_vector(
    conn: apsw.Connection, owners: Sequence[str], query: np.ndarray, where: SearchFilter, limit: int
) -> _Nearest:
    if where.narrow.narrows:
        return _narrowed_vector(conn, owners, query, where, limit)
    # Scan the tenant's vectors alone (joining every scanned row to ``memories`` cost 7x at 24k
    # rows for one user); only the nearest ``limit`` are joined, re-checking the owner there.
    sql = f"""
        SELECT m.id, nearest.distance FROM (
            SELECT rid, owner, vec_distance_cosine(embedding, ?) AS distance FROM memory_vec
            WHERE owner IN ({marks(len(owners))})
              AND memory_type IN ({marks(len(where.memory_types))})
              {"" if where.include_superseded else "AND live = 1"}
            ORDER BY distance LIMIT ?
        ) AS nearest JOIN memories m ON m.rid = nearest.rid AND m.owner = nearest.owner
        ORDER BY nearest.distance"""
    params = (query.tobytes(), *owners, *sorted(where.memory_types), limit)
    return fetch_all(conn, sql, params)


def _narrowed_vector(
    conn: apsw.Connection, owners: Sequence[str], query: np.ndarray, where: SearchFilter, limit: int
) -> _Nearest:
    """The exact scan of a filtered recall: the filter's columns live in ``memories``, so every scanned
    vector is joined to its row, and the nearest ``limit`` are taken among the rows that match."""
    narrow, narrow_params = narrowing_sql(where.narrow, "sqlite", "m.")
    sql = f"""
        SELECT m.id, vec_distance_cosine(v.embedding, ?) AS distance
        FROM memory_vec v JOIN memories m ON m.rid = v.rid AND m.owner = v.owner
        WHERE v.owner IN ({marks(len(owners))})
          AND v.memory_type IN ({marks(len(where.memory_types))})
          {"" if where.include_superseded else "AND v.live = 1"}{narrow}
        ORDER BY distance, m.rid LIMIT ?"""
    params = (query.tobytes(), *owners, *sorted(where.memory_types), *narrow_params, limit)
    return fetch_all(conn, sql, params)


class _HeldConnection:
    """A thread's connection, kept in its thread-local storage: when the thread ends this is
    collected and its finalizer closes the connection."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn


def _release(
    open_connections: dict[int, apsw.Connection], lock: threading.Lock, conn: apsw.Connection
) -> None:
    with lock:
        open_connections.pop(id(conn), None)
    conn.close()  # closing twice (after the store's close()) is harmless
