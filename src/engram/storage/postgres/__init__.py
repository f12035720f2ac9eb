"""The server backend: PostgreSQL with pgvector and row-level security (see ``_store``)."""

from engram.storage.postgres._migrations import MIGRATIONS, RUNTIME_ROLE, migrate
from engram.storage.postgres._store import PostgresStore

__all__ = ["MIGRATIONS", "RUNTIME_ROLE", "PostgresStore", "migrate"]
