"""PostgreSQL-only guarantees: isolation enforced by the server itself (raw SQL, no Engram query
builder), a runtime role the policies apply to, idempotent migrations, race-free supersession."""

import threading
from datetime import UTC, datetime

import psycopg
import pytest

from engram import Conflict, Engram, StorageError
from engram.auth import ApiKeys
from engram.errors import ConfigError
from engram.models import CatalogItem, SemanticMemory, new_id
from engram.storage.postgres import PostgresStore
from engram.storage.postgres._store import migrate, shown_url

T0 = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def pg(pg_urls, embedder):
    admin, runtime = pg_urls
    store = PostgresStore(runtime, admin_url=admin)
    store.ensure_model(embedder.name, embedder.dim)
    for user in ("sarah", "bob"):
        rows = [
            SemanticMemory(id=new_id("semantic"), text=f"{user} fact {i}", user_id=user, created_at=T0)
            for i in range(3)
        ]
        store.insert(user, rows, embedder.embed_documents([r.text for r in rows]))
    item = CatalogItem(id=new_id("catalog"), text="shared", user_id=None, created_at=T0)
    store.insert(None, [item], embedder.embed_documents(["shared"]))
    yield store, admin, runtime
    store.close()


def as_tenant(runtime, tenant, sql, params=()):
    """Raw SQL as the runtime role with a tenant bound, outside Engram's query builder."""
    with psycopg.connect(runtime) as conn, conn.transaction():
        if tenant is not None:
            conn.execute("SELECT set_config('engram.tenant', %s, true)", (tenant,))
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else cur.rowcount


def test_raw_select_sees_only_own_rows_and_catalog(pg):
    _, _, runtime = pg
    owners = [o for (o,) in as_tenant(runtime, "sarah", "SELECT owner FROM memories")]
    assert sorted(set(owners)) == ["", "sarah"] and owners.count("sarah") == 3
    assert [o for (o,) in as_tenant(runtime, None, "SELECT owner FROM memories")] == [
        ""
    ]  # no tenant: catalog only
    assert as_tenant(runtime, "sarah", "SELECT count(*) FROM memories WHERE owner = 'bob'") == [(0,)]


def test_raw_writes_for_another_tenant_are_refused_by_postgres(pg):
    _, _, runtime = pg
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        as_tenant(
            runtime,
            "sarah",
            "INSERT INTO memories (id, owner, memory_type, text, search_text, embedding, created_at) "
            "VALUES ('sem_x', 'bob', 'semantic', 't', 't', '[1,2]', now())",
        )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a tenant cannot write the catalog
        as_tenant(
            runtime,
            "sarah",
            "INSERT INTO memories (id, owner, memory_type, text, search_text, embedding, created_at) "
            "VALUES ('cat_x', '', 'catalog', 't', 't', '[1,2]', now())",
        )
    assert as_tenant(runtime, "sarah", "UPDATE memories SET text = 'pwned' WHERE owner = 'bob'") == 0
    assert as_tenant(runtime, "sarah", "UPDATE memories SET text = 'pwned' WHERE owner = ''") == 0
    assert as_tenant(runtime, "sarah", "DELETE FROM memories WHERE owner <> 'sarah'") == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # moving own row to another tenant
        as_tenant(runtime, "sarah", "UPDATE memories SET owner = 'bob' WHERE owner = 'sarah'")
    assert as_tenant(
        runtime, "bob", "SELECT count(*) FROM memories WHERE owner = 'bob' AND text LIKE 'bob fact%%'"
    ) == [(3,)]


def test_runtime_role_is_not_owner_nor_superuser(pg):
    _, admin, runtime = pg
    with psycopg.connect(runtime) as conn:
        assert conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False, False)
        assert conn.execute(
            "SELECT tableowner <> current_user FROM pg_tables WHERE tablename = 'memories'"
        ).fetchone() == (True,)
        assert conn.execute(
            "SELECT relforcerowsecurity FROM pg_class WHERE relname = 'memories'"
        ).fetchone() == (True,)
    with pytest.raises(StorageError, match="refusing to run"):
        PostgresStore(admin)  # the owner / a superuser would bypass the policies


def test_a_wrong_url_fails_at_once_with_the_servers_reason(pg_urls, caplog):
    _, runtime = pg_urls
    wrong_user = psycopg.conninfo.make_conninfo(runtime, user="no_such_role")
    with caplog.at_level("WARNING"), pytest.raises(StorageError, match='role "no_such_role" does not exist'):
        PostgresStore(wrong_user)
    # the pool, had it been opened, would have retried for its whole timeout and logged every try
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


def test_info_shows_the_store_without_its_password(pg_urls):
    """`engram info` showed "/engram?host=..." (scheme and user cut off), and a ``password=`` option."""
    admin, runtime = pg_urls
    store = PostgresStore(runtime, admin_url=admin)
    try:
        shown = store.stats()["url"]
    finally:
        store.close()
    dsn = psycopg.conninfo.conninfo_to_dict(runtime)
    assert shown.startswith("postgresql://engram_app@") and f"/{dsn['dbname']}" in shown
    with_password = psycopg.conninfo.make_conninfo(runtime, password="s3cret-pw")
    for form in (with_password, "postgresql://engram_app:s3cret-pw@db:5433/engram?password=s3cret-pw"):
        assert "s3cret" not in shown_url(form) and "engram_app@" in shown_url(form)


def test_the_first_request_after_the_servers_connections_died_succeeds(pg):
    """A PostgreSQL restart leaves the pool's connections dead: the first requests answered 503 (an
    operator's walk). Terminating them as the admin does the same to the connections, not the server."""
    store, admin, _ = pg
    assert len(store.list_memories("sarah", "semantic", limit=10)) == 3
    with psycopg.connect(admin, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'engram_app'"
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    assert len(store.list_memories("sarah", "semantic", limit=10)) == 3  # on a fresh connection


def test_migrations_are_idempotent(pg):
    _, admin, _ = pg
    assert migrate(admin) == []
    with psycopg.connect(admin) as conn:
        assert conn.execute("SELECT version FROM engram_migrations ORDER BY 1").fetchall() == [
            (1,),
            (2,),
            (3,),
            (4,),
            (5,),
            (6,),
        ]


@pytest.fixture
def owned_db(pg_server_url):
    """A fresh database owned by a role that is NOT a superuser, as a real deployment's schema owner
    is: row-level security applies to it unless a migration turns it off. (admin URL, runtime URL)."""
    import uuid

    from psycopg.conninfo import make_conninfo

    name = f"engram_owned_{uuid.uuid4().hex[:12]}"
    owner = f"owner_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER NOBYPASSRLS CREATEROLE')
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
    with psycopg.connect(make_conninfo(pg_server_url, dbname=name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")  # needs a superuser; everything else runs as the owner
    admin = make_conninfo(pg_server_url, dbname=name, user=owner, password="")
    yield admin, make_conninfo(admin, user="engram_app", password="")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'DROP OWNED BY "{owner}"')
        conn.execute(f'DROP ROLE "{owner}"')


def test_a_runtime_store_refuses_an_older_schema_and_migration_4_marks_the_watermark(owned_db, embedder):
    from datetime import timedelta

    from engram.models import EpisodicMemory

    admin, runtime = owned_db
    turns = [
        EpisodicMemory(id=new_id("episodic"), text=f"turn {i}", user_id="sarah", created_at=t, timestamp=t)
        for i, t in enumerate((T0, T0 + timedelta(hours=1)))
    ]
    store = PostgresStore(runtime, admin_url=admin)
    store.ensure_model(embedder.name, embedder.dim)
    store.insert("sarah", turns, embedder.embed_documents([t.text for t in turns]))
    key, _ = ApiKeys(store).create("sarah")
    store.close()
    with psycopg.connect(admin) as conn:  # back to schema 3: a watermark past turn 0, no marks...
        conn.execute("ALTER TABLE api_keys DROP COLUMN scope, DROP COLUMN expires_at")  # migration 6's
        conn.execute("DROP POLICY tombstones_delete ON tombstones")
        conn.execute("DROP INDEX memories_waiting, memories_owner_rid, tombstones_owner")
        conn.execute("ALTER TABLE memories DROP COLUMN consolidated")
        conn.execute("DROP TABLE inspector_sessions")  # migration 5's
        conn.execute("DELETE FROM engram_migrations WHERE version >= 4")
        conn.execute("DELETE FROM engram_tenants")  # ... and migration 2's backfill, empty under RLS
        conn.execute("SELECT set_config('engram.tenant', 'sarah', true)")  # the owner is under RLS
        conn.execute("INSERT INTO consolidation_state VALUES ('sarah', %s, %s, %s)", (T0, turns[0].id, T0))
    with pytest.raises(StorageError, match="predates migration 6"):
        PostgresStore(runtime)
    assert migrate(admin) == [4, 5, 6]
    store = PostgresStore(runtime)
    try:
        assert [e.text for e in store.waiting_episodes("sarah", 10)] == ["turn 1"]
        assert store.tenants() == ["sarah"]
        principal = ApiKeys(store).authenticate(key)  # a key from before scopes: reads and writes
        assert principal.may_write and store.get_key(principal.key_id).expires_at is None
    finally:
        store.close()


def test_deleting_a_user_drops_their_vector_index_as_a_non_superuser_owner(owned_db, pg_server_url, embedder):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from engram.storage.postgres._ann import index_name
    from tests.storage.leftovers import postgres_leftovers

    admin, runtime = owned_db
    store = PostgresStore(runtime, admin_url=admin)
    try:
        store.ensure_model(embedder.name, embedder.dim)
        for user in ("sarah", "bob"):
            rows = [
                SemanticMemory(id=new_id("semantic"), text=f"{user} fact {i}", user_id=user, created_at=T0)
                for i in range(3)
            ]
            store.insert(user, rows, embedder.embed_documents([r.text for r in rows]))
        store.forget("sarah", store.list_memories("sarah", "semantic")[0].id, T0)
        assert sorted(store.index_heavy_tenants(min_rows=2)) == ["bob", "sarah"]
        counts = store.delete_user("sarah")
        assert counts == {"memories": 2, "tombstones": 1, "engram_tenants": 1, "ann_index": 1}
        superuser = make_conninfo(pg_server_url, dbname=conninfo_to_dict(admin)["dbname"])
        assert postgres_leftovers(superuser, ["sarah", index_name("sarah")]) == {}
        assert len(store.list_memories("bob", "semantic")) == 3 and store.delete_user("sarah") == {}
    finally:
        store.close()


def test_concurrent_supersessions_leave_one_live_fact(pg, embedder):
    store, _, _ = pg
    old = SemanticMemory(id=new_id("semantic"), text="Sarah lives in Bristol", user_id="sarah", created_at=T0)
    store.insert("sarah", [old], embedder.embed_documents([old.text]))
    vec = embedder.embed_documents(["Sarah lives somewhere new"])
    outcomes = []

    def supersede(i):
        from engram.storage.base import Supersession

        new = SemanticMemory(
            id=new_id("semantic"),
            text=f"Sarah lives in city {i}",
            user_id="sarah",
            created_at=T0,
            supersedes=old.id,
        )
        try:
            store.insert("sarah", [new], vec, {new.id: Supersession(old.id, retract=False, at=T0)})
            outcomes.append("ok")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=supersede, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    facts = store.list_memories("sarah", "semantic", include_superseded=True, limit=100)
    live_new = [f for f in facts if f.supersedes == old.id]
    assert len(live_new) == 1 and store.fetch("sarah", [old.id])[0].superseded_by == live_new[0].id


def test_engram_open_with_a_postgres_url(pg_urls, tmp_path, monkeypatch):
    admin, _ = pg_urls
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    with Engram.open(
        f"postgresql://engram_app@/{_dbname(admin)}?host={_host(admin)}", pg_admin_url=admin, rerank=False
    ) as eng:
        mem = eng.for_user("sarah")
        f = mem.write("Sarah owns a Lumio Hub v2")
        assert mem.recall("which hub")[0].memory.id == f.id


def _dbname(conninfo):
    return psycopg.conninfo.conninfo_to_dict(conninfo)["dbname"]


def _host(conninfo):
    return psycopg.conninfo.conninfo_to_dict(conninfo)["host"]


def test_recall_quality_matches_the_sqlite_bar(pg_urls, embedder, reranker, token_encoder):
    from pathlib import Path

    from engram.eval.corpus import load_corpus
    from engram.eval.runner import run_questions
    from engram.settings import EngramSettings

    admin, runtime = pg_urls
    with Engram(
        PostgresStore(runtime, admin_url=admin),
        embedder,
        reranker,
        token_encoder=token_encoder,
        settings=EngramSettings(),
    ) as eng:
        questions, _ = load_corpus(eng, Path(__file__).parents[1] / "data" / "smoke_corpus.json")
        result = run_questions(eng, questions)
    assert result["foreign_hits"] == 0
    assert result["r_at_5"] >= 0.9 and result["r_at_10"] >= 0.95 and result["mrr"] >= 0.75


def test_a_bounded_use_count_bump_gives_up_on_a_locked_row(pg):
    from engram.errors import StoreBusy

    store, admin, _ = pg
    fact = store.list_memories("sarah", "semantic", limit=1)[0]
    with psycopg.connect(admin) as holder, holder.transaction():
        holder.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (fact.id,))
        with pytest.raises(StoreBusy):
            store.record_use("sarah", {fact.id: 1}, T0, max_wait_s=0.1)
    assert store.record_use("sarah", {fact.id: 1}, T0, max_wait_s=0.1) == {fact.id: 1}


def test_one_statement_search_returns_what_the_separate_calls_do(pg, embedder, token_encoder):
    """search_candidates (legs, rows and token vectors in one round trip) agrees with search_text,
    search_vector, get and token_vectors, and stays inside the tenant's scope."""
    from engram.models import EpisodicMemory
    from engram.retrieval.late_interaction import pack
    from engram.storage.base import SearchFilter

    store, _, _ = pg
    question = EpisodicMemory(
        id=new_id("episodic"), text="which hub?", user_id="sarah", created_at=T0, timestamp=T0
    )
    answer = EpisodicMemory(
        id=new_id("episodic"),
        text="the Lumio one, sarah fact",
        user_id="sarah",
        created_at=T0,
        timestamp=T0,
        context="which hub?",
        context_id=question.id,
    )
    rows = [question, answer]
    texts = [r.text for r in rows]
    tokens = [pack(t) for t in token_encoder.encode_documents(texts)]
    store.insert("sarah", rows, embedder.embed_documents(texts), None, tokens)
    everything = frozenset({"episodic", "semantic", "procedural", "catalog"})
    for query, where in (
        ("sarah fact", SearchFilter(everything)),
        ("sarah fact", SearchFilter(frozenset({"semantic"}), include_superseded=True)),
        ("the", SearchFilter(everything)),  # no searchable word: the text leg is empty
    ):
        vector = embedder.embed_query(query)
        found = store.search_candidates("sarah", query, vector, where, 80, True)
        assert found.bm25 == store.search_text("sarah", query, where, 80)
        assert found.dense == store.search_vector("sarah", vector, where, 80)
        ids = {h.id for h in found.bm25 + found.dense}
        assert sorted(m.id for m in found.rows) == sorted(m.id for m in store.fetch("sarah", list(ids)))
        assert all(m.user_id in ("sarah", None) for m in found.rows)  # never bob's
        if answer.id in ids:  # the turn's own tokens and those of the turn it replied to
            assert found.tokens[answer.id] == tokens[1] and found.tokens[question.id] == tokens[0]
    assert store.search_candidates("sarah", "x", vector, SearchFilter(frozenset()), 80, False).rows == []


@pytest.mark.parametrize("database", ["pg_urls", "owned_db"])  # schema owner: superuser or not
def test_a_heavy_tenant_gets_its_own_hnsw_index_and_recall_uses_it(database, request, embedder):
    """`engram reindex` (Engine.index_heavy_tenants) gives a tenant past ann_min_rows a partial HNSW
    index; its dense leg then goes through it (the plan says so), still finds the catalog, leaves
    superseded rows out, and never returns another tenant's rows; a small tenant keeps the exact scan."""
    import numpy as np

    from engram.models import EpisodicMemory
    from engram.settings import EngramSettings
    from engram.storage.base import SearchFilter
    from engram.storage.postgres import _ann

    admin, runtime = request.getfixturevalue(database)
    store = PostgresStore(runtime, admin_url=admin)
    eng = Engram(store, embedder, None, settings=EngramSettings(ann_min_rows=1500))
    rng = np.random.default_rng(7)
    for user, n in (("heavy", 2000), ("light", 30)):
        rows = [
            EpisodicMemory(
                id=new_id("episodic"), text=f"{user} turn {i}", user_id=user, timestamp=T0, created_at=T0
            )
            for i in range(n)
        ]
        vectors = rng.standard_normal((n, embedder.dim)).astype(np.float32)
        store.insert(user, rows, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    item = CatalogItem(id=new_id("catalog"), text="shared fact", user_id=None, created_at=T0)
    store.insert(None, [item], embedder.embed_documents([item.text]))
    mem = eng.for_user("heavy")
    old = mem.write("heavy's old fact")
    new = mem.write("heavy's new fact", supersedes_id=old.id)
    assert store.index_heavy_tenants(0) == []  # 0: graphs off
    assert eng.index_heavy_tenants() == ["heavy"] and eng.index_heavy_tenants() == []  # once

    types = frozenset({"episodic", "semantic", "procedural", "catalog"})
    live = SearchFilter(memory_types=types, include_superseded=False)
    query = embedder.embed_documents(["heavy's fact"])[0]
    params: dict = {"types": sorted(live.memory_types), "limit": 80}
    with store._tenant_tx("heavy") as conn:
        sql = store._dense_leg(conn, "heavy", live, query, "AND superseded_by IS NULL", params)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall())
    assert _ann.index_name("heavy") in plan
    found = [h.id for h in store.search_vector("heavy", query, live, 80)]
    assert found[0] == new.id and item.id in found and old.id not in found and len(found) == 80
    light = {m.id for m in store.list_memories("light", "episodic", limit=100)}
    assert not light & set(found)
    hits = mem.recall("heavy's fact", k=5)  # the whole pipeline: legs, rows and tokens in one go
    assert hits[0].memory.id == new.id and old.id not in {h.memory.id for h in hits}
    facts = mem.recall("heavy's fact", k=5, memory_types=["semantic"])  # one type: the exact scan
    assert [h.memory.id for h in facts] == [new.id]
    with store._tenant_tx("light") as conn:
        assert not store._ann.has(conn, "light")
    assert [h.id for h in store.search_vector("light", query, live, 80)][:1] == [item.id]
    eng.close()
    runtime_only = PostgresStore(runtime)
    with pytest.raises(ConfigError, match="schema owner"):
        runtime_only.index_heavy_tenants(10)
    runtime_only.close()


def test_concurrent_forgets_of_adjacent_links_never_deadlock(pg, embedder):
    """Forgetting B and C of a chain A <- B <- C at once: forget(B) deletes B, then updates A and C;
    forget(C) deletes C, then updates B. Locking rows as they come took them in opposite orders and
    PostgreSQL aborted one as a deadlock (a 503). Both must succeed, in either order, every time, and
    leave A live."""
    from engram.storage.base import Supersession

    store, _, _ = pg
    vec = embedder.embed_documents(["Sarah lives somewhere"])
    failures: list[BaseException] = []
    for round_ in range(30):
        chain = []
        for city in ("Bristol", "Leith", "Edinburgh"):
            row = SemanticMemory(
                id=new_id("semantic"),
                text=f"Sarah lives in {city} ({round_})",
                user_id="sarah",
                created_at=T0,
                supersedes=chain[-1].id if chain else None,
            )
            supersede = {row.id: Supersession(chain[-1].id, retract=False, at=T0)} if chain else None
            store.insert("sarah", [row], vec, supersede)
            chain.append(row)
        a, b, c = chain
        start = threading.Barrier(2)

        def forget(memory_id, start=start):
            start.wait()
            try:
                store.forget("sarah", memory_id, T0)
            except BaseException as exc:  # collected and asserted below
                failures.append(exc)

        threads = [threading.Thread(target=forget, args=(i,)) for i in (b.id, c.id)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, f"round {round_}: {failures[0]!r}"
        (a_now,) = store.fetch("sarah", [a.id])
        assert (a_now.superseded_by, store.fetch("sarah", [b.id, c.id])) == (None, [])
        store.forget("sarah", a.id, T0)
