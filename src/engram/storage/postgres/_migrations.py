"""The PostgreSQL store's schema: versioned migrations, run as the owner role, and the runtime role's grants.

The policies read the tenant bound to the transaction (``engram.tenant``): a user id, ''
(``base.CATALOG_OWNER``) in the owner column for catalog rows, and ``base.CATALOG_SESSION`` bound for
catalog writes. Migrations are history: their text never changes once released.
"""

from __future__ import annotations

from engram.errors import StorageError

RUNTIME_ROLE = "engram_app"

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
    (
        5,
        """
        -- the inspector's sign-in sessions, by the hash of their token: signing out ends one for every
        -- process of the service (engram.auth)
        CREATE TABLE inspector_sessions (
            token_hash text PRIMARY KEY, key_id text NOT NULL, expires_at timestamptz NOT NULL
        );
        CREATE INDEX inspector_sessions_key ON inspector_sessions (key_id);
        """,
    ),
    (
        6,
        """
        -- a key's scope (keys made before keep reading and writing) and expiry (NULL: never)
        ALTER TABLE api_keys ADD COLUMN scope text NOT NULL DEFAULT 'write'
            CHECK (scope IN ('read', 'write', 'admin'));
        ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
        -- deleting a user (a data-rights request) runs as the runtime role bound to that user
        CREATE POLICY tombstones_delete ON tombstones FOR DELETE USING (engram_may_write(owner));
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
        GRANT SELECT, INSERT, DELETE ON tombstones TO {role};
        GRANT SELECT, INSERT, UPDATE, DELETE ON api_keys TO {role};
        GRANT SELECT, INSERT, UPDATE, DELETE ON consolidation_state TO {role};
        GRANT SELECT, INSERT, DELETE ON engram_tenants TO {role};
        GRANT SELECT, INSERT, DELETE ON inspector_sessions TO {role};
    """


CONNECT_TIMEOUT_S = 10  # a server that does not answer at all: say so, not hang


def migrate(admin_url: str, runtime_role: str = RUNTIME_ROLE) -> list[int]:
    """Create or upgrade the schema as the owner role, and grant the runtime role what it needs.

    Idempotent: applied versions are recorded and skipped. Returns the versions applied now.
    """
    import psycopg

    applied: list[int] = []
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
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
