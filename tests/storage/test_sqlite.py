"""SQLite-specific behaviour: several processes on one file, file layout."""

import subprocess
import sys
import textwrap

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
        assert len(store.list("alice", "episodic", limit=100)) == 40
        assert len(store.list("bob", "episodic", limit=100)) == 40
    finally:
        store.close()


def test_wal_mode_and_schema_version(tmp_path):
    store = SQLiteStore(tmp_path / "x.db")
    try:
        conn = store._conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.stats()["meta"]["schema_version"] == "2"
    finally:
        store.close()


def test_an_older_file_is_upgraded_and_a_newer_one_refused(tmp_path):
    import pytest

    from engram.errors import StorageError

    store = SQLiteStore(tmp_path / "x.db")
    store._conn().execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store.close()
    store = SQLiteStore(tmp_path / "x.db")  # 0.1's layout gains memory_tokens; version moves to 2
    assert store.stats()["meta"]["schema_version"] == "2"
    store._conn().execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    store.close()
    with pytest.raises(StorageError, match="upgrade engram-memory"):
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
