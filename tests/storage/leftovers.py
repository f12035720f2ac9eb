"""What is left of a user on a store, read as the store's owner with raw queries (never through Engram):
every table or index the store has, enumerated from its schema, so a table added later is searched
too. Used by the delete-user tests of every backend and surface."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

from engram.storage.sqlite._fts import owner_prefix


def sqlite_leftovers(path: Path, needles: list[str], owner: str, words: Sequence[str] = ()) -> dict[str, int]:
    """Rows of any table of the file with any needle in any column (as text, and as bytes: the FTS
    index's segments are blobs), the owner's FTS digit prefix among them, FTS terms of the owner (read
    from the index itself through fts5vocab), and any of ``words`` in the bytes of the file and its
    write-ahead log (deleted text left on free pages)."""
    conn = apsw.Connection(str(path))
    found: dict[str, int] = {}
    needles = [*needles, owner_prefix(owner)]
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for needle in needles:
                    sql = f"""SELECT count(*) FROM "{table}" WHERE instr(CAST("{column}" AS TEXT), ?1) > 0
                              OR instr(CAST("{column}" AS BLOB), CAST(?1 AS BLOB)) > 0"""
                    n = conn.execute(sql, (needle,)).fetchone()[0]
                    if n:
                        found[f"{table}.{column} ~ {needle}"] = n
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'memory_fts', 'row')")
        terms = conn.execute(
            "SELECT count(*) FROM temp.vocab WHERE term LIKE ?", (owner_prefix(owner) + "%",)
        ).fetchone()[0]
        if terms:
            found["memory_fts terms"] = terms
        # The bytes of the file and its log, free pages too, for ``words`` of the owner's text. Not for
        # ids: an interior b-tree page may keep a deleted key as a separator until VACUUM.
        for part in (path, path.with_name(path.name + "-wal")):
            data = part.read_bytes() if part.exists() else b""
            for needle in words:
                if needle.encode() in data:
                    found[f"bytes of {part.name} ~ {needle}"] = data.count(needle.encode())
        ann = path.with_name(path.name + ".ann")
        if ann.exists():
            from engram.storage._ann_file import file_name

            if any(p.name.startswith(file_name(owner)) for p in ann.iterdir()):
                found["ann file"] = 1
    finally:
        conn.close()
    return found


def postgres_leftovers(admin_url: str, needles: list[str]) -> dict[str, int]:
    """Rows of any table of the public schema with any needle in any column (cast to text), and index
    definitions naming a needle. As the owner with row-level security off for it (a superuser, or
    BYPASSRLS), so no policy hides a row."""
    import psycopg

    found: dict[str, int] = {}
    with psycopg.connect(admin_url) as conn:
        bypass = conn.execute(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert bypass and bypass[0], "the check needs a role that row-level security does not filter"
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns c JOIN pg_tables t "
            "ON t.tablename = c.table_name AND t.schemaname = c.table_schema WHERE c.table_schema = 'public'"
        ).fetchall()
        assert {t for t, _ in columns} >= {"memories", "tombstones", "api_keys", "inspector_sessions"}
        for table, column in columns:
            for needle in needles:
                sql = f'SELECT count(*) FROM "{table}" WHERE strpos("{column}"::text, %s::text) > 0'
                n = conn.execute(sql, (needle,)).fetchone()[0]
                if n:
                    found[f"{table}.{column} ~ {needle}"] = n
        for (definition,) in conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'"):
            if any(needle in definition for needle in needles):
                found[f"index {definition[:60]}"] = 1
    return found


def opensearch_leftovers(node: Any, prefix: str, needles: list[str], users: list[str]) -> dict[str, int]:
    """Documents of any of the store's indices (as the cluster's admin: no DLS) with any needle in
    their source, and the internal users named."""
    found: dict[str, int] = {}
    status, indices = node.request("GET", f"/_cat/indices/{prefix}*?format=json")
    assert status == 200 and len(indices) >= 3
    for index in (i["index"] for i in indices):
        node.request("POST", f"/{index}/_refresh")
        body = {"size": 10000, "query": {"match_all": {}}, "_source": {"excludes": ["embedding"]}}
        status, answer = node.request("POST", f"/{index}/_search", body)
        assert status == 200
        for hit in answer["hits"]["hits"]:
            text = json.dumps(hit["_source"]) + hit["_id"]
            for needle in needles:
                if needle in text:
                    found[f"{index}/{hit['_id']} ~ {needle}"] = 1
    for user in users:
        status, _ = node.request("GET", f"/_plugins/_security/api/internalusers/{user}")
        if status != 404:
            found[f"internal user {user}"] = 1
    return found
