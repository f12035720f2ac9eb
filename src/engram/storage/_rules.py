"""The Store protocol's rules, written once for every backend.

``StoreRules`` implements the methods whose logic does not depend on the engine: validation, the
supersession checks, forgetting (a tombstone, quotes dropped from the turns that replied to the
forgotten one, a supersession chain mended around the gap), the consolidation compare-and-set, the
model records, the API keys and sign-in sessions. A backend subclasses it, opens its transactions
(``_tenant_statements``, ``_store_statements``) and supplies the statements
(``engram.storage._statements``); it implements itself only what is the engine's own: the two search
legs, the use counts (each engine has its own way not to wait on a busy writer), ``stats``, ``close``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Generic

from engram.errors import Conflict, InvalidInput, NotFound
from engram.models import EpisodicMemory, Memory, MemoryType, Tombstone, Vectors, is_well_formed_id
from engram.storage._rows import (
    keyword_text_of,
    memory_to_row,
    merged_provenance,
    refined_attrs,
    without_context,
)
from engram.storage._statements import (
    CONSOLIDATED,
    SKIPPED,
    K,
    KeyLookup,
    StoreStatements,
    TenantStatements,
)
from engram.storage.base import (
    BATCH_CHANGED,
    ApiKeyRecord,
    ConsolidationWrite,
    SessionLookup,
    Supersession,
    Tenant,
    check_insert,
    check_model,
    check_supersession,
    model_keys,
    owner_of,
    read_owners,
    wanted_ids,
)
from engram.validation import check_page


class StoreRules(abc.ABC, Generic[K]):
    """Store, KeyStore, SessionStore, ConsolidationStore and TransferStore methods over a backend's
    statements."""

    @property
    @abc.abstractmethod
    def _label(self) -> str:
        """How messages name this store (a path; never a password)."""

    @abc.abstractmethod
    def _tenant_statements(
        self, tenant: Tenant, *, write: bool
    ) -> AbstractContextManager[TenantStatements[K]]:
        """Statements on the tenant's rows: in one write transaction (rolled back if the block
        raises), or for reading only."""

    @abc.abstractmethod
    def _store_statements(self, *, write: bool) -> AbstractContextManager[StoreStatements]:
        """Statements on what no tenant owns, likewise."""

    # -- MemoryStore ---------------------------------------------------------------------------
    def ensure_model(self, name: str, dim: int, kind: str = "embedding") -> None:
        keys = model_keys(kind)
        with self._store_statements(write=True) as statements:
            if check_model(statements.read_meta(keys), kind, name, dim, self._label):
                statements.add_meta(dict(zip(keys, (name, str(dim)), strict=True)))

    def insert(
        self,
        tenant: Tenant,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession] | None = None,
        tokens: Sequence[bytes] | None = None,
    ) -> set[str]:
        check_insert(owner_of(tenant), rows, vectors, supersede, tokens)
        with self._tenant_statements(tenant, write=True) as statements:
            return _insert_rows(statements, rows, vectors, supersede or {}, tokens)

    def record_use(
        self, tenant: Tenant, uses: Mapping[str, int], at: datetime, *, max_wait_s: float | None = None
    ) -> dict[str, int]:
        if not uses or tenant is None:  # only a user's facts count uses (never the catalog's rows)
            return {}
        return self._record_use(tenant, uses, at, max_wait_s)

    @abc.abstractmethod
    def _record_use(
        self, owner: str, uses: Mapping[str, int], at: datetime, max_wait_s: float | None
    ) -> dict[str, int]:
        """``record_use`` on the engine: each has its own way not to wait past ``max_wait_s``."""

    def fetch(self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True) -> list[Memory]:
        wanted = wanted_ids(ids)
        if not wanted:
            return []
        with self._tenant_statements(tenant, write=False) as statements:
            rows = statements.rows_by_id(wanted, read_owners(tenant, include_catalog))
        found = {row.id: row for row in rows}
        return [found[i] for i in wanted if i in found]

    def token_vectors(
        self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True
    ) -> dict[str, bytes]:
        wanted = wanted_ids(ids)
        if not wanted:
            return {}
        with self._tenant_statements(tenant, write=False) as statements:
            return statements.tokens_by_id(wanted, read_owners(tenant, include_catalog))

    def rows_without_tokens(self, tenant: Tenant, limit: int) -> list[Memory]:
        with self._tenant_statements(tenant, write=False) as statements:
            return statements.without_tokens(limit)

    def set_tokens(self, tenant: Tenant, tokens: Mapping[str, bytes]) -> None:
        with self._tenant_statements(tenant, write=True) as statements:
            statements.set_tokens(tokens)

    def forget(
        self, tenant: Tenant, memory_id: str, at: datetime, *, revive_retracted: bool = False
    ) -> Tombstone:
        if not is_well_formed_id(memory_id):
            raise NotFound(str(memory_id))
        with self._tenant_statements(tenant, write=True) as statements:
            statements.lock_owner()  # before any row: the chain's rows are locked as links lead to them
            gone = statements.delete_row(memory_id)
            if gone is None:
                raise NotFound(memory_id)
            if gone.memory_type == "episodic":
                drop_quotes(statements, memory_id)
            if gone.supersedes:
                _mend_chain(statements, memory_id, gone.supersedes, gone.superseded_by, revive_retracted)
            tombstone = Tombstone(
                id=memory_id,
                user_id=tenant,
                memory_type=gone.memory_type,
                created_at=gone.created_at,
                forgotten_at=at,
            )
            statements.add_tombstones([tombstone])
        return tombstone

    def list_memories(
        self,
        tenant: Tenant,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        check_page(limit, offset)
        with self._tenant_statements(tenant, write=False) as statements:
            return statements.page(memory_type, include_superseded, limit, offset)

    def count_memories(
        self, tenant: Tenant, memory_type: MemoryType, *, include_superseded: bool = False, limit: int
    ) -> int:
        check_page(limit, 0)
        with self._tenant_statements(tenant, write=False) as statements:
            return statements.count(memory_type, include_superseded, limit)

    def tenants(self) -> list[str]:
        with self._store_statements(write=False) as statements:
            return statements.tenants()

    # -- ConsolidationStore --------------------------------------------------------------------
    def waiting_episodes(self, tenant: str, limit: int) -> list[EpisodicMemory]:
        with self._tenant_statements(tenant, write=False) as statements:
            rows = statements.waiting(limit)
        return [row for row in rows if isinstance(row, EpisodicMemory)]

    def apply_consolidation(self, tenant: str, write: ConsolidationWrite) -> None:
        check_insert(owner_of(tenant), write.rows, write.vectors, write.supersede, write.tokens)
        with self._tenant_statements(tenant, write=True) as statements:
            if statements.claim_waiting(write.episode_ids) != len(set(write.episode_ids)):
                raise Conflict(BATCH_CHANGED)
            _insert_rows(statements, write.rows, write.vectors, write.supersede, write.tokens)
            for merge in write.merges:
                key, attrs = _typed_row(statements, merge.fact_id, "semantic")
                statements.merge_fact(key, merged_provenance(attrs, merge.episode_ids), write.at)
            for feedback in write.feedback:
                key, attrs = _typed_row(statements, feedback.playbook_id, "procedural")
                if feedback.success:
                    statements.playbook_succeeded(key, write.at)
                else:
                    statements.playbook_failed(key, refined_attrs(attrs, feedback.refined_steps))
            statements.mark_episodes(write.episode_ids, SKIPPED if write.skipped else CONSOLIDATED)

    # -- TransferStore -------------------------------------------------------------------------
    def scan(self, tenant: Tenant, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        with self._tenant_statements(tenant, write=False) as statements:
            return statements.scan(after, limit)

    def tombstones(self, tenant: Tenant) -> list[Tombstone]:
        with self._tenant_statements(tenant, write=False) as statements:
            rows = statements.tombstone_rows()
        return [
            Tombstone(
                id=i, user_id=tenant, memory_type=memory_type, created_at=created, forgotten_at=forgotten
            )
            for i, memory_type, created, forgotten in rows
        ]

    def add_tombstones(self, tenant: Tenant, tombstones: Sequence[Tombstone]) -> None:
        owner = owner_of(tenant)
        for tombstone in tombstones:
            if owner_of(tombstone.user_id) != owner:
                raise InvalidInput(f"tombstone {tombstone.id} does not belong to this tenant")
        with self._tenant_statements(tenant, write=True) as statements:
            statements.add_tombstones(tombstones)

    def export_keys(self) -> list[tuple[ApiKeyRecord, str]]:
        return self._keys(None, None)

    # -- KeyStore ------------------------------------------------------------------------------
    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        with self._store_statements(write=True) as statements:
            statements.insert_key(record, key_hash)

    def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return next((record for record, _ in self._keys("key_hash", key_hash)), None)

    def get_key(self, key_id: str) -> ApiKeyRecord | None:
        return next((record for record, _ in self._keys("id", key_id)), None)

    def list_keys(self, user_id: str | None = None) -> list[ApiKeyRecord]:
        return [record for record, _ in self._keys(None if user_id is None else "user_id", user_id)]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._store_statements(write=True) as statements:
            return statements.revoke_key(key_id, at)

    # -- SessionStore --------------------------------------------------------------------------
    def add_session(self, token_hash: str, key_id: str, expires_at: datetime, at: datetime) -> None:
        with self._store_statements(write=True) as statements:
            statements.delete_expired_sessions(at)
            statements.insert_session(token_hash, key_id, expires_at)

    def find_session(self, token_hash: str) -> tuple[str, datetime] | None:
        with self._store_statements(write=False) as statements:
            return statements.select_session(token_hash)

    def end_sessions(self, by: SessionLookup, value: str) -> int:
        with self._store_statements(write=True) as statements:
            return statements.delete_sessions(by, value)

    def _keys(self, by: KeyLookup | None, value: str | None) -> list[tuple[ApiKeyRecord, str]]:
        with self._store_statements(write=False) as statements:
            return statements.select_keys(by, value)


def _insert_rows(
    statements: TenantStatements[K],
    rows: Sequence[Memory],
    vectors: Vectors,
    supersede: Mapping[str, Supersession],
    tokens: Sequence[bytes] | None,
) -> set[str]:
    """Insert checked rows, then mark the rows they supersede (which may be among them); return the ids
    of those stored without their context (``_with_live_context``)."""
    if not rows:
        return set()
    if supersede:
        statements.lock_owner()  # before any row lock, as forget does
    batch = {row.id for row in rows}
    given = rows
    rows = [_with_live_context(statements, row, batch) for row in rows]
    statements.insert_rows(rows, vectors, tokens)
    new_rows = {row.id: row for row in rows}
    for new_id, spec in supersede.items():
        old = statements.lock_row(spec.old_id)
        if old is None:
            raise NotFound(spec.old_id)
        if old.superseded_by is not None and statements.lock_row(old.superseded_by) is None:
            # retracted by a correction forgotten since (not mended: it was never true); "supersede the
            # current one" would name a row that is gone (an outside review)
            raise Conflict(
                f"memory {spec.old_id} was retracted (never true) by a correction that was forgotten since: "
                "nothing current to supersede; write the new fact without supersedes_id"
            )
        check_supersession(spec, new_rows[new_id], old.memory_type, old.superseded_by)
        statements.mark_superseded(old.key, new_id, spec.at, spec.retract)
    return {row.id for row, stored in zip(given, rows, strict=True) if stored is not row}


def _with_live_context(statements: TenantStatements[K], row: Memory, batch: set[str]) -> Memory:
    """The row, without its context if the turn it quotes was forgotten meanwhile: remember_turn reads
    that turn before this transaction (a turn of the same batch is fine)."""
    context_id = getattr(row, "context_id", None)
    if not context_id or context_id in batch or statements.has_row(context_id):
        return row
    return without_context(row)


def drop_quotes(statements: TenantStatements[K], episode_id: str) -> None:
    """Forgetting a turn also removes its words from the turns that were indexed with it as context."""
    for key, quoting in statements.quoting(episode_id):
        cleared = without_context(quoting)
        statements.set_context(key, memory_to_row(cleared)["attrs"], keyword_text_of(cleared))


def _mend_chain(
    statements: TenantStatements[K], gone: str, before: str, after: str | None, revive_retracted: bool
) -> None:
    """Forgetting a link of a supersession chain: the row it replaced takes its place, re-linked to the
    row that replaced it, else live again (its supersession time cleared). A row the forgotten one
    retracted (a harsh correction: the user said it was never true) stays retracted, still naming the
    forgotten row as its successor, unless ``revive_retracted``: forgetting the correction does not
    make the fact true."""
    if after is None:
        statements.revive(before, gone, revive_retracted)
    elif statements.relink(before, gone, after):
        statements.set_supersedes(after, before)


def _typed_row(statements: TenantStatements[K], memory_id: str, memory_type: str) -> tuple[K, Any]:
    """(key, attrs) of the tenant's row of that type, locked; NotFound if there is none."""
    found = statements.lock_typed(memory_id, memory_type)
    if found is None:
        raise NotFound(memory_id)
    return found
