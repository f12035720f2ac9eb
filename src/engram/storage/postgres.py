"""The server backend: PostgreSQL with pgvector, full-text search and row-level security.

Isolation is enforced by PostgreSQL itself. Every memory table has FORCE ROW LEVEL SECURITY and
policies that read the tenant bound to the transaction (``set_config('engram.tenant', ..., true)``,
i.e. SET LOCAL): a tenant's transaction sees its own rows plus the catalog and can write only its own
rows. The runtime role is neither the tables' owner nor a superuser (checked at open), so the
policies apply to it. Every query also filters by owner in SQL, as a second wall and because the
planner needs the explicit filter to use the per-owner index.

Ranking differences from SQLite: the text leg ranks with ``ts_rank_cd`` (cover density over the
tenant's matching rows), not BM25: no inverse document frequency and no length normalisation by
average document length. Recall quality is compared on the smoke corpus in tests. The dense leg is an
exact scan of the tenant's vectors (an HNSW index with a tenant filter lost recall: 0.85-0.91).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engram.errors import Conflict, InvalidInput, NotFound, StorageError, StoreBusy
from engram.models import EpisodicMemory, Memory, MemoryType, Tombstone, Vectors, is_well_formed_id
from engram.storage._rows import (
    MEMORY_COLUMNS,
    keyword_text_of,
    memory_from_row,
    memory_to_row,
    merged_provenance,
    refined_attrs,
    without_context,
)
from engram.storage.base import (
    BATCH_CHANGED,
    ApiKeyRecord,
    Candidates,
    ConsolidationWrite,
    LegHit,
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

RUNTIME_ROLE = "engram_app"
CATALOG_TENANT = "*catalog*"  # the value bound for catalog writes; no user id can take it
_TIME_COLUMNS = ("created_at", "event_at", "last_used_at", "last_success_at", "superseded_at")

# Versioned migrations: each runs once, in order, in its own transaction, recorded in engram_migrations.
MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE memories (
            rid            bigserial PRIMARY KEY,
            id             text NOT NULL UNIQUE,
            owner          text NOT NULL,             -- '' for catalog rows
            memory_type    text NOT NULL
                CHECK (memory_type IN ('episodic', 'semantic', 'procedural', 'catalog')),
            text           text NOT NULL,
            search_text    text NOT NULL,
            search_tsv     tsvector GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED,
            embedding      vector NOT NULL,
            created_at     timestamptz NOT NULL,
            event_at       timestamptz,
            metadata       jsonb NOT NULL DEFAULT '{}',
            attrs          jsonb NOT NULL DEFAULT '{}',
            last_used_at   timestamptz,
            use_count      integer NOT NULL DEFAULT 0,
            success_count  integer NOT NULL DEFAULT 0,
            failure_count  integer NOT NULL DEFAULT 0,
            last_success_at timestamptz,
            supersedes     text,
            superseded_by  text,
            superseded_at  timestamptz,
            retracted      integer NOT NULL DEFAULT 0
        );
        CREATE INDEX memories_owner_type ON memories (owner, memory_type, created_at);
        CREATE INDEX memories_tsv ON memories USING gin (search_tsv);
        CREATE TABLE tombstones (
            id text PRIMARY KEY, owner text NOT NULL, memory_type text NOT NULL,
            created_at timestamptz NOT NULL, forgotten_at timestamptz NOT NULL
        );
        CREATE TABLE api_keys (
            id text PRIMARY KEY, key_hash text NOT NULL UNIQUE, user_id text, label text NOT NULL DEFAULT '',
            created_at timestamptz NOT NULL, revoked_at timestamptz
        );
        CREATE FUNCTION engram_tenant() RETURNS text LANGUAGE sql STABLE
            AS $$ SELECT coalesce(current_setting('engram.tenant', true), '') $$;
        CREATE FUNCTION engram_may_write(row_owner text) RETURNS boolean LANGUAGE sql STABLE
            AS $$ SELECT (row_owner <> '' AND row_owner = engram_tenant())
                      OR (row_owner = '' AND engram_tenant() = '*catalog*') $$;
        ALTER TABLE memories ENABLE ROW LEVEL SECURITY;
        ALTER TABLE memories FORCE ROW LEVEL SECURITY;
        CREATE POLICY memories_read ON memories FOR SELECT USING (owner = '' OR owner = engram_tenant());
        CREATE POLICY memories_insert ON memories FOR INSERT WITH CHECK (engram_may_write(owner));
        CREATE POLICY memories_update ON memories FOR UPDATE
            USING (engram_may_write(owner)) WITH CHECK (engram_may_write(owner));
        CREATE POLICY memories_delete ON memories FOR DELETE USING (engram_may_write(owner));
        ALTER TABLE tombstones ENABLE ROW LEVEL SECURITY;
        ALTER TABLE tombstones FORCE ROW LEVEL SECURITY;
        CREATE POLICY tombstones_read ON tombstones FOR SELECT USING (engram_may_write(owner));
        CREATE POLICY tombstones_insert ON tombstones FOR INSERT WITH CHECK (engram_may_write(owner));
        """,
    ),
    (
        2,
        """
        CREATE TABLE consolidation_state (
            owner text PRIMARY KEY, created_at timestamptz NOT NULL, episode_id text NOT NULL,
            updated_at timestamptz NOT NULL
        );
        ALTER TABLE consolidation_state ENABLE ROW LEVEL SECURITY;
        ALTER TABLE consolidation_state FORCE ROW LEVEL SECURITY;
        CREATE POLICY consolidation_state_own ON consolidation_state
            USING (engram_may_write(owner)) WITH CHECK (engram_may_write(owner));
        -- user ids only (no content): lets a worker find the users to consolidate under RLS
        CREATE TABLE engram_tenants (owner text PRIMARY KEY);
        INSERT INTO engram_tenants SELECT DISTINCT owner FROM memories WHERE owner <> '';
        """,
    ),
    (
        3,
        """
        -- late-interaction token vectors, packed int8 (NULL for rows written before: encoded at recall)
        ALTER TABLE memories ADD COLUMN tokens bytea;
        """,
    ),
    (
        4,
        """
        -- consolidation marks each episode it consumed instead of reading past a watermark (a turn
        -- committed late could land behind it); what the old watermark covered counts as consumed.
        -- episodic rows: 0 waiting, 1 consolidated, 2 skipped (the LLM could not read them)
        ALTER TABLE memories ADD COLUMN consolidated smallint NOT NULL DEFAULT 0;
        -- The owner reads and marks every tenant's rows here, once: forced RLS would show it none
        -- (a non-superuser owner is subject to it), and the marks would silently not be made.
        ALTER TABLE memories NO FORCE ROW LEVEL SECURITY;
        ALTER TABLE consolidation_state NO FORCE ROW LEVEL SECURITY;
        ALTER TABLE tombstones NO FORCE ROW LEVEL SECURITY;
        UPDATE memories m SET consolidated = 1 FROM consolidation_state s
            WHERE m.memory_type = 'episodic' AND m.owner = s.owner
              AND (m.created_at, m.id) <= (s.created_at, s.episode_id);
        -- migration 2 filled engram_tenants under forced RLS: with such an owner it stayed empty
        INSERT INTO engram_tenants SELECT DISTINCT owner FROM memories WHERE owner <> ''
            ON CONFLICT DO NOTHING;
        INSERT INTO engram_tenants SELECT DISTINCT owner FROM tombstones WHERE owner <> ''
            ON CONFLICT DO NOTHING;
        ALTER TABLE memories FORCE ROW LEVEL SECURITY;
        ALTER TABLE consolidation_state FORCE ROW LEVEL SECURITY;
        ALTER TABLE tombstones FORCE ROW LEVEL SECURITY;
        CREATE INDEX memories_waiting ON memories (owner, created_at, id)
            WHERE memory_type = 'episodic' AND consolidated = 0;
        CREATE INDEX memories_owner_rid ON memories (owner, rid);  -- export pages in write order
        CREATE INDEX tombstones_owner ON tombstones (owner);
        """,
    ),
]


def _grants(role: str) -> str:
    return f"""
        GRANT USAGE ON SCHEMA public TO {role};
        GRANT SELECT ON meta TO {role};
        GRANT INSERT ON meta TO {role};
        GRANT SELECT, INSERT, UPDATE, DELETE ON memories TO {role};
        GRANT USAGE, SELECT ON SEQUENCE memories_rid_seq TO {role};
        GRANT SELECT, INSERT ON tombstones TO {role};
        GRANT SELECT, INSERT, UPDATE ON api_keys TO {role};
        GRANT SELECT, INSERT, UPDATE ON consolidation_state TO {role};
        GRANT SELECT, INSERT ON engram_tenants TO {role};
    """


def migrate(admin_url: str, runtime_role: str = RUNTIME_ROLE) -> list[int]:
    """Create or upgrade the schema as the owner role, and grant the runtime role what it needs.

    Idempotent: applied versions are recorded and skipped. Returns the versions applied now.
    """
    import psycopg

    applied: list[int] = []
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(743274)")  # one migrator at a time
            conn.execute(
                "CREATE TABLE IF NOT EXISTS engram_migrations"
                " (version int PRIMARY KEY, applied_at timestamptz NOT NULL)"
            )
            done = {v for (v,) in conn.execute("SELECT version FROM engram_migrations")}
            for version, sql in MIGRATIONS:
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute("INSERT INTO engram_migrations VALUES (%s, now())", (version,))
                applied.append(version)
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (runtime_role,)).fetchone()
            if not exists:
                conn.execute(f'CREATE ROLE "{runtime_role}" LOGIN NOSUPERUSER NOBYPASSRLS')
            conn.execute(_grants(f'"{runtime_role}"'))
            conn.execute("SELECT pg_advisory_unlock(743274)")
    except psycopg.Error as exc:
        raise StorageError(f"PostgreSQL migration failed: {exc}") from exc
    return applied


class PostgresStore:
    """Store and KeyStore on PostgreSQL; see the module docstring."""

    def __init__(self, url: str, *, admin_url: str | None = None, pool_size: int = 8) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self._psycopg = psycopg
        if admin_url:
            migrate(admin_url)
        try:
            self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True, timeout=30)
            with self._pool.connection() as conn:
                role = conn.execute(
                    "SELECT rolsuper OR rolbypassrls, current_user FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
                owner = conn.execute(
                    "SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = 'memories'"
                ).fetchone()
                current = conn.execute(  # the newest migration's column (4: consolidated)
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' "
                    "AND table_name = 'memories' AND column_name = 'consolidated'"
                ).fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"cannot open PostgreSQL store: {exc}") from exc
        if owner is None:
            self._pool.close()
            raise StorageError("no Engram schema in this database: run migrations (pg_admin_url) first")
        if current is None:
            self._pool.close()
            raise StorageError(
                f"this database's Engram schema predates migration {MIGRATIONS[-1][0]}: run migrations "
                "(open once with pg_admin_url / ENGRAM_PG_ADMIN_URL)"
            )
        if role[0] or owner[0] == role[1]:
            self._pool.close()
            raise StorageError(
                f"refusing to run as {role[1]!r}: the runtime role must not be a superuser, bypass RLS, "
                f"or own the tables (row-level security would not apply); connect as {RUNTIME_ROLE!r}"
            )

    # -- transactions ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _tx(self, tenant: Tenant | str) -> Iterator[Any]:
        """A transaction with the tenant bound for the RLS policies (SET LOCAL semantics)."""
        bound = CATALOG_TENANT if tenant is None else tenant
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT set_config('engram.tenant', %s, true)", (bound,))
                yield conn
        except self._psycopg.errors.UniqueViolation as exc:
            raise Conflict(f"duplicate: {exc.diag.message_detail}") from exc
        except self._psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc}") from exc

    # -- Store protocol ------------------------------------------------------------------------
    def ensure_model(self, name: str, dim: int, kind: str = "embedding") -> None:
        keys = model_keys(kind)
        with self._tx("") as conn:
            recorded = dict(
                conn.execute("SELECT key, value FROM meta WHERE key = ANY(%s)", (list(keys),)).fetchall()
            )
            if check_model(recorded, kind, name, dim, "this store"):
                conn.execute(
                    "INSERT INTO meta VALUES (%s, %s), (%s, %s) ON CONFLICT DO NOTHING",
                    (keys[0], name, keys[1], str(dim)),
                )

    def insert(
        self,
        tenant: Tenant,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession] | None = None,
        tokens: Sequence[bytes] | None = None,
    ) -> None:
        owner = "" if tenant is None else tenant
        check_insert(owner, rows, vectors, supersede, tokens)
        with self._tx(tenant) as conn:
            self._insert_rows(conn, owner, rows, vectors, supersede or {}, tokens)

    def _insert_rows(
        self,
        conn: Any,
        owner: str,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession],
        tokens: Sequence[bytes] | None,
    ) -> None:
        if not rows:
            return
        batch = {row.id for row in rows}
        rows = [_checked_context(conn, owner, row, batch) for row in rows]
        new_rows = {row.id: row for row in rows}
        token_blobs = tokens if tokens is not None else [None] * len(rows)
        with conn.cursor() as cur:
            cur.executemany(
                _INSERT,
                [
                    _params(row, owner, vec, blob)
                    for row, vec, blob in zip(rows, vectors, token_blobs, strict=True)
                ],
            )
        if owner:
            conn.execute("INSERT INTO engram_tenants VALUES (%s) ON CONFLICT DO NOTHING", (owner,))
        for new_id, spec in supersede.items():
            self._supersede(conn, owner, new_rows[new_id], spec)

    def _supersede(self, conn: Any, owner: str, new: Memory, spec: Supersession) -> None:
        old = conn.execute(
            "SELECT rid, memory_type, superseded_by FROM memories WHERE id = %s AND owner = %s FOR UPDATE",
            (spec.old_id, owner),
        ).fetchone()
        if old is None:
            raise NotFound(spec.old_id)
        rid, old_type, superseded_by = old
        check_supersession(spec, new, old_type, superseded_by)
        conn.execute(
            "UPDATE memories SET superseded_by = %s, superseded_at = %s, retracted = %s WHERE rid = %s",
            (new.id, spec.at, int(spec.retract), rid),
        )

    def fetch(self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True) -> list[Memory]:
        wanted = wanted_ids(ids)
        if not wanted:
            return []
        with self._tx(tenant) as conn:
            rows = conn.execute(
                f"SELECT {_SELECT} FROM memories WHERE id = ANY(%s) AND owner = ANY(%s)",
                (wanted, _read_owners(tenant, include_catalog)),
            ).fetchall()
        found = {m.id: m for m in map(_memory, rows)}
        return [found[i] for i in wanted if i in found]

    def token_vectors(
        self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True
    ) -> dict[str, bytes]:
        wanted = wanted_ids(ids)
        if not wanted:
            return {}
        with self._tx(tenant) as conn:
            rows = conn.execute(
                "SELECT id, tokens FROM memories "
                "WHERE id = ANY(%s) AND owner = ANY(%s) AND tokens IS NOT NULL",
                (wanted, _read_owners(tenant, include_catalog)),
            ).fetchall()
        return {i: bytes(t) for i, t in rows}

    def rows_without_tokens(self, tenant: Tenant, limit: int) -> list[Memory]:
        with self._tx(tenant) as conn:
            rows = conn.execute(
                f"SELECT {_SELECT} FROM memories WHERE owner = %s AND tokens IS NULL ORDER BY rid LIMIT %s",
                ("" if tenant is None else tenant, limit),
            ).fetchall()
        return [_memory(r) for r in rows]

    def set_tokens(self, tenant: Tenant, tokens: Mapping[str, bytes]) -> None:
        with self._tx(tenant) as conn, conn.cursor() as cur:
            cur.executemany(
                "UPDATE memories SET tokens = %s WHERE id = %s AND owner = %s",
                [(blob, memory_id, "" if tenant is None else tenant) for memory_id, blob in tokens.items()],
            )

    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        words = fts_words(query)
        if not words or not where.memory_types:
            return []
        tsquery = " || ".join(["phraseto_tsquery('english', %s)"] * len(words))
        sql = f"""
            SELECT id, ts_rank_cd(search_tsv, q) AS score
            FROM memories, ({"SELECT " + tsquery} AS q) AS query
            WHERE search_tsv @@ q AND owner = ANY(%s) AND memory_type = ANY(%s)
              {"" if where.include_superseded else "AND superseded_by IS NULL"}
            ORDER BY score DESC, rid LIMIT %s"""
        owners = _read_owners(tenant, "catalog" in where.memory_types)
        with self._tx(tenant) as conn:
            rows = conn.execute(sql, (*words, owners, sorted(where.memory_types), limit)).fetchall()
        return [LegHit(id=i, score=float(s)) for i, s in rows]

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        if not where.memory_types:
            return []
        # "+ 0" keeps the planner from an approximate index: the tenant's rows are scanned exactly.
        sql = f"""
            SELECT id, (embedding <=> %s::vector) + 0 AS distance FROM memories
            WHERE owner = ANY(%s) AND memory_type = ANY(%s)
              {"" if where.include_superseded else "AND superseded_by IS NULL"}
            ORDER BY distance, rid LIMIT %s"""
        owners = _read_owners(tenant, "catalog" in where.memory_types)
        with self._tx(tenant) as conn:
            rows = conn.execute(sql, (_vector(vector), owners, sorted(where.memory_types), limit)).fetchall()
        return [LegHit(id=i, score=1.0 - float(d)) for i, d in rows]

    def search_candidates(
        self, tenant: Tenant, query: str, vector: Vectors, where: SearchFilter, limit: int, tokens: bool
    ) -> Candidates:
        """Both legs and their rows in one statement, then (with ``tokens``) the token vectors of the rows
        and of the turns they replied to, by id: one transaction instead of four (search_text,
        search_vector, get, token_vectors), each of which costs round trips to the server. The token
        vectors (~8 KB of TOASTed bytea a row) come apart: joined into the first statement they cost
        3x as much for a 3k-row user."""
        if not where.memory_types:
            return Candidates([], [], [], {} if tokens else None)
        words = fts_words(query)
        live = "" if where.include_superseded else "AND superseded_by IS NULL"
        tsquery = " || ".join(["phraseto_tsquery('english', %(w" + str(i) + ")s)" for i in range(len(words))])
        text_leg = (
            f"""SELECT id, ts_rank_cd(search_tsv, q) AS score, rid
                FROM memories, (SELECT {tsquery} AS q) AS query
                WHERE search_tsv @@ q AND owner = ANY(%(owners)s) AND memory_type = ANY(%(types)s) {live}
                ORDER BY score DESC, rid LIMIT %(limit)s"""
            if words
            else "SELECT NULL::text AS id, NULL::real AS score, NULL::bigint AS rid WHERE false"
        )
        sql = f"""
            WITH text_leg AS ({text_leg}),
            dense_leg AS (
                SELECT id, (embedding <=> %(vector)s::vector) + 0 AS distance, rid FROM memories
                WHERE owner = ANY(%(owners)s) AND memory_type = ANY(%(types)s) {live}
                ORDER BY distance, rid LIMIT %(limit)s),
            ranked AS (
                SELECT coalesce(t.id, d.id) AS id,
                       row_number() OVER (ORDER BY t.score DESC NULLS LAST, t.rid) AS t_rank, t.score,
                       row_number() OVER (ORDER BY d.distance NULLS LAST, d.rid) AS d_rank, d.distance
                FROM text_leg t FULL JOIN dense_leg d ON d.id = t.id)
            SELECT r.score, r.t_rank, r.distance, r.d_rank, {", ".join(f"m.{c}" for c in MEMORY_COLUMNS)}
            FROM ranked r JOIN memories m ON m.id = r.id"""
        params: dict[str, Any] = {f"w{i}": w for i, w in enumerate(words)}
        params |= {
            "owners": _read_owners(tenant, "catalog" in where.memory_types),
            "types": sorted(where.memory_types),
            "limit": limit,
            "vector": _vector(vector),
        }
        text, dense, rows = [], [], []
        blobs: dict[str, bytes] | None = None
        with self._tx(tenant) as conn:
            for score, t_rank, distance, d_rank, *rest in conn.execute(sql, params).fetchall():
                row = _memory(rest)
                rows.append(row)
                if score is not None:
                    text.append((t_rank, LegHit(id=row.id, score=float(score))))
                if distance is not None:
                    dense.append((d_rank, LegHit(id=row.id, score=1.0 - float(distance))))
            if tokens:
                ids = [m.id for m in rows] + [c for m in rows if (c := getattr(m, "context_id", None))]
                found = conn.execute(
                    "SELECT id, tokens FROM memories "
                    "WHERE id = ANY(%s) AND owner = ANY(%s) AND tokens IS NOT NULL",
                    (ids, params["owners"]),
                ).fetchall()
                blobs = {i: bytes(t) for i, t in found}
        return Candidates(
            [hit for _, hit in sorted(text, key=lambda x: x[0])],
            [hit for _, hit in sorted(dense, key=lambda x: x[0])],
            rows,
            blobs,
        )

    def record_use(
        self, tenant: Tenant, uses: Mapping[str, int], at: datetime, *, max_wait_s: float | None = None
    ) -> dict[str, int]:
        if not uses or tenant is None:
            return {}
        try:
            with self._tx(tenant) as conn:
                if max_wait_s is not None:
                    wait_ms = max(1, round(max_wait_s * 1000))  # 0 would mean "wait forever" here
                    conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{wait_ms}ms",))
                rows = conn.execute(
                    """UPDATE memories m SET use_count = m.use_count + u.n,
                           last_used_at = GREATEST(m.last_used_at, %s)
                       FROM unnest(%s::text[], %s::int[]) AS u(id, n)
                       WHERE m.owner = %s AND m.memory_type = 'semantic' AND m.id = u.id
                       RETURNING m.id, m.use_count""",
                    (at, list(uses), list(uses.values()), tenant),
                ).fetchall()
        except StorageError as exc:
            if max_wait_s is not None and isinstance(exc.__cause__, self._psycopg.errors.LockNotAvailable):
                raise StoreBusy("another writer holds the rows") from exc
            raise
        return dict(rows)

    def forget(self, tenant: Tenant, memory_id: str, at: datetime) -> Tombstone:
        owner = "" if tenant is None else tenant
        if not is_well_formed_id(memory_id):
            raise NotFound(str(memory_id))
        with self._tx(tenant) as conn:
            row = conn.execute(
                "DELETE FROM memories WHERE id = %s AND owner = %s "
                "RETURNING memory_type, created_at, supersedes, superseded_by",
                (memory_id, owner),
            ).fetchone()
            if row is None:
                raise NotFound(memory_id)
            if row[0] == "episodic":
                _drop_quotes(conn, owner, memory_id)
            if row[2]:
                _mend_chain(conn, owner, memory_id, row[2], row[3])
            conn.execute(
                "INSERT INTO tombstones VALUES (%s, %s, %s, %s, %s)", (memory_id, owner, row[0], row[1], at)
            )
        return Tombstone(id=memory_id, user_id=tenant, memory_type=row[0], created_at=row[1], forgotten_at=at)

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
        sql = f"""SELECT {_SELECT} FROM memories WHERE owner = %s AND memory_type = %s
                  {"" if include_superseded else "AND superseded_by IS NULL"}
                  ORDER BY created_at DESC, rid DESC LIMIT %s OFFSET %s"""
        with self._tx(tenant) as conn:
            rows = conn.execute(
                sql, ("" if tenant is None else tenant, memory_type, limit, offset)
            ).fetchall()
        return [_memory(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self._tx("") as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            catalog = conn.execute("SELECT count(*) FROM memories WHERE owner = ''").fetchone()[0]
        return {"url": self.url.split("@")[-1], "counts": {"catalog": catalog}, "meta": meta}

    # -- ConsolidationStore protocol -----------------------------------------------------------
    def waiting_episodes(self, tenant: str, limit: int) -> list[EpisodicMemory]:
        sql = f"""SELECT {_SELECT} FROM memories
                  WHERE owner = %s AND memory_type = 'episodic' AND consolidated = 0
                  ORDER BY created_at, id LIMIT %s"""
        with self._tx(tenant) as conn:
            rows = conn.execute(sql, (tenant, limit)).fetchall()
        return [m for m in map(_memory, rows) if isinstance(m, EpisodicMemory)]

    def apply_consolidation(self, tenant: str, write: ConsolidationWrite) -> None:
        ids = list(write.episode_ids)
        with self._tx(tenant) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (tenant,))  # one run per user
            waiting = conn.execute(
                """SELECT count(*) FROM memories WHERE owner = %s AND memory_type = 'episodic'
                   AND consolidated = 0 AND id = ANY(%s)""",
                (tenant, ids),
            ).fetchone()[0]
            if waiting != len(set(ids)):
                raise Conflict(BATCH_CHANGED)
            self._insert_rows(conn, tenant, write.rows, write.vectors, write.supersede, write.tokens)
            for merge in write.merges:
                row = _lock_row(conn, merge.fact_id, tenant, "semantic")
                conn.execute(
                    "UPDATE memories SET attrs = %s::jsonb, use_count = use_count + 1, last_used_at = %s "
                    "WHERE rid = %s",
                    (merged_provenance(row[1], merge.episode_ids), write.at, row[0]),
                )
            for feedback in write.feedback:
                row = _lock_row(conn, feedback.playbook_id, tenant, "procedural")
                if feedback.success:
                    conn.execute(
                        "UPDATE memories SET success_count = success_count + 1, last_success_at = %s "
                        "WHERE rid = %s",
                        (write.at, row[0]),
                    )
                else:
                    conn.execute(
                        "UPDATE memories SET failure_count = failure_count + 1, attrs = %s::jsonb "
                        "WHERE rid = %s",
                        (refined_attrs(row[1], feedback.refined_steps), row[0]),
                    )
            conn.execute(
                """UPDATE memories SET consolidated = %s
                   WHERE owner = %s AND memory_type = 'episodic' AND id = ANY(%s)""",
                (2 if write.skipped else 1, tenant, ids),
            )

    def tenants(self) -> list[str]:
        with self._tx("") as conn:
            return [r[0] for r in conn.execute("SELECT owner FROM engram_tenants ORDER BY owner").fetchall()]

    # -- TransferStore protocol ----------------------------------------------------------------
    def scan(self, tenant: Tenant, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        sql = f"""SELECT rid, consolidated, {_SELECT} FROM memories WHERE owner = %s AND rid > %s
                  ORDER BY rid LIMIT %s"""
        with self._tx(tenant) as conn:
            rows = conn.execute(sql, ("" if tenant is None else tenant, after, limit)).fetchall()
        return [(r[0], _memory(r[2:]), r[1]) for r in rows]

    def tombstones(self, tenant: Tenant) -> list[Tombstone]:
        sql = """SELECT id, memory_type, created_at, forgotten_at FROM tombstones WHERE owner = %s
                 ORDER BY forgotten_at, id"""
        with self._tx(tenant) as conn:
            rows = conn.execute(sql, ("" if tenant is None else tenant,)).fetchall()
        return [
            Tombstone(id=i, user_id=tenant, memory_type=t, created_at=c, forgotten_at=f)
            for i, t, c, f in rows
        ]

    def add_tombstones(self, tenant: Tenant, tombstones: Sequence[Tombstone]) -> None:
        owner = "" if tenant is None else tenant
        if any((t.user_id or "") != owner for t in tombstones):
            raise InvalidInput("a tombstone does not belong to this tenant")
        with self._tx(tenant) as conn, conn.cursor() as cur:
            if owner and tombstones:  # a tenant with only tombstones is still a tenant (exports)
                cur.execute("INSERT INTO engram_tenants VALUES (%s) ON CONFLICT DO NOTHING", (owner,))
            cur.executemany(
                "INSERT INTO tombstones VALUES (%s, %s, %s, %s, %s)",
                [(t.id, owner, t.memory_type, t.created_at, t.forgotten_at) for t in tombstones],
            )

    def export_keys(self) -> list[tuple[ApiKeyRecord, str]]:
        with self._tx("") as conn:
            rows = conn.execute(
                f"SELECT {_KEY_COLUMNS}, key_hash FROM api_keys ORDER BY created_at, id"
            ).fetchall()
        return [(ApiKeyRecord(*r[:-1]), r[-1]) for r in rows]

    # -- KeyStore protocol ---------------------------------------------------------------------
    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        with self._tx("") as conn:
            conn.execute(
                "INSERT INTO api_keys VALUES (%s, %s, %s, %s, %s, %s)",
                (record.id, key_hash, record.user_id, record.label, record.created_at, record.revoked_at),
            )

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with self._tx("") as conn:
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_hash = %s", (key_hash,)
            ).fetchone()
        return ApiKeyRecord(*row) if row else None

    def get_key(self, key_id: str) -> ApiKeyRecord | None:
        with self._tx("") as conn:
            row = conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = %s", (key_id,)).fetchone()
        return ApiKeyRecord(*row) if row else None

    def list_keys(self, user_id: str | None = None) -> list[ApiKeyRecord]:
        sql = f"SELECT {_KEY_COLUMNS} FROM api_keys"
        params: tuple[str, ...] = ()
        if user_id is not None:
            sql, params = sql + " WHERE user_id = %s", (user_id,)
        with self._tx("") as conn:
            return [ApiKeyRecord(*r) for r in conn.execute(sql + " ORDER BY created_at", params).fetchall()]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._tx("") as conn:
            cur = conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL", (at, key_id)
            )
            return cur.rowcount > 0

    def close(self) -> None:
        self._pool.close()


_SELECT = ", ".join(MEMORY_COLUMNS)
_KEY_COLUMNS = "id, user_id, label, created_at, revoked_at"
_INSERT_COLUMNS = (*MEMORY_COLUMNS, "search_text", "embedding", "tokens")
_CASTS = {"embedding": "::vector", "metadata": "::jsonb", "attrs": "::jsonb"}
_INSERT = (
    f"INSERT INTO memories ({', '.join(_INSERT_COLUMNS)}) VALUES "
    f"({', '.join('%(' + c + ')s' + _CASTS.get(c, '') for c in _INSERT_COLUMNS)})"
)


def _lock_row(conn: Any, memory_id: str, owner: str, memory_type: str) -> tuple[int, Any]:
    """(rid, attrs) of one of the owner's rows of that type, locked for this transaction."""
    row = conn.execute(
        "SELECT rid, attrs FROM memories WHERE id = %s AND owner = %s AND memory_type = %s FOR UPDATE",
        (memory_id, owner, memory_type),
    ).fetchone()
    if row is None:
        raise NotFound(memory_id)
    return row[0], row[1]


def _mend_chain(conn: Any, owner: str, gone: str, before: str, after: str | None) -> None:
    """Forgetting a link of a supersession chain: the row it replaced takes its place, re-linked to the
    row that replaced it, else live again (its supersession time and retraction cleared)."""
    if after is None:
        conn.execute(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL, retracted = 0 "
            "WHERE id = %s AND owner = %s AND superseded_by = %s",
            (before, owner, gone),
        )
        return
    relinked = conn.execute(
        "UPDATE memories SET superseded_by = %s WHERE id = %s AND owner = %s AND superseded_by = %s",
        (after, before, owner, gone),
    ).rowcount
    if relinked:
        conn.execute(
            "UPDATE memories SET supersedes = %s WHERE id = %s AND owner = %s", (before, after, owner)
        )


def _checked_context(conn: Any, owner: str, row: Memory, batch: set[str]) -> Memory:
    """The row, without its context if the turn it quotes was forgotten meanwhile (a turn of the same
    batch is fine). The key-share lock makes a concurrent forget of that turn wait for this insert,
    then clear the context itself."""
    context_id = getattr(row, "context_id", None)
    if not context_id or context_id in batch:
        return row
    found = conn.execute(
        "SELECT 1 FROM memories WHERE id = %s AND owner = %s FOR KEY SHARE", (context_id, owner)
    ).fetchone()
    return row if found else without_context(row)


def _drop_quotes(conn: Any, owner: str, episode_id: str) -> None:
    """Forgetting a turn also removes its words from the turns that were indexed with it as context."""
    quoting = conn.execute(
        f"SELECT {_SELECT} FROM memories WHERE owner = %s AND memory_type = 'episodic' "
        "AND attrs->>'context_id' = %s FOR UPDATE",
        (owner, episode_id),
    ).fetchall()
    for columns in quoting:
        cleared = without_context(_memory(columns))
        conn.execute(
            "UPDATE memories SET attrs = %s::jsonb, search_text = %s WHERE id = %s AND owner = %s",
            (memory_to_row(cleared)["attrs"], keyword_text_of(cleared), cleared.id, owner),
        )


def _params(row: Memory, owner: str, vector: Vectors, tokens: bytes | None) -> dict[str, Any]:
    values = memory_to_row(row)
    params: dict[str, Any] = {c: None for c in _INSERT_COLUMNS}
    params.update({k: v for k, v in values.items() if k in params})
    for column in ("use_count", "success_count", "failure_count", "retracted"):
        params[column] = params[column] or 0
    for column in _TIME_COLUMNS:
        if isinstance(params[column], str):
            params[column] = datetime.fromisoformat(params[column])
    params.update(owner=owner, search_text=keyword_text_of(row), embedding=_vector(vector), tokens=tokens)
    return params


def _vector(vector: Vectors) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vector, dtype=np.float32)) + "]"


def _memory(row: Sequence[Any]) -> Memory:
    record = dict(zip(MEMORY_COLUMNS, row, strict=True))
    for key in ("metadata", "attrs"):
        if isinstance(record[key], str):
            record[key] = json.loads(record[key])
    return memory_from_row(record)


def _read_owners(tenant: Tenant, include_catalog: bool) -> list[str]:
    owner = "" if tenant is None else tenant
    return [owner, ""] if include_catalog and owner != "" else [owner]
