"""What a backend supplies to the shared rules (``engram.storage._rules``): statements, not logic.

The rules of the Store protocol (supersession, forgetting with chain mending and quote dropping, the
consolidation compare-and-set, model records, API keys, sessions) are written once, against the roles below. A
backend implements them over its engine: each method is one statement, or the few statements one step
needs in its dialect (SQLite also keeps its FTS and vector tables in step), and makes no decision the
other backends would have to make again. A new backend (OpenSearch) implements the same roles.

``TenantStatements`` work inside one open transaction (or one read snapshot) bound to one owner: every
statement filters by that owner, so a row of another owner is absent, exactly like a missing one.
(SQLite's FTS rows have no owner column: they are reached only by a row key the same transaction read
under the owner.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from engram.models import Memory, Tombstone, Vectors
from engram.storage.base import ApiKeyRecord, SessionLookup

K = TypeVar("K")  # a backend's handle on a row it found (SQLite's and PostgreSQL's rid)

WAITING, CONSOLIDATED, SKIPPED = 0, 1, 2  # an episode's consolidation state (the ``consolidated`` column)
KeyLookup = Literal["key_hash", "id", "user_id"]  # what an API key record is looked up by


@dataclass(frozen=True)
class RowState(Generic[K]):
    """What supersession and forgetting need to know of a row."""

    key: K
    memory_type: str
    created_at: datetime
    supersedes: str | None
    superseded_by: str | None


class RowReads(Protocol):
    """The owner's rows as models."""

    def rows_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> list[Memory]:
        """Rows among ``ids`` owned by one of ``owners``, in any order."""
        ...

    def tokens_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> dict[str, bytes]:
        """Packed token vectors of the rows among ``ids`` owned by one of ``owners`` that have them."""
        ...

    def page(self, memory_type: str, include_superseded: bool, limit: int, offset: int) -> list[Memory]:
        """The owner's rows of one type, newest first (created_at, then write order)."""
        ...

    def count(self, memory_type: str, include_superseded: bool, limit: int) -> int:
        """How many rows ``page`` could list, counted up to ``limit`` at most, reading none."""
        ...

    def waiting(self, limit: int) -> list[Memory]:
        """The owner's episodes still WAITING, oldest first (created_at, then id)."""
        ...

    def without_tokens(self, limit: int) -> list[Memory]:
        """The owner's rows that have no token vectors, in write order."""
        ...

    def scan(self, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        """(cursor, row, consolidation state) of the owner's rows in write order after ``after``."""
        ...

    def tombstone_rows(self) -> list[tuple[str, str, datetime, datetime]]:
        """(id, memory_type, created_at, forgotten_at) of the owner's tombstones, oldest first."""
        ...


class RowWrites(Protocol[K]):
    """Inserting the owner's rows and superseding them."""

    def lock_owner(self) -> None:
        """No other forget, supersession or consolidation of the owner runs until this transaction
        ends. They find the rows they change by following links (a chain's neighbours, the turns
        quoting a turn), so locking rows as they come could take them in opposite orders: two
        forgets of adjacent links deadlocked on PostgreSQL. A backend with one writer at a time
        (SQLite's write lock, OpenSearch's tenant lease) has nothing more to do."""
        ...

    def has_row(self, memory_id: str) -> bool:
        """Whether the owner has the row; it then stays until the transaction ends (a concurrent
        forget of it waits)."""
        ...

    def insert_rows(self, rows: Sequence[Memory], vectors: Vectors, tokens: Sequence[bytes] | None) -> None:
        """Insert new rows (their ids are new: one already taken is a Conflict)."""
        ...

    def set_tokens(self, tokens: Mapping[str, bytes]) -> None:
        """Store token vectors for the owner's rows by id (other ids are ignored)."""
        ...

    def lock_row(self, memory_id: str) -> RowState[K] | None:
        """The owner's row, locked until the transaction ends, or None."""
        ...

    def mark_superseded(self, key: K, by: str, at: datetime, retract: bool) -> None: ...


class Forgetting(Protocol[K]):
    """Removing the owner's rows and mending what pointed at them."""

    def delete_row(self, memory_id: str) -> RowState[K] | None:
        """Delete the owner's row everywhere (text, vectors, token vectors); what it was, or None."""
        ...

    def quoting(self, episode_id: str) -> list[tuple[K, Memory]]:
        """The owner's episodes indexed with ``episode_id`` as their context, locked."""
        ...

    def set_context(self, key: K, attrs: str, keyword_text: str) -> None:
        """Store an episode's attrs and re-index its text (after its context changed)."""
        ...

    def revive(self, memory_id: str, superseded_by: str, retracted: bool) -> None:
        """Make the row live again (no successor, time or retraction) if ``superseded_by`` replaced it
        and it is not retracted; a retracted row too when ``retracted`` is true."""
        ...

    def relink(self, memory_id: str, superseded_by: str, to: str) -> bool:
        """Point the row at ``to`` instead of ``superseded_by``, if that replaced it; whether it did."""
        ...

    def set_supersedes(self, memory_id: str, supersedes: str) -> None: ...

    def add_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        """Insert the owner's tombstones (an id already there is a Conflict)."""
        ...


class ConsolidationWrites(Protocol[K]):
    """The steps of one consolidation batch."""

    def claim_waiting(self, episode_ids: Sequence[str]) -> int:
        """How many of ``episode_ids`` are the owner's episodes still WAITING; no other consolidation
        of the owner runs until this transaction ends."""
        ...

    def lock_typed(self, memory_id: str, memory_type: str) -> tuple[K, Any] | None:
        """(key, attrs) of the owner's row of that type, locked, or None."""
        ...

    def merge_fact(self, key: K, attrs: str, at: datetime) -> None:
        """Store a fact's new attrs and count one more use at ``at``."""
        ...

    def playbook_succeeded(self, key: K, at: datetime) -> None: ...

    def playbook_failed(self, key: K, attrs: str) -> None: ...

    def mark_episodes(self, episode_ids: Sequence[str], state: int) -> None: ...


class TenantStatements(RowReads, RowWrites[K], Forgetting[K], ConsolidationWrites[K], Protocol[K]):
    """Every statement on one owner's rows."""


class StoreStatements(Protocol):
    """Statements on what no tenant owns: the meta records, API keys, the list of tenants."""

    def read_meta(self, keys: Sequence[str]) -> dict[str, str]: ...

    def add_meta(self, values: Mapping[str, str]) -> None:
        """Record values for keys not recorded yet."""
        ...

    def insert_key(self, record: ApiKeyRecord, key_hash: str) -> None: ...

    def select_keys(self, by: KeyLookup | None, value: str | None) -> list[tuple[ApiKeyRecord, str]]:
        """(record, hash) of the keys whose ``by`` column is ``value`` (all with None), oldest first."""
        ...

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Revoke a live key; whether one was."""
        ...

    def tenants(self) -> list[str]:
        """Every user id with rows or tombstones, sorted."""
        ...

    def insert_session(self, token_hash: str, key_id: str, expires_at: datetime) -> None: ...

    def select_session(self, token_hash: str) -> tuple[str, datetime] | None:
        """(key id, expiry) of the session, or None."""
        ...

    def delete_sessions(self, by: SessionLookup, value: str) -> int:
        """Delete the sessions whose ``by`` column is ``value``; how many."""
        ...

    def delete_expired_sessions(self, at: datetime) -> None:
        """Delete the sessions that expired before ``at``."""
        ...


# the columns key_record reads, in order
KEY_COLUMNS = "id, user_id, label, created_at, revoked_at, scope, expires_at"


def as_time(value: str | datetime) -> datetime:
    """A stored timestamp as a datetime (SQLite stores ISO 8601 text, PostgreSQL timestamptz)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def key_record(row: Sequence[Any]) -> ApiKeyRecord:
    """An API key record from its KEY_COLUMNS."""
    key_id, user_id, label, created_at, revoked_at, scope, expires_at = row
    return ApiKeyRecord(
        id=key_id,
        user_id=user_id,
        label=label,
        created_at=as_time(created_at),
        revoked_at=as_time(revoked_at) if revoked_at else None,
        scope=scope,
        expires_at=as_time(expires_at) if expires_at else None,
    )
