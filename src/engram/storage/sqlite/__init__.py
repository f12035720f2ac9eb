"""The embedded backend: one SQLite file (see ``_store`` for the layout)."""

from engram.storage.sqlite._store import SQLiteStore

__all__ = ["SQLiteStore"]
