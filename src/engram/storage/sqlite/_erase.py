"""Deleting everything of one owner from the SQLite file (``Store.delete_user``), in one transaction.

Every table with an owner column loses the owner's rows, and the tables keyed by what the owner's rows
lead to lose theirs: ``memory_fts`` by the rows' rids, ``inspector_sessions`` by the keys' ids. FTS5
keeps a deleted row's terms in its index segments (marked deleted) until they merge, so the index is
then merged whole (``optimize``): the owner's prefixed terms are gone from the file, not only unlinked.
That rewrites the full-text index, once per deletion: a data-rights request, not a hot path.
"""

from __future__ import annotations

import apsw

# Tables and the column that names the owner in each (checked against the schema by the tests).
OWNER_TABLES = {
    "memories": "owner",
    "memory_vec": "owner",
    "memory_tokens": "owner",
    "tombstones": "owner",
    "consolidation_state": "owner",
    "owner_rows": "owner",
    "api_keys": "user_id",
}


def erase_owner(conn: apsw.Connection, owner: str) -> dict[str, int]:
    """Delete the owner's rows everywhere (inside the caller's write transaction); counts by kind."""
    counts: dict[str, int] = {}

    def run(kind: str, sql: str) -> None:
        conn.execute(sql, (owner,))
        if conn.changes():
            counts[kind] = counts.get(kind, 0) + conn.changes()

    run(
        "sessions",
        "DELETE FROM inspector_sessions WHERE key_id IN (SELECT id FROM api_keys WHERE user_id = ?)",
    )
    run("fts", "DELETE FROM memory_fts WHERE rowid IN (SELECT rid FROM memories WHERE owner = ?)")
    for table, column in OWNER_TABLES.items():
        run("keys" if table == "api_keys" else table, f"DELETE FROM {table} WHERE {column} = ?")
    if counts.get("fts"):
        conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('optimize')")
    return counts
