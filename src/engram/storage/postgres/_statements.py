"""The PostgreSQL store's statements for the shared rules (engram.storage._statements).

They run inside a transaction that bound the tenant for the RLS policies (``PostgresStore._tx``);
every statement also filters by owner, as a second wall and because the planner needs the explicit
filter to use the per-owner index. Rows a rule decides on are locked (``FOR UPDATE``): unlike SQLite's
one writer, several transactions write at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from engram.models import Memory, Tombstone, Vectors
from engram.storage._rows import MEMORY_COLUMNS, keyword_text_of, memory_from_row, memory_to_row
from engram.storage._statements import KEY_COLUMNS, WAITING, KeyLookup, RowState, key_record
from engram.storage.base import ApiKeyRecord, SessionLookup

if TYPE_CHECKING:  # psycopg is an optional dependency (the postgres extra): imported when a store opens
    import psycopg

    Connection = psycopg.Connection[tuple[Any, ...]]

SELECT = ", ".join(MEMORY_COLUMNS)
_STATE = "rid, memory_type, created_at, supersedes, superseded_by"  # a RowState's columns
_INSERT_COLUMNS = (*MEMORY_COLUMNS, "search_text", "embedding", "tokens")
_CASTS = {"embedding": "::vector", "metadata": "::jsonb", "attrs": "::jsonb"}
_INSERT = (
    f"INSERT INTO memories ({', '.join(_INSERT_COLUMNS)}) VALUES "
    f"({', '.join('%(' + c + ')s' + _CASTS.get(c, '') for c in _INSERT_COLUMNS)})"
)
_TIME_COLUMNS = ("created_at", "event_at", "last_used_at", "last_success_at", "superseded_at")


class PostgresRows:
    """TenantStatements in one transaction bound to one owner."""

    def __init__(self, conn: Connection, owner: str) -> None:
        self.conn = conn
        self.owner = owner

    # -- reads ---------------------------------------------------------------------------------
    def rows_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> list[Memory]:
        sql = f"SELECT {SELECT} FROM memories WHERE id = ANY(%s) AND owner = ANY(%s)"
        return [memory(r) for r in self.conn.execute(sql, (list(ids), list(owners))).fetchall()]

    def tokens_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> dict[str, bytes]:
        return tokens_by_id(self.conn, ids, owners)

    def page(self, memory_type: str, include_superseded: bool, limit: int, offset: int) -> list[Memory]:
        sql = f"""SELECT {SELECT} FROM memories WHERE owner = %s AND memory_type = %s
                  {"" if include_superseded else "AND superseded_by IS NULL"}
                  ORDER BY created_at DESC, rid DESC LIMIT %s OFFSET %s"""
        rows = self.conn.execute(sql, (self.owner, memory_type, limit, offset)).fetchall()
        return [memory(r) for r in rows]

    def count(self, memory_type: str, include_superseded: bool, limit: int) -> int:
        sql = f"""SELECT count(*) FROM (SELECT 1 FROM memories WHERE owner = %s AND memory_type = %s
                  {"" if include_superseded else "AND superseded_by IS NULL"} LIMIT %s) AS kept"""
        row = self.conn.execute(sql, (self.owner, memory_type, limit)).fetchone()
        return int(row[0]) if row else 0

    def waiting(self, limit: int) -> list[Memory]:
        sql = f"""SELECT {SELECT} FROM memories
                  WHERE owner = %s AND memory_type = 'episodic' AND consolidated = {WAITING}
                  ORDER BY created_at, id LIMIT %s"""
        return [memory(r) for r in self.conn.execute(sql, (self.owner, limit)).fetchall()]

    def without_tokens(self, limit: int) -> list[Memory]:
        sql = f"SELECT {SELECT} FROM memories WHERE owner = %s AND tokens IS NULL ORDER BY rid LIMIT %s"
        return [memory(r) for r in self.conn.execute(sql, (self.owner, limit)).fetchall()]

    def scan(self, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        sql = f"""SELECT rid, consolidated, {SELECT} FROM memories WHERE owner = %s AND rid > %s
                  ORDER BY rid LIMIT %s"""
        rows = self.conn.execute(sql, (self.owner, after, limit)).fetchall()
        return [(r[0], memory(r[2:]), r[1]) for r in rows]

    def tombstone_rows(self) -> list[tuple[str, str, datetime, datetime]]:
        sql = """SELECT id, memory_type, created_at, forgotten_at FROM tombstones WHERE owner = %s
                 ORDER BY forgotten_at, id"""
        return [(i, t, c, f) for i, t, c, f in self.conn.execute(sql, (self.owner,)).fetchall()]

    # -- inserts and supersession --------------------------------------------------------------
    def lock_owner(self) -> None:
        # A transaction-scoped advisory lock on the owner, taken before any row lock; it stacks when
        # taken again in the same transaction (consolidation's claim, then its supersessions).
        self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.owner,))

    def has_row(self, memory_id: str) -> bool:
        # The key-share lock makes a concurrent forget of that turn wait for this insert, then clear
        # the context itself.
        sql = "SELECT 1 FROM memories WHERE id = %s AND owner = %s FOR KEY SHARE"
        return self.conn.execute(sql, (memory_id, self.owner)).fetchone() is not None

    def insert_rows(self, rows: Sequence[Memory], vectors: Vectors, tokens: Sequence[bytes] | None) -> None:
        blobs = tokens if tokens is not None else [None] * len(rows)
        params = [_params(row, self.owner, v, b) for row, v, b in zip(rows, vectors, blobs, strict=True)]
        with self.conn.cursor() as cur:
            cur.executemany(_INSERT, params)
        self._note_tenant()

    def set_tokens(self, tokens: Mapping[str, bytes]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(
                "UPDATE memories SET tokens = %s WHERE id = %s AND owner = %s",
                [(blob, memory_id, self.owner) for memory_id, blob in tokens.items()],
            )

    def lock_row(self, memory_id: str) -> RowState[int] | None:
        sql = f"SELECT {_STATE} FROM memories WHERE id = %s AND owner = %s FOR UPDATE"
        row = self.conn.execute(sql, (memory_id, self.owner)).fetchone()
        return None if row is None else RowState(*row)

    def mark_superseded(self, key: int, by: str, at: datetime, retract: bool) -> None:
        self.conn.execute(
            "UPDATE memories SET superseded_by = %s, superseded_at = %s, retracted = %s "
            "WHERE rid = %s AND owner = %s",
            (by, at, int(retract), key, self.owner),
        )

    # -- forgetting ----------------------------------------------------------------------------
    def delete_row(self, memory_id: str) -> RowState[int] | None:
        sql = f"DELETE FROM memories WHERE id = %s AND owner = %s RETURNING {_STATE}"
        row = self.conn.execute(sql, (memory_id, self.owner)).fetchone()
        return None if row is None else RowState(*row)

    def quoting(self, episode_id: str) -> list[tuple[int, Memory]]:
        sql = f"""SELECT rid, {SELECT} FROM memories WHERE owner = %s AND memory_type = 'episodic'
                  AND attrs->>'context_id' = %s FOR UPDATE"""
        return [(r[0], memory(r[1:])) for r in self.conn.execute(sql, (self.owner, episode_id)).fetchall()]

    def set_context(self, key: int, attrs: str, keyword_text: str) -> None:
        sql = "UPDATE memories SET attrs = %s::jsonb, search_text = %s WHERE rid = %s AND owner = %s"
        self.conn.execute(sql, (attrs, keyword_text, key, self.owner))

    def revive(self, memory_id: str, superseded_by: str, retracted: bool) -> None:
        self.conn.execute(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, retracted = 0 "
            "WHERE id = %s AND owner = %s AND superseded_by = %s AND (retracted = 0 OR %s)",
            (memory_id, self.owner, superseded_by, retracted),
        )

    def relink(self, memory_id: str, superseded_by: str, to: str) -> bool:
        sql = "UPDATE memories SET superseded_by = %s WHERE id = %s AND owner = %s AND superseded_by = %s"
        return self.conn.execute(sql, (to, memory_id, self.owner, superseded_by)).rowcount > 0

    def set_supersedes(self, memory_id: str, supersedes: str) -> None:
        sql = "UPDATE memories SET supersedes = %s WHERE id = %s AND owner = %s"
        self.conn.execute(sql, (supersedes, memory_id, self.owner))

    def add_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        if tombstones:
            self._note_tenant()  # a tenant with only tombstones is still a tenant (exports)
        with self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO tombstones VALUES (%s, %s, %s, %s, %s)",
                [(t.id, self.owner, t.memory_type, t.created_at, t.forgotten_at) for t in tombstones],
            )

    def _note_tenant(self) -> None:
        """List the owner in engram_tenants (user ids only): a worker finds the users there under RLS."""
        if self.owner:
            self.conn.execute("INSERT INTO engram_tenants VALUES (%s) ON CONFLICT DO NOTHING", (self.owner,))

    # -- consolidation -------------------------------------------------------------------------
    def claim_waiting(self, episode_ids: Sequence[str]) -> int:
        self.lock_owner()  # one consolidation run per user, and no forget or supersession meanwhile
        sql = f"""SELECT count(*) FROM memories WHERE owner = %s AND memory_type = 'episodic'
                  AND consolidated = {WAITING} AND id = ANY(%s)"""
        row = self.conn.execute(sql, (self.owner, list(episode_ids))).fetchone()
        return int(row[0]) if row else 0

    def lock_typed(self, memory_id: str, memory_type: str) -> tuple[int, Any] | None:
        sql = "SELECT rid, attrs FROM memories WHERE id = %s AND owner = %s AND memory_type = %s FOR UPDATE"
        row = self.conn.execute(sql, (memory_id, self.owner, memory_type)).fetchone()
        return None if row is None else (row[0], row[1])

    def merge_fact(self, key: int, attrs: str, at: datetime) -> None:
        self.conn.execute(
            "UPDATE memories SET attrs = %s::jsonb, use_count = use_count + 1, last_used_at = %s "
            "WHERE rid = %s AND owner = %s",
            (attrs, at, key, self.owner),
        )

    def playbook_succeeded(self, key: int, at: datetime) -> None:
        self.conn.execute(
            "UPDATE memories SET success_count = success_count + 1, last_success_at = %s "
            "WHERE rid = %s AND owner = %s",
            (at, key, self.owner),
        )

    def playbook_failed(self, key: int, attrs: str) -> None:
        self.conn.execute(
            "UPDATE memories SET failure_count = failure_count + 1, attrs = %s::jsonb "
            "WHERE rid = %s AND owner = %s",
            (attrs, key, self.owner),
        )

    def mark_episodes(self, episode_ids: Sequence[str], state: int) -> None:
        sql = """UPDATE memories SET consolidated = %s
                 WHERE owner = %s AND memory_type = 'episodic' AND id = ANY(%s)"""
        self.conn.execute(sql, (state, self.owner, list(episode_ids)))


class PostgresMeta:
    """StoreStatements in one transaction that bound no tenant."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def read_meta(self, keys: Sequence[str]) -> dict[str, str]:
        return dict(
            self.conn.execute("SELECT key, value FROM meta WHERE key = ANY(%s)", (list(keys),)).fetchall()
        )

    def add_meta(self, values: Mapping[str, str]) -> None:
        rows = ", ".join(["(%s, %s)"] * len(values))  # one statement: one round trip
        params = [item for pair in values.items() for item in pair]
        self.conn.execute(f"INSERT INTO meta VALUES {rows} ON CONFLICT DO NOTHING", params)

    def insert_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        self.conn.execute(
            "INSERT INTO api_keys (id, key_hash, user_id, label, created_at, revoked_at, scope, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                *(record.id, key_hash, record.user_id, record.label, record.created_at),
                *(record.revoked_at, record.scope, record.expires_at),
            ),
        )

    def select_keys(self, by: KeyLookup | None, value: str | None) -> list[tuple[ApiKeyRecord, str]]:
        where, params = ("", ()) if by is None else (f" WHERE {by} = %s", (value,))
        sql = f"SELECT {KEY_COLUMNS}, key_hash FROM api_keys{where} ORDER BY created_at, id"
        return [(key_record(r[:-1]), r[-1]) for r in self.conn.execute(sql, params).fetchall()]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        sql = "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL"
        return self.conn.execute(sql, (at, key_id)).rowcount > 0

    def tenants(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT owner FROM engram_tenants ORDER BY owner").fetchall()]

    def insert_session(self, token_hash: str, key_id: str, expires_at: datetime) -> None:
        sql = "INSERT INTO inspector_sessions VALUES (%s, %s, %s)"
        self.conn.execute(sql, (token_hash, key_id, expires_at))

    def select_session(self, token_hash: str) -> tuple[str, datetime] | None:
        sql = "SELECT key_id, expires_at FROM inspector_sessions WHERE token_hash = %s"
        row = self.conn.execute(sql, (token_hash,)).fetchone()
        return None if row is None else (row[0], row[1])

    def delete_sessions(self, by: SessionLookup, value: str) -> int:
        return self.conn.execute(f"DELETE FROM inspector_sessions WHERE {by} = %s", (value,)).rowcount

    def delete_expired_sessions(self, at: datetime) -> None:
        self.conn.execute("DELETE FROM inspector_sessions WHERE expires_at < %s", (at,))


def tokens_by_id(conn: Connection, ids: Sequence[str], owners: Sequence[str]) -> dict[str, bytes]:
    """Packed token vectors of the rows among ``ids`` owned by one of ``owners`` that have them."""
    sql = "SELECT id, tokens FROM memories WHERE id = ANY(%s) AND owner = ANY(%s) AND tokens IS NOT NULL"
    return {i: bytes(t) for i, t in conn.execute(sql, (list(ids), list(owners))).fetchall()}


def memory(row: Sequence[Any]) -> Memory:
    """A row of MEMORY_COLUMNS as a model (psycopg decodes the JSON and timestamp columns itself)."""
    return memory_from_row(dict(zip(MEMORY_COLUMNS, row, strict=True)))


def vector_literal(vector: Vectors) -> str:
    """A pgvector literal: ``[x,y,...]`` with float32 precision."""
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vector, dtype=np.float32)) + "]"


def _params(row: Memory, owner: str, vector: Vectors, tokens: bytes | None) -> dict[str, Any]:
    values = memory_to_row(row)
    params: dict[str, Any] = {c: None for c in _INSERT_COLUMNS}
    params.update({k: v for k, v in values.items() if k in params})
    for column in ("use_count", "success_count", "failure_count", "retracted"):
        params[column] = params[column] or 0
    for column in _TIME_COLUMNS:
        if isinstance(params[column], str):
            params[column] = datetime.fromisoformat(params[column])
    params.update(
        owner=owner, search_text=keyword_text_of(row), embedding=vector_literal(vector), tokens=tokens
    )
    return params
