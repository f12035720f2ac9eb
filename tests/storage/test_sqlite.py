"""SQLite-specific behaviour: several processes on one file, file layout."""

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

from engram.models import EpisodicMemory, new_id, utcnow
from engram.storage.sqlite import SQLiteStore

WRITER = textwrap.dedent(
    """
    import sys
    from engram import Engram
    with Engram.open(sys.argv[1], rerank=False) as eng:
        mem = eng.for_user(sys.argv[2])
        for i in range(40):
            text = f"turn {i} from {sys.argv[2]}"
            mem.remember_turn(text)
            assert mem.recall(text, k=1)[0].memory.text == text  # visible at once
    """
)


def test_two_processes_write_and_read_the_same_file(tmp_path):
    url = f"sqlite:///{tmp_path}/shared.db"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, url, user], stderr=subprocess.PIPE, text=True)
        for user in ("alice", "bob")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = SQLiteStore(tmp_path / "shared.db")
    try:
        assert len(store.list_memories("alice", "episodic", limit=100)) == 40
        assert len(store.list_memories("bob", "episodic", limit=100)) == 40
    finally:
        store.close()


def test_wal_mode_and_schema_version(tmp_path):
    store = SQLiteStore(tmp_path / "x.db")
    try:
        conn = store._conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.stats()["meta"]["schema_version"] == "4"
    finally:
        store.close()


def test_an_older_file_is_upgraded_and_a_newer_one_refused(tmp_path, embedder):
    import pytest

    from engram.errors import StorageError
    from engram.models import EpisodicMemory, new_id

    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    turns = [
        EpisodicMemory(id=new_id("episodic"), text=f"turn {i}", user_id="sarah", created_at=t, timestamp=t)
        for i, t in enumerate((t0, t0 + timedelta(hours=1)))
    ]
    store = SQLiteStore(tmp_path / "x.db")
    store.ensure_model(embedder.name, embedder.dim)
    store.insert("sarah", turns, embedder.embed_documents([t.text for t in turns]))
    conn = store._conn()  # back to 0.1's layout: a watermark past turn 0, no consolidated marks
    conn.execute("DROP INDEX memories_waiting; ALTER TABLE memories DROP COLUMN consolidated")
    conn.execute(
        "INSERT INTO consolidation_state VALUES ('sarah', ?, ?, ?)",
        (t0.isoformat(timespec="microseconds"), turns[0].id, t0.isoformat()),
    )
    conn.execute("ALTER TABLE api_keys DROP COLUMN scope; ALTER TABLE api_keys DROP COLUMN expires_at")
    conn.execute("INSERT INTO api_keys VALUES ('key_old', 'h', 'sarah', '', ?, NULL)", (t0.isoformat(),))
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store.close()
    store = SQLiteStore(tmp_path / "x.db")  # gains memory_tokens, the marks, key scopes; version 4
    assert store.stats()["meta"]["schema_version"] == "4"
    assert [e.text for e in store.waiting_episodes("sarah", 10)] == ["turn 1"]  # turn 0 was consumed
    old_key = store.get_key("key_old")  # a key from before scopes reads and writes, and never expires
    assert old_key is not None and (old_key.scope, old_key.expires_at) == ("write", None)
    store._conn().execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    store.close()
    with pytest.raises(StorageError, match="upgrade Engram"):
        SQLiteStore(tmp_path / "x.db")


def test_an_in_memory_store_opens(tmp_path):
    store = SQLiteStore(":memory:")  # cannot do WAL: keeps its journal mode instead of waiting
    store.close()


def _open_connections(path) -> int:
    import apsw

    return sum(c.filename == str(path) for c in apsw.connections())


def test_a_finished_thread_gives_its_connection_back(tmp_path):
    """A server's worker threads come and go; each one's connection must close when it ends
    (issue 12.1: 17 -> 32 -> 47 open connections over three bursts)."""
    import threading

    store = SQLiteStore(tmp_path / "x.db")
    try:
        for _burst in range(3):
            threads = [threading.Thread(target=store.tenants) for _ in range(15)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert _open_connections(store.path) == 1  # this thread's
        assert store.tenants() == []  # and it still works
    finally:
        store.close()
    assert _open_connections(store.path) == 0


def test_a_writer_of_this_process_bounds_a_use_count_wait_and_nesting_fails_at_once(tmp_path):
    """This process's writers queue on the store's mutex: the use-count bump still gives up after its
    own bound (StoreBusy, which recall turns into a queued bump), and a write opened inside a write
    on the same thread fails at once instead of waiting for itself."""
    import threading
    import time

    import pytest

    from engram.errors import StorageError, StoreBusy

    store = SQLiteStore(tmp_path / "x.db")
    holding, release = threading.Event(), threading.Event()

    def long_write() -> None:
        with store._tenant_statements("sarah", write=True):
            holding.set()
            release.wait(30)

    writer = threading.Thread(target=long_write)
    writer.start()
    try:
        assert holding.wait(30)
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            store.record_use("sarah", {"sem_x": 1}, datetime.now(UTC), max_wait_s=0.2)
        assert time.monotonic() - started < 5  # its own bound, not the 10 s busy timeout
    finally:
        release.set()
        writer.join(30)
    assert store.record_use("sarah", {"sem_x": 1}, datetime.now(UTC), max_wait_s=0.2) == {}
    with store._tenant_statements("sarah", write=True):
        started = time.monotonic()
        with pytest.raises(StorageError, match="already open in this thread"):
            store.record_use("sarah", {"sem_x": 1}, datetime.now(UTC))
        assert time.monotonic() - started < 1
    store.close()


def test_row_counts_per_owner_follow_writes_and_are_made_for_older_files(tmp_path, embedder):
    """BM25's row count per owner (``owner_rows``, kept by triggers): filled once for a file written
    before it existed, then kept by every insert and delete."""
    from engram.models import SemanticMemory, new_id

    at = datetime(2025, 1, 1, tzinfo=UTC)

    def counts(store):
        return dict(store._conn().execute("SELECT owner, n FROM owner_rows WHERE n > 0").fetchall())

    def write(store, user, n):
        rows = [
            SemanticMemory(id=new_id("semantic"), text=f"{user} fact {i}", user_id=user, created_at=at)
            for i in range(n)
        ]
        store.insert(user, rows, embedder.embed_documents([r.text for r in rows]))
        return rows

    store = SQLiteStore(tmp_path / "e.db")
    store.ensure_model(embedder.name, embedder.dim)
    sarah = write(store, "sarah", 3)
    write(store, "bob", 2)
    assert counts(store) == {"sarah": 3, "bob": 2}
    store.forget("sarah", sarah[0].id, at)
    assert counts(store) == {"sarah": 2, "bob": 2}
    conn = store._conn()  # a file from before owner_rows
    for statement in (
        "DROP TRIGGER owner_rows_insert",
        "DROP TRIGGER owner_rows_delete",
        "DROP TABLE owner_rows",
    ):
        conn.execute(statement)
    store.close()
    reopened = SQLiteStore(tmp_path / "e.db")
    assert counts(reopened) == {"sarah": 2, "bob": 2}
    write(reopened, "sarah", 1)
    assert counts(reopened) == {"sarah": 3, "bob": 2}
    reopened.close()


def test_a_new_store_is_readable_by_its_owner_alone(tmp_path, embedder):
    """Every tenant's memories are in one file: another account on the host must not read it."""
    import stat

    path = tmp_path / "home" / "engram.db"
    store = SQLiteStore(path)
    try:
        now = utcnow()
        row = EpisodicMemory(
            id=new_id("episodic"), text="PIN 4417", user_id="sarah", created_at=now, timestamp=now
        )
        store.insert("sarah", [row], embedder.embed_documents([row.text]))
        modes = {
            p.name: stat.S_IMODE(p.stat().st_mode) for p in [path.parent, *path.parent.glob("engram.db*")]
        }
    finally:
        store.close()
    assert modes["home"] == 0o700 and modes["engram.db"] == 0o600
    assert {modes.get(f"engram.db-{end}", 0o600) for end in ("wal", "shm")} == {0o600}
