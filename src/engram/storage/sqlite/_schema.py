"""The SQLite store's file: its schema, upgrades and connection settings."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import sqlite_vec

from engram.errors import StorageError
from engram.storage.sqlite._fts import owner_bm25

# 2: memory_tokens, episode context; 3: episodes marked consolidated; 4: keys' scope and expiry (an
# older Engram would let a read-only key write). Older Engrams refuse a newer file.
SCHEMA_VERSION = 4
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
    revoked_at  TEXT,
    scope       TEXT NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write', 'admin')),
    expires_at  TEXT                          -- NULL: never
);
CREATE TABLE IF NOT EXISTS inspector_sessions (  -- added without a version: older Engrams ignore it
    token_hash  TEXT PRIMARY KEY,             -- sha256 of the session token; the token is never stored
    key_id      TEXT NOT NULL,                -- the API key signed in with
    expires_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inspector_sessions_key ON inspector_sessions (key_id);
CREATE TABLE IF NOT EXISTS tombstones (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    memory_type  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    forgotten_at TEXT NOT NULL
);
"""


def connect(path: Path) -> apsw.Connection:
    """A new connection to the file, with sqlite-vec loaded and the store's settings."""
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.enable_load_extension(False)
    conn.register_fts5_function("engram_bm25", owner_bm25)
    # page_size only takes effect before the first table exists; 8 KiB keeps a 1.5 KiB
    # embedding inside its b-tree cell instead of an overflow page.
    conn.execute("PRAGMA page_size = 8192")
    _use_wal(conn)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def prepare(conn: apsw.Connection, path: Path) -> None:
    """Create the schema or upgrade it to SCHEMA_VERSION (the caller holds the write lock); refuse a
    file written by a newer Engram."""
    conn.execute(_SCHEMA)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = SCHEMA_VERSION if row is None else int(str(row[0]))
    if row is None:
        conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif version > SCHEMA_VERSION:
        raise StorageError(
            f"{path} has schema version {version}; this Engram knows up to {SCHEMA_VERSION}: upgrade Engram"
        )
    elif version < SCHEMA_VERSION:  # 2's changes were additive (CREATE IF NOT EXISTS)
        if version < 3:
            _mark_consolidated_before_the_watermark(conn)
        if version < 4:
            _add_key_scope_and_expiry(conn)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    _count_rows_per_owner(conn)
    conn.execute(
        "CREATE INDEX IF NOT EXISTS memories_waiting ON memories (owner, created_at, id) "
        "WHERE memory_type = 'episodic' AND consolidated = 0"
    )
    # (owner) indexes rowid too: an export pages a tenant in write order without sorting
    conn.execute("CREATE INDEX IF NOT EXISTS memories_owner ON memories (owner)")
    conn.execute("CREATE INDEX IF NOT EXISTS tombstones_owner ON tombstones (owner)")


def _count_rows_per_owner(conn: apsw.Connection) -> None:
    """``owner_rows``: each owner's row count, kept by triggers, for BM25 over the owner's rows
    (``_fts.owner_bm25``): counting a heavy tenant's index entries per query cost 17 ms at 100k rows.
    Additive (no schema version): made and filled once, under the caller's write lock; the triggers
    live in the file, so an older Engram's writes keep the counts too."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'owner_rows'").fetchone():
        return
    conn.execute("CREATE TABLE owner_rows (owner TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute("INSERT INTO owner_rows SELECT owner, count(*) FROM memories GROUP BY owner")
    conn.execute(
        """CREATE TRIGGER owner_rows_insert AFTER INSERT ON memories BEGIN
               INSERT INTO owner_rows VALUES (NEW.owner, 1) ON CONFLICT (owner) DO UPDATE SET n = n + 1;
           END"""
    )
    conn.execute(
        """CREATE TRIGGER owner_rows_delete AFTER DELETE ON memories BEGIN
               UPDATE owner_rows SET n = n - 1 WHERE owner = OLD.owner;
           END"""
    )


def _use_wal(conn: apsw.Connection) -> None:
    """Put the file in WAL mode (a property of the file: once is enough).

    Switching needs an exclusive lock and SQLite answers "database is locked" at once, without the
    busy handler, when another process holds one: two processes creating the same new store raced
    here. Retry for as long as the busy timeout.
    """
    row = conn.execute("PRAGMA journal_mode").fetchone()
    if row is not None and row[0] == "wal":
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


def _add_key_scope_and_expiry(conn: apsw.Connection) -> None:
    """Upgrade to schema 4: a key's scope (existing keys keep reading and writing) and expiry (none)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(api_keys)")}
    if "scope" not in columns:
        conn.execute(
            "ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'write' "
            "CHECK (scope IN ('read', 'write', 'admin'))"
        )
    if "expires_at" not in columns:
        conn.execute("ALTER TABLE api_keys ADD COLUMN expires_at TEXT")


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
