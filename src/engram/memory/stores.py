"""The store opener: a store URL to a backend. The only module outside ``engram.storage`` that names a
backend (the import-linter contract in pyproject.toml holds everything else to the Store roles)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engram.errors import ConfigError
from engram.settings import DEFAULT_ANN_MIN_ROWS, EngramSettings
from engram.storage.base import Store

# "scheme:" (two letters at least, so C:\\ stays a path) or "keyword=" as in a libpq string "host=x dbname=y"
_NOT_A_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:|(^|\s)[A-Za-z_]+\s*=")


_SERVERS = ("postgresql://", "postgres://", "opensearch://", "opensearchs://")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (``sqlite:///path.db`` or a plain path); None for a server
    (PostgreSQL, OpenSearch). Anything else is refused rather than taken for a file name (ConfigError)."""
    if url.startswith(_SERVERS):
        return None
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")  # sqlite:///rel.db, sqlite:////abs/path.db
    elif not url.strip() or _NOT_A_PATH.search(url):
        raise ConfigError(
            f"unsupported store URL {url!r}: expected sqlite:///PATH, postgresql://USER@HOST/DB, "
            "opensearch(s)://HOST:PORT or a file path (a libpq keyword string is not accepted; write it "
            "as a postgresql:// URL)"
        )
    else:
        path = url
    return Path(path).expanduser()


def open_store(
    url: str,
    pg_admin_url: str | None = None,
    ann_min_rows: int = DEFAULT_ANN_MIN_ROWS,
    settings: EngramSettings | None = None,
) -> Store:
    """Open a store from a URL: ``sqlite:///path.db`` (or a bare path), ``postgresql://...``
    (migrated first with ``pg_admin_url`` when given), or ``opensearch(s)://HOST:PORT`` (configured by
    the ``os_*`` settings)."""
    if url.startswith(("opensearch://", "opensearchs://")):
        with _extra("opensearch"):
            return _open_opensearch(url, settings or EngramSettings.defaults())
    path = sqlite_path(url)
    if path is None:
        # Imported only when asked for: PostgreSQL's driver comes with the optional "postgres" extra,
        # which a SQLite store does not need.
        with _extra("postgres"):
            from engram.storage.postgres import PostgresStore

            return PostgresStore(url, admin_url=pg_admin_url)
    # Imported here too: the engine (apsw, sqlite-vec, usearch, onnxruntime) costs ~50 ms at import, which
    # `import engram` for the REST Client alone should not pay.
    from engram.storage.sqlite import SQLiteStore

    return SQLiteStore(path, ann_min_rows=ann_min_rows)


def _open_opensearch(url: str, settings: EngramSettings) -> Store:
    # Imported only when asked for, like PostgreSQL's: opensearch-py comes with the "opensearch" extra.
    from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore

    return OpenSearchStore(url, OpenSearchOptions.from_settings(settings))


# The third-party modules each server extra brings: missing, the store cannot open, whatever imports them.
_EXTRA_MODULES = {"postgres": ("psycopg", "psycopg_pool"), "opensearch": ("opensearchpy",)}


@contextmanager
def _extra(name: str) -> Iterator[None]:
    """Turn a missing driver of the ``name`` extra into a ConfigError that says what to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _EXTRA_MODULES[name]:
            raise
        raise ConfigError(
            f"{name} stores need the {name} extra, which brings {exc.name}: pip install -e '.[{name}]' "
            "in Engram's checkout"
        ) from exc
