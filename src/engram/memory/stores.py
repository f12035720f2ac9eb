"""The store opener: a store URL to a backend. The only module outside ``engram.storage`` that names a
backend (the import-linter contract in pyproject.toml holds everything else to the Store roles)."""

from __future__ import annotations

import re
from pathlib import Path

from engram.errors import ConfigError
from engram.settings import DEFAULT_ANN_MIN_ROWS
from engram.storage.base import Store
from engram.storage.sqlite import SQLiteStore

# "scheme:" (two letters at least, so C:\\ stays a path) or "keyword=" as in a libpq string "host=x dbname=y"
_NOT_A_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:|(^|\s)[A-Za-z_]+\s*=")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (``sqlite:///path.db`` or a plain path); None for PostgreSQL.
    Anything else is refused rather than taken for a file name (ConfigError)."""
    if url.startswith(("postgresql://", "postgres://")):
        return None
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")  # sqlite:///rel.db, sqlite:////abs/path.db
    elif not url.strip() or _NOT_A_PATH.search(url):
        raise ConfigError(
            f"unsupported store URL {url!r}: expected sqlite:///PATH, postgresql://USER@HOST/DB or a file "
            "path (a libpq keyword string is not accepted; write it as a postgresql:// URL)"
        )
    else:
        path = url
    return Path(path).expanduser()


def open_store(url: str, pg_admin_url: str | None = None, ann_min_rows: int = DEFAULT_ANN_MIN_ROWS) -> Store:
    """Open a store from a URL: ``sqlite:///path.db`` (or a bare path), or ``postgresql://...``
    (migrated first with ``pg_admin_url`` when given)."""
    path = sqlite_path(url)
    if path is None:
        # Imported only when asked for: PostgreSQL's driver comes with the optional "postgres" extra,
        # which a SQLite store does not need.
        from engram.storage.postgres import PostgresStore

        return PostgresStore(url, admin_url=pg_admin_url)
    return SQLiteStore(path, ann_min_rows=ann_min_rows)
