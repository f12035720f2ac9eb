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
exact scan of the tenant's vectors (an HNSW index with a tenant filter lost recall: 0.85-0.91), except
for a heavy tenant given its own partial HNSW index by ``engram reindex`` (``_ann``).

The Store rules are shared (engram.storage._rules); this module opens the pool and the transactions
and runs the search legs; ``_statements`` holds the statements the rules run, ``_migrations`` the schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram.errors import ConfigError, Conflict, StorageError, StoreBusy
from engram.models import Memory, Vectors
from engram.storage._narrowing import named_params, narrowing_sql
from engram.storage._rows import MEMORY_COLUMNS
from engram.storage._rules import StoreRules
from engram.storage.base import (
    CATALOG_SESSION,
    Candidates,
    LegHit,
    SearchFilter,
    Tenant,
    model_keys,
    owner_of,
)
from engram.storage.postgres import _ann
from engram.storage.postgres._migrations import CONNECT_TIMEOUT_S, MIGRATIONS, RUNTIME_ROLE, migrate
from engram.storage.postgres._statements import (
    PostgresMeta,
    PostgresRows,
    memory,
    tokens_by_id,
    vector_literal,
)
from engram.text import fts_words
from engram.validation import validate_user_id

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from engram.storage.postgres._statements import Connection

# Bound by store-wide transactions (meta, keys): what an unset setting reads as, so the policies let
# them read only the catalog and write no tenant's rows.
_NO_TENANT = ""


# What deleting a user deletes, in order: sessions before the keys they name.
_ERASE = [
    (
        "sessions",
        "DELETE FROM inspector_sessions WHERE key_id IN (SELECT id FROM api_keys WHERE user_id = %s)",
    ),
    ("keys", "DELETE FROM api_keys WHERE user_id = %s"),
    ("memories", "DELETE FROM memories WHERE owner = %s"),
    ("tombstones", "DELETE FROM tombstones WHERE owner = %s"),
    ("consolidation_state", "DELETE FROM consolidation_state WHERE owner = %s"),
    ("engram_tenants", "DELETE FROM engram_tenants WHERE owner = %s"),
]


def _sorting_back(conn: Connection, params: Mapping[str, Any]) -> None:
    """Undo the graph's ``enable_sort = off`` (set when ``params`` carry ``ann_limit``) for the rest of
    the transaction."""
    if "ann_limit" in params:
        conn.execute("SELECT set_config('enable_sort', 'on', true)")


class PostgresStore(StoreRules[int]):
    """Store and KeyStore on PostgreSQL; see the module docstring."""

    def __init__(self, url: str, *, admin_url: str | None = None, pool_size: int = 8) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool

        self.url = url
        self._psycopg = psycopg
        self._admin_url = admin_url
        self._ann = _ann.AnnIndexes()
        if admin_url:
            migrate(admin_url)
        try:
            # One plain connection first: a wrong URL or password fails here at once with the server's
            # reason, where the pool would retry it for its whole timeout and log every try.
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
            # each connection is checked as it is handed out (an empty query): after a server restart
            # the pooled ones are dead, and the first requests answered 503 (an operator's walk)
            self._pool: ConnectionPool[Connection] = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                open=True,
                timeout=30,
                check=ConnectionPool.check_connection,
            )
            with self._pool.connection() as conn:
                role = conn.execute(
                    "SELECT rolsuper OR rolbypassrls, current_user FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
                owner = conn.execute(
                    "SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = 'memories'"
                ).fetchone()
                current = conn.execute(  # the newest migration's column (6: api_keys.scope)
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' "
                    "AND table_name = 'api_keys' AND column_name = 'scope'"
                ).fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"cannot open PostgreSQL store: {exc}") from exc
        if owner is None:
            self._pool.close()
            raise StorageError(
                "no Engram schema in this database: set ENGRAM_PG_ADMIN_URL (the schema owner's URL) and "
                "start once, which runs the migrations"
            )
        if current is None:
            self._pool.close()
            raise StorageError(
                f"this database's Engram schema predates migration {MIGRATIONS[-1][0]}: run migrations "
                "(open once with pg_admin_url / ENGRAM_PG_ADMIN_URL)"
            )
        current_role = role[1] if role else None
        if role is None or role[0] or owner[0] == current_role:
            self._pool.close()
            raise StorageError(
                f"refusing to run as {current_role!r}: the runtime role must not be a superuser, bypass RLS, "
                f"or own the tables (row-level security would not apply); connect as {RUNTIME_ROLE!r}"
            )

    # -- transactions ---------------------------------------------------------------------------
    @property
    def _label(self) -> str:
        return "this store"  # the URL may hold a password

    @contextlib.contextmanager
    def _tx(self, bound: str) -> Iterator[Connection]:
        """A transaction with ``bound`` as the tenant for the RLS policies (SET LOCAL semantics)."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT set_config('engram.tenant', %s, true)", (bound,))
                yield conn
        except self._psycopg.errors.UniqueViolation as exc:
            raise Conflict(f"duplicate: {exc.diag.message_detail}") from exc
        except self._psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {exc}") from exc

    def _tenant_tx(self, tenant: Tenant) -> contextlib.AbstractContextManager[Connection]:
        return self._tx(CATALOG_SESSION if tenant is None else tenant)

    @contextlib.contextmanager
    def _tenant_statements(self, tenant: Tenant, *, write: bool) -> Iterator[PostgresRows]:
        with self._tenant_tx(tenant) as conn:  # reads too: the policies need the tenant bound
            yield PostgresRows(conn, owner_of(tenant))

    @contextlib.contextmanager
    def _store_statements(self, *, write: bool) -> Iterator[PostgresMeta]:
        with self._tx(_NO_TENANT) as conn:
            yield PostgresMeta(conn)

    # -- search legs ---------------------------------------------------------------------------
    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        words = fts_words(query)
        if not words or not where.memory_types:
            return []
        tsquery = " || ".join(f"phraseto_tsquery('english', %(w{i})s)" for i in range(len(words)))
        narrow, narrow_params = narrowing_sql(where.narrow, "postgres")
        sql = f"""
            SELECT id, ts_rank_cd(search_tsv, q) AS score
            FROM memories, ({"SELECT " + tsquery} AS q) AS query
            WHERE search_tsv @@ q AND owner = ANY(%(owners)s) AND memory_type = ANY(%(types)s)
              {"" if where.include_superseded else "AND superseded_by IS NULL"}{narrow}
            ORDER BY score DESC, rid LIMIT %(limit)s"""
        params: dict[str, Any] = {f"w{i}": w for i, w in enumerate(words)} | named_params(narrow_params)
        params |= {"owners": where.owners(tenant), "types": sorted(where.memory_types), "limit": limit}
        with self._tenant_tx(tenant) as conn:
            rows = conn.execute(sql, params).fetchall()
        return [LegHit(id=i, score=float(s)) for i, s in rows]

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        if not where.memory_types:
            return []
        live = _conditions(where)
        params: dict[str, Any] = {"types": sorted(where.memory_types), "limit": limit}
        params |= named_params(narrowing_sql(where.narrow, "postgres")[1])
        with self._tenant_tx(tenant) as conn:
            sql = self._dense_leg(conn, tenant, where, vector, live, params)
            rows = conn.execute(sql, params).fetchall()
            _sorting_back(conn, params)
        return [LegHit(id=i, score=1.0 - float(d)) for i, d, _ in rows]

    def _dense_leg(
        self,
        conn: Connection,
        tenant: Tenant,
        where: SearchFilter,
        vector: Vectors,
        live: str,
        params: dict[str, Any],
    ) -> str:
        """The dense leg's SQL for this tenant (its own HNSW graph if it has one, see ``_ann``); adds
        the parameters it needs to ``params``. "+ 0" in the exact form keeps the planner from an
        approximate index: those rows are scanned exactly."""
        owners = where.owners(tenant)
        params |= {"vector": vector_literal(vector), "owners": owners}
        # The graph only when every user type is wanted: its filters apply after the search (_ann).
        # Nor for a filtered recall: the graph's nearest rows may hold few that match.
        graph = (
            tenant is not None
            and where.memory_types >= _ann.USER_TYPES
            and not where.narrow.narrows
            and self._ann.has(conn, tenant)
        )
        if graph:
            ann_limit = _ann.search_width(int(params["limit"]))
            params |= {"tenant": tenant, "others": [o for o in owners if o != tenant], "ann_limit": ann_limit}
            # The search width; a plan made for this tenant (a generic plan cannot use a partial
            # index); and no sorting the tenant's rows instead: under the RLS policies the planner
            # underestimates them ~8x and picked a bitmap scan and a sort (28 ms at 13k rows). The
            # caller turns sorting back on after the statement (``_sorting_back``).
            conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), "
                "set_config('plan_cache_mode', 'force_custom_plan', true), "
                "set_config('enable_sort', 'off', true)",
                (str(ann_limit),),
            )
        return _ann.dense_leg(len(vector), live, graph)

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
        live = _conditions(where)
        tsquery = " || ".join(["phraseto_tsquery('english', %(w" + str(i) + ")s)" for i in range(len(words))])
        text_leg = (
            f"""SELECT id, ts_rank_cd(search_tsv, q) AS score, rid
                FROM memories, (SELECT {tsquery} AS q) AS query
                WHERE search_tsv @@ q AND owner = ANY(%(owners)s) AND memory_type = ANY(%(types)s) {live}
                ORDER BY score DESC, rid LIMIT %(limit)s"""
            if words
            else "SELECT NULL::text AS id, NULL::real AS score, NULL::bigint AS rid WHERE false"
        )
        owners = where.owners(tenant)
        params: dict[str, Any] = {f"w{i}": w for i, w in enumerate(words)}
        params |= {"owners": owners, "types": sorted(where.memory_types), "limit": limit}
        params |= named_params(narrowing_sql(where.narrow, "postgres")[1])
        text: list[tuple[int, LegHit]] = []
        dense: list[tuple[int, LegHit]] = []
        rows: list[Memory] = []
        blobs: dict[str, bytes] | None = None
        with self._tenant_tx(tenant) as conn:
            sql = f"""
            WITH text_leg AS ({text_leg}),
            dense_leg AS ({self._dense_leg(conn, tenant, where, vector, live, params)}),
            ranked AS (
                SELECT coalesce(t.id, d.id) AS id,
                       row_number() OVER (ORDER BY t.score DESC NULLS LAST, t.rid) AS t_rank, t.score,
                       row_number() OVER (ORDER BY d.distance NULLS LAST, d.rid) AS d_rank, d.distance
                FROM text_leg t FULL JOIN dense_leg d ON d.id = t.id)
            SELECT r.score, r.t_rank, r.distance, r.d_rank, {", ".join(f"m.{c}" for c in MEMORY_COLUMNS)}
            FROM ranked r JOIN memories m ON m.id = r.id"""
            found = conn.execute(sql, params).fetchall()
            _sorting_back(conn, params)
            for score, t_rank, distance, d_rank, *rest in found:
                row = memory(rest)
                rows.append(row)
                if score is not None:
                    text.append((t_rank, LegHit(id=row.id, score=float(score))))
                if distance is not None:
                    dense.append((d_rank, LegHit(id=row.id, score=1.0 - float(distance))))
            if tokens:
                ids = [m.id for m in rows] + [c for m in rows if (c := getattr(m, "context_id", None))]
                blobs = tokens_by_id(conn, ids, owners)
        return Candidates(
            [hit for _, hit in sorted(text, key=lambda x: x[0])],
            [hit for _, hit in sorted(dense, key=lambda x: x[0])],
            rows,
            blobs,
        )

    def index_heavy_tenants(self, min_rows: int) -> list[str]:
        """Give each tenant with at least ``min_rows`` rows its own HNSW index (see ``_ann``); returns
        the tenants indexed now. Needs the admin URL (the tables' owner builds indexes)."""
        if not self._admin_url:
            raise ConfigError(
                "building heavy tenants' indexes needs the schema owner: set pg_admin_url / "
                "ENGRAM_PG_ADMIN_URL"
            )
        with self._store_statements(write=False) as statements:
            dim = statements.read_meta(model_keys("embedding")).get("embedding_dim")
        if dim is None:
            return []  # no model recorded: nothing has been written yet
        built = _ann.index_heavy_tenants(self._admin_url, min_rows, int(dim))
        self._ann.forget_cache()
        return built

    # -- what the engine does its own way ------------------------------------------------------
    def _record_use(
        self, owner: str, uses: Mapping[str, int], at: datetime, max_wait_s: float | None
    ) -> dict[str, int]:
        try:
            with self._tx(owner) as conn:
                if max_wait_s is not None:
                    wait_ms = max(1, round(max_wait_s * 1000))  # 0 would mean "wait forever" here
                    conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{wait_ms}ms",))
                rows = conn.execute(
                    """UPDATE memories m SET use_count = m.use_count + u.n,
                           last_used_at = GREATEST(m.last_used_at, %s)
                       FROM unnest(%s::text[], %s::int[]) AS u(id, n)
                       WHERE m.owner = %s AND m.memory_type = 'semantic' AND m.id = u.id
                       RETURNING m.id, m.use_count""",
                    (at, list(uses), list(uses.values()), owner),
                ).fetchall()
        except StorageError as exc:
            if max_wait_s is not None and isinstance(exc.__cause__, self._psycopg.errors.LockNotAvailable):
                raise StoreBusy("another writer holds the rows") from exc
            raise
        return {i: n for i, n in rows}

    def delete_user(self, user_id: str) -> dict[str, int]:
        """In one transaction bound to the user (the policies let it delete its own rows only), the
        owner locked as a forget locks it; then, with the admin URL, the user's vector index (its
        definition names the user). Without it the index, empty now, stays until an admin drops it."""
        owner = validate_user_id(user_id)
        counts: dict[str, int] = {}
        with self._tx(owner) as conn:
            PostgresRows(conn, owner).lock_owner()
            for kind, sql in _ERASE:
                deleted = conn.execute(sql, (owner,)).rowcount
                if deleted > 0:
                    counts[kind] = deleted
        if self._admin_url and _ann.drop_index(self._admin_url, owner):
            counts["ann_index"] = 1
        self._ann.forget_cache()
        return counts

    def stats(self) -> dict[str, Any]:
        with self._tx(_NO_TENANT) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            (catalog,) = conn.execute("SELECT count(*) FROM memories WHERE owner = ''").fetchall()[0]
        return {"url": shown_url(self.url), "counts": {"catalog": catalog}, "meta": meta}

    def close(self) -> None:
        self._pool.close()


def _conditions(where: SearchFilter) -> str:
    """The conditions every leg adds to its owners and types: live rows (unless superseded ones are
    wanted) and the recall filter (named parameters: ``named_params``)."""
    live = "" if where.include_superseded else "AND superseded_by IS NULL"
    return live + narrowing_sql(where.narrow, "postgres")[0]


def shown_url(url: str) -> str:
    """The store as `engram info` shows it, from a URL or a key=value string: user, host, port,
    database and options, never a password (in the user part or as an option). Example:
    postgresql://app:pw@db/engram?sslmode=require -> postgresql://app@db/engram?sslmode=require."""
    from psycopg.conninfo import conninfo_to_dict

    fields = {k: str(v) for k, v in conninfo_to_dict(url).items() if k != "password"}
    user, host, port, database = (fields.pop(k, "") for k in ("user", "host", "port", "dbname"))
    if host.startswith("/"):  # a socket folder (and its port) read better as options than as a host
        fields = {"host": host, **({"port": port} if port else {}), **fields}
        host = port = ""
    where = (f"{user}@" if user else "") + host + (f":{port}" if port else "")
    query = "&".join(f"{k}={v}" for k, v in fields.items())
    return f"postgresql://{where}/{database}" + (f"?{query}" if query else "")
