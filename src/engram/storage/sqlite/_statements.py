"""The SQLite store's statements for the shared rules (engram.storage._statements).

A row is written to three tables at once: ``memories``, ``memory_fts`` (its keyword text, terms
prefixed by the owner) and ``memory_vec`` (its embedding, with copies of the filter columns), plus
``memory_tokens`` when it has token vectors; every statement here keeps them in step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import apsw
import numpy as np

from engram.errors import Conflict
from engram.models import Memory, Tombstone, Vectors
from engram.storage._rows import MEMORY_COLUMNS, keyword_text_of, memory_from_row, memory_to_row
from engram.storage._statements import KEY_COLUMNS, WAITING, KeyLookup, RowState, as_time, key_record
from engram.storage.base import ApiKeyRecord, SessionLookup
from engram.storage.sqlite._fts import index_text

SELECT = ", ".join(MEMORY_COLUMNS)
_STATE = "rid, memory_type, created_at, supersedes, superseded_by"  # a RowState's columns
_KEY_INSERT = "id, key_hash, user_id, label, created_at, revoked_at, scope, expires_at"


class SQLiteRows:
    """TenantStatements on one connection (in its write transaction, or reading) for one owner."""

    def __init__(self, conn: apsw.Connection, owner: str) -> None:
        self.conn = conn
        self.owner = owner

    # -- reads ---------------------------------------------------------------------------------
    def rows_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> list[Memory]:
        # Unary + keeps the planner on the id index: with the owner index it scanned all of a heavy
        # tenant's rows (57 ms at 24k rows).
        sql = f"""SELECT {SELECT} FROM memories
                  WHERE id IN ({marks(len(ids))}) AND +owner IN ({marks(len(owners))})"""
        return memories(self.conn, sql, (*ids, *owners))

    def tokens_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> dict[str, bytes]:
        sql = f"""SELECT m.id, t.tokens FROM memories m
                  JOIN memory_tokens t ON t.owner = m.owner AND t.rid = m.rid
                  WHERE m.id IN ({marks(len(ids))}) AND +m.owner IN ({marks(len(owners))})"""
        return dict(fetch_all(self.conn, sql, (*ids, *owners)))

    def page(self, memory_type: str, include_superseded: bool, limit: int, offset: int) -> list[Memory]:
        sql = f"""SELECT {SELECT} FROM memories WHERE owner = ? AND memory_type = ?
                  {"" if include_superseded else "AND superseded_by IS NULL"}
                  ORDER BY created_at DESC, rid DESC LIMIT ? OFFSET ?"""
        return memories(self.conn, sql, (self.owner, memory_type, limit, offset))

    def count(self, memory_type: str, include_superseded: bool, limit: int) -> int:
        sql = f"""SELECT count(*) FROM (SELECT 1 FROM memories WHERE owner = ? AND memory_type = ?
                  {"" if include_superseded else "AND superseded_by IS NULL"} LIMIT ?)"""
        row = fetch_one(self.conn, sql, (self.owner, memory_type, limit))
        return int(row[0]) if row else 0

    def waiting(self, limit: int) -> list[Memory]:
        sql = f"""SELECT {SELECT} FROM memories
                  WHERE owner = ? AND memory_type = 'episodic' AND consolidated = {WAITING}
                  ORDER BY created_at, id LIMIT ?"""
        return memories(self.conn, sql, (self.owner, limit))

    def without_tokens(self, limit: int) -> list[Memory]:
        sql = f"""SELECT {SELECT} FROM memories m WHERE owner = ? AND NOT EXISTS
                  (SELECT 1 FROM memory_tokens t WHERE t.owner = m.owner AND t.rid = m.rid)
                  ORDER BY rid LIMIT ?"""
        return memories(self.conn, sql, (self.owner, limit))

    def scan(self, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        sql = f"""SELECT rid, consolidated, {SELECT} FROM memories WHERE owner = ? AND rid > ?
                  ORDER BY rid LIMIT ?"""
        rows = fetch_all(self.conn, sql, (self.owner, after, limit))
        return [(r[0], memory_from_row(dict(zip(MEMORY_COLUMNS, r[2:], strict=True))), r[1]) for r in rows]

    def tombstone_rows(self) -> list[tuple[str, str, datetime, datetime]]:
        sql = """SELECT id, memory_type, created_at, forgotten_at FROM tombstones WHERE owner = ?
                 ORDER BY forgotten_at, id"""
        return [(i, t, as_time(c), as_time(f)) for i, t, c, f in fetch_all(self.conn, sql, (self.owner,))]

    # -- inserts and supersession --------------------------------------------------------------
    def lock_owner(self) -> None:
        pass  # the caller's BEGIN IMMEDIATE already keeps every other writer out

    def has_row(self, memory_id: str) -> bool:
        return (
            fetch_one(self.conn, "SELECT 1 FROM memories WHERE id = ? AND owner = ?", (memory_id, self.owner))
            is not None
        )

    def insert_rows(self, rows: Sequence[Memory], vectors: Vectors, tokens: Sequence[bytes] | None) -> None:
        for i, (row, vector) in enumerate(zip(rows, vectors, strict=True)):
            self._insert_one(row, vector, tokens[i] if tokens is not None else None)

    def _insert_one(self, row: Memory, vector: Vectors, tokens: bytes | None) -> None:
        values = memory_to_row(row)
        values["owner"] = self.owner
        columns = ", ".join(values)
        placeholders = ", ".join(f":{c}" for c in values)
        try:
            self.conn.execute(f"INSERT INTO memories ({columns}) VALUES ({placeholders})", values)
        except apsw.ConstraintError as exc:
            raise Conflict(f"memory id {row.id} already exists") from exc
        rid = self.conn.last_insert_rowid()
        self.conn.execute(
            "INSERT INTO memory_fts (rowid, body) VALUES (?, ?)",
            (rid, index_text(self.owner, keyword_text_of(row))),
        )
        live = int(values.get("superseded_by") is None)
        embedding = np.asarray(vector, dtype=np.float32).tobytes()
        self.conn.execute(
            "INSERT INTO memory_vec VALUES (?, ?, ?, ?, ?)",
            (self.owner, rid, row.memory_type, live, embedding),
        )
        # OR REPLACE / DELETE: a rid can be reused after a forget; never inherit another row's tokens.
        if tokens is not None:
            self.conn.execute(
                "INSERT OR REPLACE INTO memory_tokens VALUES (?, ?, ?)", (self.owner, rid, tokens)
            )
        else:
            self.conn.execute("DELETE FROM memory_tokens WHERE owner = ? AND rid = ?", (self.owner, rid))

    def set_tokens(self, tokens: Mapping[str, bytes]) -> None:
        for memory_id, blob in tokens.items():
            self.conn.execute(
                "INSERT OR REPLACE INTO memory_tokens SELECT owner, rid, ? FROM memories "
                "WHERE id = ? AND owner = ?",
                (blob, memory_id, self.owner),
            )

    def lock_row(self, memory_id: str) -> RowState[int] | None:
        # The caller's BEGIN IMMEDIATE already holds the file's write lock.
        row = fetch_one(
            self.conn, f"SELECT {_STATE} FROM memories WHERE id = ? AND owner = ?", (memory_id, self.owner)
        )
        return None if row is None else RowState(row[0], row[1], as_time(row[2]), row[3], row[4])

    def mark_superseded(self, key: int, by: str, at: datetime, retract: bool) -> None:
        self.conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ?, retracted = ? "
            "WHERE rid = ? AND owner = ?",
            (by, timestamp(at), int(retract), key, self.owner),
        )
        self.conn.execute("UPDATE memory_vec SET live = 0 WHERE owner = ? AND rid = ?", (self.owner, key))

    # -- forgetting ----------------------------------------------------------------------------
    def delete_row(self, memory_id: str) -> RowState[int] | None:
        state = self.lock_row(memory_id)
        if state is not None:
            self.conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (state.key,))
            self.conn.execute("DELETE FROM memory_vec WHERE owner = ? AND rid = ?", (self.owner, state.key))
            self.conn.execute(
                "DELETE FROM memory_tokens WHERE owner = ? AND rid = ?", (self.owner, state.key)
            )
            self.conn.execute("DELETE FROM memories WHERE rid = ? AND owner = ?", (state.key, self.owner))
        return state

    def quoting(self, episode_id: str) -> list[tuple[int, Memory]]:
        sql = f"""SELECT rid, {SELECT} FROM memories WHERE owner = ? AND memory_type = 'episodic'
                  AND json_extract(attrs, '$.context_id') = ?"""
        rows = fetch_all(self.conn, sql, (self.owner, episode_id))
        return [(r[0], memory_from_row(dict(zip(MEMORY_COLUMNS, r[1:], strict=True)))) for r in rows]

    def set_context(self, key: int, attrs: str, keyword_text: str) -> None:
        self.conn.execute(
            "UPDATE memories SET attrs = ? WHERE rid = ? AND owner = ?", (attrs, key, self.owner)
        )
        self.conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (key,))
        self.conn.execute(
            "INSERT INTO memory_fts (rowid, body) VALUES (?, ?)", (key, index_text(self.owner, keyword_text))
        )

    def revive(self, memory_id: str, superseded_by: str, retracted: bool) -> None:
        revived = fetch_all(
            self.conn,
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, retracted = 0 "
            "WHERE id = ? AND owner = ? AND superseded_by = ? AND (retracted = 0 OR ?) RETURNING rid",
            (memory_id, self.owner, superseded_by, int(retracted)),
        )
        for (rid,) in revived:
            self.conn.execute("UPDATE memory_vec SET live = 1 WHERE owner = ? AND rid = ?", (self.owner, rid))

    def relink(self, memory_id: str, superseded_by: str, to: str) -> bool:
        self.conn.execute(
            "UPDATE memories SET superseded_by = ? WHERE id = ? AND owner = ? AND superseded_by = ?",
            (to, memory_id, self.owner, superseded_by),
        )
        return self.conn.changes() > 0

    def set_supersedes(self, memory_id: str, supersedes: str) -> None:
        self.conn.execute(
            "UPDATE memories SET supersedes = ? WHERE id = ? AND owner = ?",
            (supersedes, memory_id, self.owner),
        )

    def add_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        for t in tombstones:
            values = (t.id, self.owner, t.memory_type, timestamp(t.created_at), timestamp(t.forgotten_at))
            try:
                self.conn.execute("INSERT INTO tombstones VALUES (?, ?, ?, ?, ?)", values)
            except apsw.ConstraintError as exc:
                raise Conflict(f"tombstone {t.id} already exists") from exc

    # -- consolidation -------------------------------------------------------------------------
    def claim_waiting(self, episode_ids: Sequence[str]) -> int:
        # The caller's BEGIN IMMEDIATE already keeps every other writer out.
        sql = f"""SELECT count(*) FROM memories WHERE owner = ? AND memory_type = 'episodic'
                  AND consolidated = {WAITING} AND id IN ({marks(len(episode_ids))})"""
        row = fetch_one(self.conn, sql, (self.owner, *episode_ids))
        return int(row[0]) if row else 0

    def lock_typed(self, memory_id: str, memory_type: str) -> tuple[int, Any] | None:
        sql = "SELECT rid, attrs FROM memories WHERE id = ? AND owner = ? AND memory_type = ?"
        row = fetch_one(self.conn, sql, (memory_id, self.owner, memory_type))
        return None if row is None else (row[0], row[1])

    def merge_fact(self, key: int, attrs: str, at: datetime) -> None:
        self.conn.execute(
            "UPDATE memories SET attrs = ?, use_count = use_count + 1, last_used_at = ? "
            "WHERE rid = ? AND owner = ?",
            (attrs, timestamp(at), key, self.owner),
        )

    def playbook_succeeded(self, key: int, at: datetime) -> None:
        self.conn.execute(
            "UPDATE memories SET success_count = success_count + 1, last_success_at = ? "
            "WHERE rid = ? AND owner = ?",
            (timestamp(at), key, self.owner),
        )

    def playbook_failed(self, key: int, attrs: str) -> None:
        self.conn.execute(
            "UPDATE memories SET failure_count = failure_count + 1, attrs = ? WHERE rid = ? AND owner = ?",
            (attrs, key, self.owner),
        )

    def mark_episodes(self, episode_ids: Sequence[str], state: int) -> None:
        sql = f"""UPDATE memories SET consolidated = ? WHERE owner = ? AND memory_type = 'episodic'
                  AND id IN ({marks(len(episode_ids))})"""
        self.conn.execute(sql, (state, self.owner, *episode_ids))


class SQLiteMeta:
    """StoreStatements on one connection: the meta records, API keys, the tenants."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    def read_meta(self, keys: Sequence[str]) -> dict[str, str]:
        return dict(
            fetch_all(self.conn, f"SELECT key, value FROM meta WHERE key IN ({marks(len(keys))})", keys)
        )

    def add_meta(self, values: Mapping[str, str]) -> None:
        self.conn.executemany("INSERT INTO meta VALUES (?, ?)", list(values.items()))

    def insert_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        revoked_at = timestamp(record.revoked_at) if record.revoked_at else None
        expires_at = timestamp(record.expires_at) if record.expires_at else None
        values = (
            *(record.id, key_hash, record.user_id, record.label, timestamp(record.created_at)),
            *(revoked_at, record.scope, expires_at),
        )
        try:
            self.conn.execute(f"INSERT INTO api_keys ({_KEY_INSERT}) VALUES ({marks(8)})", values)
        except apsw.ConstraintError as exc:  # as PostgreSQL's unique violation: a Conflict
            raise Conflict(f"API key {record.id} (or its hash) already exists") from exc

    def select_keys(self, by: KeyLookup | None, value: str | None) -> list[tuple[ApiKeyRecord, str]]:
        where, params = ("", ()) if by is None else (f" WHERE {by} = ?", (value,))
        sql = f"SELECT {KEY_COLUMNS}, key_hash FROM api_keys{where} ORDER BY created_at, id"
        return [(key_record(r[:-1]), r[-1]) for r in fetch_all(self.conn, sql, params)]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        sql = "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
        self.conn.execute(sql, (timestamp(at), key_id))
        return self.conn.changes() > 0

    def tenants(self) -> list[str]:
        sql = """SELECT owner FROM memories WHERE owner != ''
                 UNION SELECT owner FROM tombstones WHERE owner != '' ORDER BY owner"""
        return [r[0] for r in fetch_all(self.conn, sql)]

    def insert_session(self, token_hash: str, key_id: str, expires_at: datetime) -> None:
        values = (token_hash, key_id, timestamp(expires_at))
        self.conn.execute("INSERT INTO inspector_sessions VALUES (?, ?, ?)", values)

    def select_session(self, token_hash: str) -> tuple[str, datetime] | None:
        sql = "SELECT key_id, expires_at FROM inspector_sessions WHERE token_hash = ?"
        row = fetch_one(self.conn, sql, (token_hash,))
        return None if row is None else (row[0], as_time(row[1]))

    def delete_sessions(self, by: SessionLookup, value: str) -> int:
        self.conn.execute(f"DELETE FROM inspector_sessions WHERE {by} = ?", (value,))
        return self.conn.changes()

    def delete_expired_sessions(self, at: datetime) -> None:
        self.conn.execute("DELETE FROM inspector_sessions WHERE expires_at < ?", (timestamp(at),))


def memories(conn: apsw.Connection, sql: str, params: Sequence[Any]) -> list[Memory]:
    """The rows a statement selecting MEMORY_COLUMNS returns, as models."""
    return [memory_from_row(dict(zip(MEMORY_COLUMNS, r, strict=True))) for r in conn.execute(sql, params)]


# apsw types a row as a tuple of any SQLite value; the statements know which columns they selected.
def fetch_all(conn: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


def fetch_one(conn: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    return conn.execute(sql, params).fetchone()


def timestamp(at: datetime) -> str:
    """Stored timestamps: UTC ISO 8601 with microseconds always, so text order is time order."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def marks(n: int) -> str:
    """``n`` placeholders for an IN list."""
    return ", ".join("?" * n)
