"""The embedded backend: one SQLite file (WAL) through apsw, FTS5 for BM25, sqlite-vec for vectors.

Layout
* ``memories``: one row per memory of any type. Columns that change after the write (use counts,
  supersession) are real columns; the rest of a type's fields live in the ``attrs`` JSON.
* ``memory_fts``: FTS5 over the searchable text, each token prefixed by its owner (see owner_prefix),
  so the tenant filter runs inside the full-text match and BM25 statistics are per tenant.
* ``memory_vec``: float32 embeddings clustered by owner (``WITHOUT ROWID``, primary key (owner, rid)),
  so an exact scan of one tenant's vectors reads contiguous pages. Exact for most tenants (a shared ANN
  index with a tenant filter loses recall); a tenant past ``ann_min_rows`` rows gets its own HNSW graph
  next to the file (``<db>.ann/``, see engram.storage.ann), a cache of these rows.
* ``memory_tokens``: each row's late-interaction token vectors (int8), clustered by owner like
  ``memory_vec``; rows written before it existed have none and are encoded at recall time.
* ``tombstones``: what is left of forgotten rows (no text).

Concurrency: one connection per thread, closed when its thread ends; writers take ``BEGIN IMMEDIATE``
and wait on a busy timeout, so several processes can share the file. ``synchronous=FULL``: an
acknowledged write survives power loss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from engram.errors import Conflict, InvalidInput, NotFound, StorageError, StoreBusy
from engram.models import EpisodicMemory, Memory, MemoryType, Tombstone, Vectors, is_well_formed_id
from engram.settings import DEFAULT_ANN_MIN_ROWS
from engram.storage._rows import (
    MEMORY_COLUMNS,
    keyword_text_of,
    memory_from_row,
    memory_to_row,
    merged_provenance,
    refined_attrs,
    without_context,
)
from engram.storage.ann import MIN_WANTED_SHARE, TenantIndex, TenantIndexes
from engram.storage.base import (
    BATCH_CHANGED,
    ApiKeyRecord,
    ConsolidationWrite,
    FactMerge,
    LegHit,
    PlaybookFeedback,
    SearchFilter,
    Supersession,
    Tenant,
    check_insert,
    check_model,
    check_page,
    check_supersession,
    model_keys,
    wanted_ids,
)
from engram.text import fts_words

# 2: memory_tokens, episode context; 3: episodes marked consolidated (older Engrams refuse the file)
SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 10_000  # writers queue behind each other rather than fail

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    rid           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    owner         TEXT NOT NULL,              -- '' for catalog rows
    memory_type   TEXT NOT NULL CHECK (memory_type IN ('episodic','semantic','procedural','catalog')),
    text          TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    event_at      TEXT,                       -- episodic: when it was said
    metadata      TEXT NOT NULL DEFAULT '{}',
    attrs         TEXT NOT NULL DEFAULT '{}', -- immutable type-specific fields
    last_used_at  TEXT,
    use_count     INTEGER NOT NULL DEFAULT 0,
    success_count INTEGER NOT NULL DEFAULT 0,
    failure_count INTEGER NOT NULL DEFAULT 0,
    last_success_at TEXT,
    supersedes    TEXT,
    superseded_by TEXT,
    superseded_at TEXT,
    retracted     INTEGER NOT NULL DEFAULT 0,
    consolidated  INTEGER NOT NULL DEFAULT 0  -- episodic: 0 waiting, 1 consolidated, 2 skipped
);
CREATE INDEX IF NOT EXISTS memories_owner_type ON memories (owner, memory_type, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5 (
    body, tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS memory_vec (
    owner       TEXT NOT NULL,
    rid         INTEGER NOT NULL,
    memory_type TEXT NOT NULL,               -- copies of the filter columns, so a scan needs no join
    live        INTEGER NOT NULL,            -- 0 once superseded
    embedding   BLOB NOT NULL,
    PRIMARY KEY (owner, rid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_tokens (  -- late-interaction token vectors, packed int8
    owner       TEXT NOT NULL,
    rid         INTEGER NOT NULL,
    tokens      BLOB NOT NULL,
    PRIMARY KEY (owner, rid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consolidation_state (  -- schema 2's watermark, read once by the upgrade to 3
    owner        TEXT PRIMARY KEY,
    created_at   TEXT NOT NULL,
    episode_id   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    id          TEXT PRIMARY KEY,
    key_hash    TEXT NOT NULL UNIQUE,         -- sha256 of the key; the key itself is never stored
    user_id     TEXT,                         -- NULL for the admin key
    label       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE TABLE IF NOT EXISTS tombstones (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    memory_type  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    forgotten_at TEXT NOT NULL
);
"""

_SELECT = ", ".join(MEMORY_COLUMNS)

_TOKEN = re.compile(r"[^\W_]+")  # what unicode61 treats as one token: a run of letters/digits


def owner_prefix(owner: str) -> str:
    """Twelve digits derived from the owner, glued to the front of each of its indexed tokens.

    Each tenant thus gets its own FTS terms (``123456789012sensor``), so BM25's document frequencies
    are counted over the tenant's rows only: a query costs O(tenant), not O(whole store) (measured at
    100k rows / 1k users: bm25() over global doclists took 7.7 ms of a 8.4 ms query), and a tenant's
    scores reveal nothing about other tenants' words. Digits only, because the porter stemmer counts
    vowel-consonant sequences: a digit prefix never changes how the word is stemmed. A collision
    between two tenants (1 in 10^12) would only merge their term statistics: rows are still filtered
    by owner.
    """
    if owner == "":
        return "000000000000"
    return f"{int(hashlib.sha256(owner.encode()).hexdigest()[:16], 16) % 10**12:012d}"


def index_text(owner: str, text: str) -> str:
    """The text as stored in the FTS index: every token prefixed with the owner's digits."""
    prefix = owner_prefix(owner)
    return " ".join(prefix + token for token in _TOKEN.findall(text))


def fts_query(owners: Sequence[str], text: str) -> str | None:
    """Turn free text into an FTS5 OR-query over the owners' prefixed terms, dropping stopwords.

    Each word becomes a phrase of its tokens, so ``v15.3`` matches the adjacent tokens v15, 3:
    exact version strings and error codes still match exactly. None if no usable term is left.
    """
    unique = fts_words(text)
    phrases = [
        '"' + " ".join(owner_prefix(owner) + token for token in _TOKEN.findall(word)) + '"'
        for word in unique
        for owner in owners
    ]
    return " OR ".join(phrases) if phrases else None


def _owner_key(tenant: Tenant) -> str:
    return tenant if tenant is not None else ""


class SQLiteStore:
    """Store backend on one SQLite file; see the module docstring for the layout."""

    def __init__(self, path: str | Path, ann_min_rows: int = DEFAULT_ANN_MIN_ROWS) -> None:
        self.path = Path(path)
        # Per-tenant HNSW indexes for heavy tenants, beside the file; 0 rows: exact scans only.
        self.ann = TenantIndexes(self.path.with_name(self.path.name + ".ann"), ann_min_rows, self._connect)
        self._local = threading.local()
        self._open: dict[int, apsw.Connection] = {}  # every live thread's connection, for close()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder for {self.path}: {exc}") from exc
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                conn.execute(_SCHEMA)
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise StorageError(
                        f"{self.path} has schema version {row[0]}; this Engram knows up to "
                        f"{SCHEMA_VERSION}: upgrade engram-memory"
                    )
                elif int(row[0]) < SCHEMA_VERSION:  # 2's changes were additive (CREATE IF NOT EXISTS)
                    if int(row[0]) < 3:
                        _mark_consolidated_before_the_watermark(conn)
                    conn.execute(
                        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                    )
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS memories_waiting ON memories (owner, created_at, id) "
                    "WHERE memory_type = 'episodic' AND consolidated = 0"
                )
                # (owner) indexes rowid too: an export pages a tenant in write order without sorting
                conn.execute("CREATE INDEX IF NOT EXISTS memories_owner ON memories (owner)")
                conn.execute("CREATE INDEX IF NOT EXISTS tombstones_owner ON tombstones (owner)")

    # -- connections and transactions ----------------------------------------------------------
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
        conn = apsw.Connection(str(self.path))
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)
        # page_size only takes effect before the first table exists; 8 KiB keeps a 1.5 KiB
        # embedding inside its b-tree cell instead of an overflow page.
        conn.execute("PRAGMA page_size = 8192")
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextlib.contextmanager
    def _write(self, conn: apsw.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except apsw.Error as exc:
            raise StorageError(f"SQLite error on {self.path}: {exc}") from exc

    # -- Store protocol ------------------------------------------------------------------------
    def ensure_model(self, name: str, dim: int, kind: str = "embedding") -> None:
        keys = model_keys(kind)
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                recorded = dict(
                    conn.execute(f"SELECT key, value FROM meta WHERE key IN ({_marks(2)})", keys).fetchall()
                )
                if check_model(recorded, kind, name, dim, str(self.path)):
                    conn.executemany(
                        "INSERT INTO meta VALUES (?, ?)", zip(keys, (name, str(dim)), strict=True)
                    )

    def insert(
        self,
        tenant: Tenant,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession] | None = None,
        tokens: Sequence[bytes] | None = None,
    ) -> None:
        owner = _owner_key(tenant)
        check_insert(owner, rows, vectors, supersede, tokens)
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                self._insert_rows(conn, owner, rows, vectors, supersede or {}, tokens)

    def _insert_rows(
        self,
        conn: apsw.Connection,
        owner: str,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession],
        tokens: Sequence[bytes] | None,
    ) -> None:
        new_rows = {row.id: row for row in rows}
        rows = [self._checked_context(conn, owner, row, new_rows.keys()) for row in rows]
        for i, (row, vector) in enumerate(zip(rows, vectors, strict=True)):
            self._insert_one(conn, owner, row, vector, tokens[i] if tokens is not None else None)
        for new_id, spec in supersede.items():
            self._supersede(conn, owner, new_rows[new_id], spec)

    def _supersede(self, conn: apsw.Connection, owner: str, new: Memory, spec: Supersession) -> None:
        old = conn.execute(
            "SELECT rid, memory_type, superseded_by FROM memories WHERE id = ? AND owner = ?",
            (spec.old_id, owner),
        ).fetchone()
        if old is None:
            raise NotFound(spec.old_id)
        rid, old_type, superseded_by = old
        check_supersession(spec, new, old_type, superseded_by)
        conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ?, retracted = ? WHERE rid = ?",
            (new.id, _ts(spec.at), int(spec.retract), rid),
        )
        conn.execute("UPDATE memory_vec SET live = 0 WHERE owner = ? AND rid = ?", (owner, rid))

    @staticmethod
    def _checked_context(conn: apsw.Connection, owner: str, row: Memory, batch: Collection[str]) -> Memory:
        """The row, without its context if the turn it quotes was forgotten meanwhile (remember_turn
        reads it before this transaction; a turn of the same batch is fine)."""
        context_id = getattr(row, "context_id", None)
        if not context_id or context_id in batch:
            return row
        found = conn.execute("SELECT 1 FROM memories WHERE id = ? AND owner = ?", (context_id, owner))
        return row if found.fetchone() else without_context(row)

    def _insert_one(
        self, conn: apsw.Connection, owner: str, row: Memory, vector: Vectors, tokens: bytes | None
    ) -> None:
        values = memory_to_row(row)
        values["owner"] = owner
        columns = ", ".join(values)
        placeholders = ", ".join(f":{c}" for c in values)
        try:
            conn.execute(f"INSERT INTO memories ({columns}) VALUES ({placeholders})", values)
        except apsw.ConstraintError as exc:
            raise Conflict(f"memory id {row.id} already exists") from exc
        rid = conn.last_insert_rowid()
        conn.execute(
            "INSERT INTO memory_fts (rowid, body) VALUES (?, ?)",
            (rid, index_text(owner, keyword_text_of(row))),
        )
        conn.execute(
            "INSERT INTO memory_vec VALUES (?, ?, ?, ?, ?)",
            (
                owner,
                rid,
                row.memory_type,
                int(values.get("superseded_by") is None),
                np.asarray(vector, dtype=np.float32).tobytes(),
            ),
        )
        # OR REPLACE / DELETE: a rid can be reused after a forget; never inherit another row's tokens.
        if tokens is not None:
            conn.execute("INSERT OR REPLACE INTO memory_tokens VALUES (?, ?, ?)", (owner, rid, tokens))
        else:
            conn.execute("DELETE FROM memory_tokens WHERE owner = ? AND rid = ?", (owner, rid))

    def fetch(self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True) -> list[Memory]:
        wanted = wanted_ids(ids)
        if not wanted:
            return []
        owners = self._read_owners(tenant, include_catalog)
        # Unary + keeps the planner on the id index: with the owner index it scanned all of a heavy
        # tenant's rows (57 ms at 24k rows).
        sql = (
            f"SELECT {_SELECT} FROM memories WHERE id IN ({_marks(len(wanted))}) "
            f"AND +owner IN ({_marks(len(owners))})"
        )
        with self._errors():
            found = {m.id: m for m in self._rows(sql, (*wanted, *owners))}
        return [found[i] for i in wanted if i in found]

    def token_vectors(
        self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True
    ) -> dict[str, bytes]:
        wanted = wanted_ids(ids)
        if not wanted:
            return {}
        owners = self._read_owners(tenant, include_catalog)
        sql = f"""SELECT m.id, t.tokens FROM memories m
                  JOIN memory_tokens t ON t.owner = m.owner AND t.rid = m.rid
                  WHERE m.id IN ({_marks(len(wanted))}) AND +m.owner IN ({_marks(len(owners))})"""
        with self._errors():
            return dict(self._conn().execute(sql, (*wanted, *owners)).fetchall())

    def rows_without_tokens(self, tenant: Tenant, limit: int) -> list[Memory]:
        sql = f"""SELECT {_SELECT} FROM memories m WHERE owner = ? AND NOT EXISTS
                  (SELECT 1 FROM memory_tokens t WHERE t.owner = m.owner AND t.rid = m.rid)
                  ORDER BY rid LIMIT ?"""
        with self._errors():
            return self._rows(sql, (_owner_key(tenant), limit))

    def set_tokens(self, tenant: Tenant, tokens: Mapping[str, bytes]) -> None:
        owner = _owner_key(tenant)
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                for memory_id, blob in tokens.items():
                    conn.execute(
                        "INSERT OR REPLACE INTO memory_tokens SELECT owner, rid, ? FROM memories "
                        "WHERE id = ? AND owner = ?",
                        (blob, memory_id, owner),
                    )

    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        owners = self._read_owners(tenant, "catalog" in where.memory_types)
        terms = fts_query(owners, query)
        if terms is None or not where.memory_types:
            return []
        # Type and state are filtered on the joined row, not as FTS terms: bm25() counts the document
        # frequency of every phrase in the query, and a "live" or "episodic" token is in every row of
        # the store (measured: 4 ms of a 4.4 ms query at 100k rows). The owner is checked again here,
        # as a second wall behind the owner-prefixed terms.
        sql = f"""
            SELECT m.id, bm25(memory_fts) AS score
            FROM memory_fts JOIN memories m ON m.rid = memory_fts.rowid
            WHERE memory_fts MATCH ? AND m.owner IN ({_marks(len(owners))})
              AND m.memory_type IN ({_marks(len(where.memory_types))})
              {"" if where.include_superseded else "AND m.superseded_by IS NULL"}
            ORDER BY score LIMIT ?"""
        params = (terms, *owners, *sorted(where.memory_types), limit)
        with self._errors():
            rows = self._conn().execute(sql, params).fetchall()
        return [LegHit(id=i, score=-s) for i, s in rows]  # FTS5 bm25() is negated: lower is better

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        if not where.memory_types:
            return []
        owners = self._read_owners(tenant, "catalog" in where.memory_types)
        query = np.asarray(vector, dtype=np.float32)
        with self._errors():
            conn = self._conn()
            with conn:  # one read snapshot for the index checks and the search
                indexes = {owner: self.ann.get(conn, owner) for owner in owners}
                if not any(indexes.values()):  # small tenants: the exact scan, as it always was
                    rows = self._exact_vector(conn, owners, query, where, limit)
                else:  # each owner on its own path, merged by distance
                    rows = []
                    for owner, index in indexes.items():
                        if index is None:
                            rows += self._exact_vector(conn, [owner], query, where, limit)
                        else:
                            rows += self._approximate_vector(conn, owner, index, query, where, limit)
                    rows = sorted(rows, key=lambda r: r[1])[:limit]
        return [LegHit(id=i, score=1.0 - d) for i, d in rows]

    @staticmethod
    def _exact_vector(
        conn: apsw.Connection, owners: Sequence[str], query: np.ndarray, where: SearchFilter, limit: int
    ) -> list[tuple[str, float]]:
        # Scan the tenant's vectors alone (joining every scanned row to ``memories`` cost 7x at 24k
        # rows for one user); only the nearest ``limit`` are joined, re-checking the owner there.
        sql = f"""
            SELECT m.id, nearest.distance FROM (
                SELECT rid, owner, vec_distance_cosine(embedding, ?) AS distance FROM memory_vec
                WHERE owner IN ({_marks(len(owners))})
                  AND memory_type IN ({_marks(len(where.memory_types))})
                  {"" if where.include_superseded else "AND live = 1"}
                ORDER BY distance LIMIT ?
            ) AS nearest JOIN memories m ON m.rid = nearest.rid AND m.owner = nearest.owner
            ORDER BY nearest.distance"""
        params = (query.tobytes(), *owners, *sorted(where.memory_types), limit)
        return conn.execute(sql, params).fetchall()

    def _approximate_vector(
        self,
        conn: apsw.Connection,
        owner: str,
        index: TenantIndex,
        query: np.ndarray,
        where: SearchFilter,
        limit: int,
    ) -> list[tuple[str, float]]:
        """One heavy owner: the graph's candidates plus the rows written since it was built (exact),
        re-scored exactly and filtered on the current rows (type, live, owner), as the exact path does."""
        share = index.wanted_share(where.memory_types, where.include_superseded)
        if share < MIN_WANTED_SHARE:  # a rare type of this owner: the graph would not reach enough
            return self._exact_vector(conn, [owner], query, where, limit)
        filters = f"AND memory_type IN ({_marks(len(where.memory_types))}) " + (
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
            rows = conn.execute(sql, params).fetchall()
            # Too few survived the filters (forgotten, superseded or other-type rows among the
            # candidates): widen the search, up to the whole graph.
            if len(rows) >= limit or count >= index.size:
                return rows
            count = min(index.size, count * 4)
            self.ann.schedule(owner)  # rebuilt if it holds many forgotten rows (ann._fresh)

    def record_use(
        self, tenant: Tenant, uses: Mapping[str, int], at: datetime, *, max_wait_s: float | None = None
    ) -> dict[str, int]:
        if not uses or tenant is None:
            return {}
        by_increment: dict[int, list[str]] = {}
        for memory_id, n in uses.items():
            by_increment.setdefault(n, []).append(memory_id)
        counts: dict[str, int] = {}
        with self._errors():
            conn = self._conn()
            if max_wait_s is not None:
                conn.set_busy_timeout(round(max_wait_s * 1000))
            try:
                with self._write(conn):
                    for n, ids in by_increment.items():
                        sql = f"""UPDATE memories SET use_count = use_count + ?,
                                      last_used_at = max(coalesce(last_used_at, ''), ?)
                                  WHERE +owner = ? AND +memory_type = 'semantic'
                                    AND id IN ({_marks(len(ids))})
                                  RETURNING id, use_count"""
                        counts.update(conn.execute(sql, (n, _ts(at), tenant, *ids)).fetchall())
            except apsw.BusyError as exc:
                if max_wait_s is None:
                    raise
                raise StoreBusy(f"another writer holds {self.path}") from exc
            finally:
                conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        return counts

    def forget(self, tenant: Tenant, memory_id: str, at: datetime) -> Tombstone:
        owner = _owner_key(tenant)
        if not is_well_formed_id(memory_id):
            raise NotFound(str(memory_id))
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                row = conn.execute(
                    "SELECT rid, memory_type, created_at, supersedes, superseded_by FROM memories "
                    "WHERE id = ? AND owner = ?",
                    (memory_id, owner),
                ).fetchone()
                if row is None:
                    raise NotFound(memory_id)
                rid, memory_type, created_at, supersedes, superseded_by = row
                if memory_type == "episodic":
                    self._drop_quotes(conn, owner, memory_id)
                if supersedes:
                    self._mend_chain(conn, owner, memory_id, supersedes, superseded_by)
                conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (rid,))
                conn.execute("DELETE FROM memory_vec WHERE owner = ? AND rid = ?", (owner, rid))
                conn.execute("DELETE FROM memory_tokens WHERE owner = ? AND rid = ?", (owner, rid))
                conn.execute("DELETE FROM memories WHERE rid = ?", (rid,))
                conn.execute(
                    "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?)",
                    (memory_id, owner, memory_type, created_at, _ts(at)),
                )
        return Tombstone(
            id=memory_id,
            user_id=tenant,
            memory_type=memory_type,
            created_at=datetime.fromisoformat(created_at),
            forgotten_at=at,
        )

    def _mend_chain(
        self, conn: apsw.Connection, owner: str, gone: str, before: str, after: str | None
    ) -> None:
        """Forgetting a link of a supersession chain: the row it replaced takes its place, re-linked to
        the row that replaced it, else live again (its supersession time and retraction cleared)."""
        prev = conn.execute(
            "SELECT rid FROM memories WHERE id = ? AND owner = ? AND superseded_by = ?", (before, owner, gone)
        ).fetchone()
        if prev is None:
            return
        if after is None:
            conn.execute(
                "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, retracted = 0 WHERE rid = ?",
                (prev[0],),
            )
            conn.execute("UPDATE memory_vec SET live = 1 WHERE owner = ? AND rid = ?", (owner, prev[0]))
            return
        conn.execute("UPDATE memories SET superseded_by = ? WHERE rid = ?", (after, prev[0]))
        conn.execute("UPDATE memories SET supersedes = ? WHERE id = ? AND owner = ?", (before, after, owner))

    def _drop_quotes(self, conn: apsw.Connection, owner: str, episode_id: str) -> None:
        """Forgetting a turn also removes its words from the turns that were indexed with it as context."""
        quoting = conn.execute(
            f"SELECT rid, {_SELECT} FROM memories WHERE owner = ? AND memory_type = 'episodic' "
            "AND json_extract(attrs, '$.context_id') = ?",
            (owner, episode_id),
        ).fetchall()
        for rid, *columns in quoting:
            cleared = without_context(memory_from_row(dict(zip(MEMORY_COLUMNS, columns, strict=True))))
            conn.execute(
                "UPDATE memories SET attrs = ? WHERE rid = ?", (memory_to_row(cleared)["attrs"], rid)
            )
            conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (rid,))
            conn.execute(
                "INSERT INTO memory_fts (rowid, body) VALUES (?, ?)",
                (rid, index_text(owner, keyword_text_of(cleared))),
            )

    def list_memories(
        self,
        tenant: Tenant,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        check_page(limit, offset)
        sql = f"""SELECT {_SELECT} FROM memories WHERE owner = ? AND memory_type = ?
                  {"" if include_superseded else "AND superseded_by IS NULL"}
                  ORDER BY created_at DESC, rid DESC LIMIT ? OFFSET ?"""
        with self._errors():
            return self._rows(sql, (_owner_key(tenant), memory_type, limit, offset))

    # -- ConsolidationStore protocol -----------------------------------------------------------
    def waiting_episodes(self, tenant: str, limit: int) -> list[EpisodicMemory]:
        sql = f"""SELECT {_SELECT} FROM memories
                  WHERE owner = ? AND memory_type = 'episodic' AND consolidated = 0
                  ORDER BY created_at, id LIMIT ?"""
        with self._errors():
            rows = self._rows(sql, (tenant, limit))
        return [r for r in rows if isinstance(r, EpisodicMemory)]

    def apply_consolidation(self, tenant: str, write: ConsolidationWrite) -> None:
        marks = _marks(len(write.episode_ids))
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                waiting = conn.execute(
                    f"""SELECT count(*) FROM memories WHERE owner = ? AND memory_type = 'episodic'
                        AND consolidated = 0 AND id IN ({marks})""",
                    (tenant, *write.episode_ids),
                ).fetchone()[0]
                if waiting != len(set(write.episode_ids)):
                    raise Conflict(BATCH_CHANGED)
                self._insert_rows(conn, tenant, write.rows, write.vectors, write.supersede, write.tokens)
                for merge in write.merges:
                    self._merge_fact(conn, tenant, merge, write.at)
                for feedback in write.feedback:
                    self._playbook_feedback(conn, tenant, feedback, write.at)
                conn.execute(
                    f"""UPDATE memories SET consolidated = ? WHERE owner = ? AND memory_type = 'episodic'
                        AND id IN ({marks})""",
                    (2 if write.skipped else 1, tenant, *write.episode_ids),
                )

    def _merge_fact(self, conn: apsw.Connection, owner: str, merge: FactMerge, at: datetime) -> None:
        rid, attrs = _typed_row(conn, merge.fact_id, owner, "semantic")
        conn.execute(
            "UPDATE memories SET attrs = ?, use_count = use_count + 1, last_used_at = ? WHERE rid = ?",
            (merged_provenance(attrs, merge.episode_ids), _ts(at), rid),
        )

    def _playbook_feedback(
        self, conn: apsw.Connection, owner: str, feedback: PlaybookFeedback, at: datetime
    ) -> None:
        rid, attrs = _typed_row(conn, feedback.playbook_id, owner, "procedural")
        if feedback.success:
            conn.execute(
                "UPDATE memories SET success_count = success_count + 1, last_success_at = ? WHERE rid = ?",
                (_ts(at), rid),
            )
        else:
            conn.execute(
                "UPDATE memories SET failure_count = failure_count + 1, attrs = ? WHERE rid = ?",
                (refined_attrs(attrs, feedback.refined_steps), rid),
            )

    def tenants(self) -> list[str]:
        sql = """SELECT owner FROM memories WHERE owner != ''
                 UNION SELECT owner FROM tombstones WHERE owner != '' ORDER BY owner"""
        with self._errors():
            rows = self._conn().execute(sql).fetchall()
        return [r[0] for r in rows]

    # -- TransferStore protocol ----------------------------------------------------------------
    def scan(self, tenant: Tenant, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        sql = f"""SELECT rid, consolidated, {_SELECT} FROM memories WHERE owner = ? AND rid > ?
                  ORDER BY rid LIMIT ?"""
        with self._errors():
            rows = self._conn().execute(sql, (_owner_key(tenant), after, limit)).fetchall()
        return [(r[0], memory_from_row(dict(zip(MEMORY_COLUMNS, r[2:], strict=True))), r[1]) for r in rows]

    def tombstones(self, tenant: Tenant) -> list[Tombstone]:
        sql = """SELECT id, memory_type, created_at, forgotten_at FROM tombstones WHERE owner = ?
                 ORDER BY forgotten_at, id"""
        with self._errors():
            rows = self._conn().execute(sql, (_owner_key(tenant),)).fetchall()
        return [
            Tombstone(
                id=i,
                user_id=tenant,
                memory_type=t,
                created_at=datetime.fromisoformat(c),
                forgotten_at=datetime.fromisoformat(f),
            )
            for i, t, c, f in rows
        ]

    def add_tombstones(self, tenant: Tenant, tombstones: Sequence[Tombstone]) -> None:
        owner = _owner_key(tenant)
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                for t in tombstones:
                    if (t.user_id or "") != owner:
                        raise InvalidInput(f"tombstone {t.id} does not belong to this tenant")
                    try:
                        conn.execute(
                            "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?)",
                            (t.id, owner, t.memory_type, _ts(t.created_at), _ts(t.forgotten_at)),
                        )
                    except apsw.ConstraintError as exc:
                        raise Conflict(f"tombstone {t.id} already exists") from exc

    def export_keys(self) -> list[tuple[ApiKeyRecord, str]]:
        with self._errors():
            rows = (
                self._conn()
                .execute(f"SELECT {_KEY_COLUMNS}, key_hash FROM api_keys ORDER BY created_at, id")
                .fetchall()
            )
        return [(_key_record(r[:-1]), r[-1]) for r in rows]

    # -- KeyStore protocol ---------------------------------------------------------------------
    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                conn.execute(
                    "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        record.id,
                        key_hash,
                        record.user_id,
                        record.label,
                        _ts(record.created_at),
                        _ts(record.revoked_at) if record.revoked_at else None,
                    ),
                )

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._errors():
            row = (
                self._conn()
                .execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_hash = ?", (key_hash,))
                .fetchone()
            )
        return _key_record(row) if row else None

    def get_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._errors():
            row = (
                self._conn()
                .execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,))
                .fetchone()
            )
        return _key_record(row) if row else None

    def list_keys(self, user_id: str | None = None) -> list[ApiKeyRecord]:
        sql = f"SELECT {_KEY_COLUMNS} FROM api_keys"
        params: tuple[str, ...] = ()
        if user_id is not None:
            sql, params = sql + " WHERE user_id = ?", (user_id,)
        with self._errors():
            rows = self._conn().execute(sql + " ORDER BY created_at", params).fetchall()
        return [_key_record(r) for r in rows]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._errors():
            conn = self._conn()
            with self._write(conn):
                conn.execute(
                    "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    (_ts(at), key_id),
                )
                return conn.changes() > 0

    def close(self) -> None:
        self.ann.close()  # first: its build thread reads through a connection of its own
        with self._lock:
            for conn in self._open.values():
                conn.close()
            self._open.clear()
        self._local = threading.local()

    # -- helpers -------------------------------------------------------------------------------
    def _rows(self, sql: str, params: Sequence[Any]) -> list[Memory]:
        return [
            memory_from_row(dict(zip(MEMORY_COLUMNS, r, strict=True)))
            for r in self._conn().execute(sql, params)
        ]

    @staticmethod
    def _read_owners(tenant: Tenant, include_catalog: bool) -> list[str]:
        owner = _owner_key(tenant)
        return [owner, ""] if include_catalog and owner != "" else [owner]

    def stats(self) -> dict[str, Any]:
        """Row counts per type and the recorded model, for `engram info`."""
        with self._errors():
            conn = self._conn()
            counts = dict(conn.execute("SELECT memory_type, count(*) FROM memories GROUP BY 1").fetchall())
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            users = conn.execute("SELECT count(DISTINCT owner) FROM memories WHERE owner != ''").fetchone()[0]
        return {"path": str(self.path), "counts": counts, "users": users, "meta": meta}


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


_KEY_COLUMNS = "id, user_id, label, created_at, revoked_at"


def _key_record(row: Sequence[Any]) -> ApiKeyRecord:
    key_id, user_id, label, created_at, revoked_at = row
    return ApiKeyRecord(
        id=key_id,
        user_id=user_id,
        label=label,
        created_at=datetime.fromisoformat(created_at),
        revoked_at=datetime.fromisoformat(revoked_at) if revoked_at else None,
    )


def _use_wal(conn: apsw.Connection) -> None:
    """Put the file in WAL mode (a property of the file: once is enough).

    Switching needs an exclusive lock and SQLite answers "database is locked" at once, without the
    busy handler, when another process holds one: two processes creating the same new store raced
    here. Retry for as long as the busy timeout.
    """
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")  # a file that cannot do WAL keeps its mode
            return
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _mark_consolidated_before_the_watermark(conn: apsw.Connection) -> None:
    """Upgrade to schema 3: consolidation no longer reads past a watermark but marks each episode it
    consumed (a turn committed late could land behind the watermark); mark what the watermark covered."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
    if "consolidated" not in columns:
        conn.execute("ALTER TABLE memories ADD COLUMN consolidated INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        """UPDATE memories SET consolidated = 1 WHERE memory_type = 'episodic' AND EXISTS (
               SELECT 1 FROM consolidation_state s WHERE s.owner = memories.owner
               AND (memories.created_at, memories.id) <= (s.created_at, s.episode_id))"""
    )


def _typed_row(conn: apsw.Connection, memory_id: str, owner: str, memory_type: str) -> tuple[int, Any]:
    """(rid, attrs) of one of the owner's rows of that type (the caller holds the write lock)."""
    row = conn.execute(
        "SELECT rid, attrs FROM memories WHERE id = ? AND owner = ? AND memory_type = ?",
        (memory_id, owner, memory_type),
    ).fetchone()
    if row is None:
        raise NotFound(memory_id)
    return row[0], row[1]


def _ts(at: datetime) -> str:
    """Stored timestamps: UTC ISO 8601 with microseconds always, so text order is time order."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def _marks(n: int) -> str:
    return ", ".join("?" * n)
