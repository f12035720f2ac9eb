"""The Store protocol: what every storage backend provides, tenant-scoped on every method.

A ``tenant`` is a user id, or ``CATALOG`` (None) for the shared catalog. The rule is the same for all
methods and all backends:

* reads see the tenant's own rows, plus catalog rows when ``include_catalog`` is true;
* writes (insert, supersede, forget, record_use) touch only rows owned by exactly that tenant.

A row outside the tenant's scope is reported as ``NotFound``, exactly like a row that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from engram.errors import Conflict, InvalidInput, ModelError
from engram.models import EpisodicMemory, Memory, MemoryType, Step, Tombstone, Vectors, is_well_formed_id
from engram.recall_filter import NO_FILTER, RecallFilter
from engram.validation import validate_user_id

# The catalog has one name per layer, all defined here:
CATALOG: None = None  # the API's tenant of catalog rows: "no user", so no user id can ever mean it
CATALOG_OWNER = ""  # the owner column of catalog rows: NOT NULL for indexes and =, and no user id is empty
# PostgreSQL's RLS session value for catalog writes: not '', which is what an unset setting reads as (a
# transaction that bound nothing must not write the catalog); '*' is in no user id (engram.validation).
CATALOG_SESSION = "*catalog*"
Tenant = str | None
SessionLookup = Literal["token_hash", "key_id"]  # what SessionStore.end_sessions deletes by
KeyScope = Literal["read", "write", "admin"]  # what a key may do: read only, read and write, manage
KEY_SCOPES: tuple[KeyScope, ...] = ("read", "write", "admin")


def owner_of(tenant: Tenant) -> str:
    """The owner column value of a tenant's rows: a valid user id (``engram.validation``), or the
    catalog's ''. Checked here, under every backend, and not only by the facade: '' would reach catalog
    rows where no row-level security stands behind the owner conditions, and OpenSearch's document-level
    security pastes the owner into its query as text (a quote in it would widen the rule)."""
    return CATALOG_OWNER if tenant is None else validate_user_id(tenant)


def read_owners(tenant: Tenant, include_catalog: bool) -> list[str]:
    """The owners whose rows a read in the tenant's scope sees: its own, and the catalog's if asked."""
    owner = owner_of(tenant)
    return [owner, CATALOG_OWNER] if include_catalog and owner != CATALOG_OWNER else [owner]


@dataclass(frozen=True)
class SearchFilter:
    """Which rows a search leg may return (on top of the tenant scope)."""

    memory_types: frozenset[MemoryType]
    include_superseded: bool = False
    # session, event-time range, metadata equality: applied inside both legs, before their limit
    narrow: RecallFilter = NO_FILTER

    def owners(self, tenant: Tenant) -> list[str]:
        """The owners a search leg reads: the tenant's, and the catalog's when catalog rows are wanted."""
        return read_owners(tenant, "catalog" in self.memory_types)


@dataclass(frozen=True)
class Candidates:
    """Both legs' candidates with their rows (and token vectors) from one statement: what a backend
    whose every call is a network round trip offers as ``search_candidates`` (PostgreSQL)."""

    bm25: list[LegHit]
    dense: list[LegHit]
    rows: list[Memory]
    tokens: dict[str, bytes] | None  # the rows' and their context turns' packed token vectors


@dataclass(frozen=True)
class Supersession:
    """Mark ``old_id`` as replaced by a row being inserted, in the same transaction."""

    old_id: str
    retract: bool  # harsh contradiction: the old fact was never true
    at: datetime


@dataclass(frozen=True)
class LegHit:
    """A candidate from one search leg: its id and the leg's raw score (higher is better)."""

    id: str
    score: float


@dataclass(frozen=True)
class FactMerge:
    """A candidate fact that repeats a stored one: add its provenance and bump the stored fact."""

    fact_id: str
    episode_ids: tuple[str, ...]


@dataclass(frozen=True)
class PlaybookFeedback:
    """A playbook worked or failed (evidence in the user's own words); failures may refine its steps."""

    playbook_id: str
    success: bool
    refined_steps: tuple[Step, ...] | None = None


@dataclass
class ConsolidationWrite:
    """Everything one consolidation batch writes, applied in one transaction that also marks the
    batch's episodes consolidated (or skipped: ``skipped`` writes nothing else).

    Episodes are marked one by one rather than read past a watermark: a turn that commits after a
    later-stamped one is still waiting, never behind the line. If another run took any episode of
    the batch meanwhile, nothing is written (Conflict), so two workers never apply one episode twice.
    """

    rows: Sequence[Memory]
    vectors: Vectors
    supersede: Mapping[str, Supersession]
    merges: Sequence[FactMerge]
    feedback: Sequence[PlaybookFeedback]
    episode_ids: Sequence[str]
    at: datetime
    tokens: Sequence[bytes] | None = None  # the rows' packed late-interaction token vectors
    skipped: bool = False  # the LLM could not read these episodes: set them aside, write nothing


BATCH_CHANGED = (
    "the batch changed while it was read (another consolidation took it, or one of its turns was "
    "forgotten): nothing was written; the turns still waiting will be read again"
)


def episode_marks(
    episode_ids: Sequence[str], at: datetime, dim: int, *, skipped: bool = False
) -> ConsolidationWrite:
    """A consolidation write that only marks episodes: consolidated, or ``skipped`` (set aside)."""
    return ConsolidationWrite(
        rows=[],
        vectors=np.zeros((0, dim), np.float32),
        supersede={},
        merges=[],
        feedback=[],
        episode_ids=episode_ids,
        at=at,
        skipped=skipped,
    )


def playbook_outcome(playbook_id: str, success: bool, at: datetime) -> ConsolidationWrite:
    """A write that only counts one outcome of a playbook (``UserMemory.record_outcome``): applied like
    consolidation's feedback, in one transaction; NotFound unless the tenant owns such a playbook."""
    write = episode_marks([], at, 0)
    write.feedback = [PlaybookFeedback(playbook_id, success)]
    return write


class TransferStore(Protocol):
    """What a whole-store export and import need beside Store (engram.transfer)."""

    def scan(self, tenant: Tenant, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        """The tenant's rows, live or not, in write order after the cursor ``after`` (0 to start):
        (cursor, row, consolidated), consolidated being 0 waiting, 1 consolidated, 2 skipped."""
        ...

    def tombstones(self, tenant: Tenant) -> list[Tombstone]:
        """The tenant's tombstones, oldest first."""
        ...

    def add_tombstones(self, tenant: Tenant, tombstones: Sequence[Tombstone]) -> None:
        """Restore tombstones (an import of an export); an id already there is a Conflict."""
        ...

    def export_keys(self) -> list[tuple[ApiKeyRecord, str]]:
        """Every API key record with its hash (never the key: the store has none)."""
        ...


class ConsolidationStore(Protocol):
    """What consolidation needs beside Store. Tenant-scoped like Store."""

    def waiting_episodes(self, tenant: str, limit: int) -> list[EpisodicMemory]:
        """The tenant's episodes not yet consolidated (nor skipped), oldest stored first."""
        ...

    def apply_consolidation(self, tenant: str, write: ConsolidationWrite) -> None: ...


@dataclass(frozen=True)
class ApiKeyRecord:
    """A stored API key, without the key: ``user_id`` None means the admin key."""

    id: str
    user_id: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None = None
    scope: KeyScope = "write"  # keys made before scopes existed read and write, as they always did
    expires_at: datetime | None = None  # None: never


class KeyStore(Protocol):
    """Where API keys live (by hash only). Backends implement it beside Store."""

    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        """Store a key record by hash, revoked already if ``record.revoked_at`` says so (imports)."""
        ...

    def find_key(self, key_hash: str) -> ApiKeyRecord | None: ...

    def get_key(self, key_id: str) -> ApiKeyRecord | None:
        """The record of a key by its id (revoked or not), or None."""
        ...

    def list_keys(self, user_id: str | None = None) -> list[ApiKeyRecord]: ...

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """True if a live key was revoked."""
        ...


class SessionStore(Protocol):
    """Where sign-in sessions live (the inspector's), by the hash of their token only: a session ends
    for every process of the service at once, and outlives none of them by a restart."""

    def add_session(self, token_hash: str, key_id: str, expires_at: datetime, at: datetime) -> None:
        """Store a session made from key ``key_id``; sessions expired at ``at`` are dropped meanwhile."""
        ...

    def find_session(self, token_hash: str) -> tuple[str, datetime] | None:
        """(key id, expiry) of a stored session, expired or not, or None."""
        ...

    def end_sessions(self, by: SessionLookup, value: str) -> int:
        """Delete one session (by ``token_hash``) or all sessions made from a key (by ``key_id``);
        how many were deleted."""
        ...


def model_keys(kind: str) -> tuple[str, str]:
    """The meta keys recording the model of one kind ("embedding", "token")."""
    return f"{kind}_model", f"{kind}_dim"


def check_model(recorded: Mapping[str, str], kind: str, name: str, dim: int, store: str) -> bool:
    """The rule of ``Store.ensure_model``: True if nothing is recorded yet (record it now); raise
    ModelError if another model of that kind built the store (its stored vectors mean nothing to this
    one)."""
    model_key, dim_key = model_keys(kind)
    if model_key not in recorded:
        return True
    if recorded[model_key] != name or recorded.get(dim_key) != str(dim):
        hint = (
            "set ENGRAM_LATE_INTERACTION=false, or re-import into a new store"
            if kind == "token"
            else "open it with the model it was built with, or re-import into a new store"
        )
        raise ModelError(
            f"{store} was built with {kind} model {recorded[model_key]!r} (dim {recorded.get(dim_key)}); "
            f"it cannot be searched with {name!r} (dim {dim}): {hint}"
        )
    return False


def wanted_ids(ids: Sequence[str]) -> list[str]:
    """The distinct well-formed ids asked for, in order: anything else cannot name a row."""
    return [i for i in dict.fromkeys(ids) if is_well_formed_id(i)]


def check_insert(
    owner: str,
    rows: Sequence[Memory],
    vectors: Vectors,
    supersede: Mapping[str, Supersession] | None,
    tokens: Sequence[bytes] | None = None,
) -> None:
    """The rules of ``Store.insert`` every backend enforces before touching its engine."""
    if len(rows) != len(vectors):
        raise InvalidInput("one vector per row is required")
    if tokens is not None and len(tokens) != len(rows):
        raise InvalidInput("token vectors, when given, are required for every row")
    if supersede and not supersede.keys() <= {row.id for row in rows}:
        raise InvalidInput("a supersession must name a row of the same insert")
    for row in rows:
        if (row.user_id or "") != owner:
            raise InvalidInput(f"row {row.id} does not belong to this tenant")


def _a(word: str) -> str:
    """The article before ``word``: "an episodic", "a semantic"."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def check_supersession(spec: Supersession, new: Memory, old_type: str, superseded_by: str | None) -> None:
    """The old row (found in the tenant's scope, else NotFound earlier) must be live and of the same type."""
    if old_type != new.memory_type:
        new_type = _a(new.memory_type)
        raise InvalidInput(f"{new_type} memory cannot supersede {_a(old_type)} memory ({spec.old_id})")
    if superseded_by is not None:
        raise Conflict(
            f"memory {spec.old_id} is already superseded by {superseded_by}; "
            "supersede the current one instead"
        )


class SearchStore(Protocol):
    """What recall reads (engram.retrieval): both legs, then the rows and token vectors they named."""

    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        """Full-text (BM25) candidates, best first."""
        ...

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        """Nearest neighbours by cosine similarity, best first."""
        ...

    def fetch(self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True) -> list[Memory]:
        """Rows in scope among ``ids``, in the order asked; ids out of scope are silently absent."""
        ...

    def token_vectors(
        self, tenant: Tenant, ids: Sequence[str], include_catalog: bool = True
    ) -> dict[str, bytes]:
        """Packed token vectors of the rows in scope among ``ids`` that have them."""
        ...


@runtime_checkable
class CandidateSearch(Protocol):
    """Offered by a backend whose every call is a network round trip (PostgreSQL): both legs, their
    rows and (with ``tokens``) the token vectors in one transaction instead of four."""

    def search_candidates(
        self, tenant: Tenant, query: str, vector: Vectors, where: SearchFilter, limit: int, tokens: bool
    ) -> Candidates: ...


@runtime_checkable
class TenantIndexing(Protocol):
    """A store that gives heavy tenants their own vector index only when asked (PostgreSQL: building
    an index needs the tables' owner); SQLite builds its own in the background."""

    def index_heavy_tenants(self, min_rows: int) -> list[str]:
        """Index every tenant with at least ``min_rows`` rows that has no index yet; the tenants indexed."""
        ...


class MemoryStore(SearchStore, Protocol):
    """What the facade writes and lists beside recall's reads."""

    def ensure_model(self, name: str, dim: int, kind: str = "embedding") -> None:
        """Record the model of a kind ("embedding", or "token" for late interaction) on first use;
        raise ModelError if the store was built with another (``check_model``)."""
        ...

    def insert(
        self,
        tenant: Tenant,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession] | None = None,
        tokens: Sequence[bytes] | None = None,
    ) -> set[str]:
        """Insert rows (all owned by ``tenant``) in one transaction; return the ids of the turns stored
        without the context they were given (the turn they quote was forgotten meanwhile).

        ``supersede`` maps a new row's id to the row it replaces (which may be in the same batch): the
        old row must be live, the tenant's, and of the same type, else nothing is written. ``tokens``
        are the rows' packed late-interaction token vectors (``retrieval.late_interaction.pack``).
        """
        ...

    def rows_without_tokens(self, tenant: Tenant, limit: int) -> list[Memory]:
        """Rows owned by exactly ``tenant`` that have no token vectors (written before they existed)."""
        ...

    def set_tokens(self, tenant: Tenant, tokens: Mapping[str, bytes]) -> None:
        """Store packed token vectors for the tenant's rows by id (ids out of scope are ignored)."""
        ...

    def record_use(
        self, tenant: Tenant, uses: Mapping[str, int], at: datetime, *, max_wait_s: float | None = None
    ) -> dict[str, int]:
        """Atomically add ``uses[id]`` to use_count of each of the tenant's semantic rows among the ids
        and move last_used_at up to ``at``; returns each updated row's use_count after the change.
        With ``max_wait_s``, raises StoreBusy instead of waiting longer for another writer."""
        ...

    def forget(
        self, tenant: Tenant, memory_id: str, at: datetime, *, revive_retracted: bool = False
    ) -> Tombstone:
        """Hard-delete a row owned by ``tenant``, leaving a tombstone without text. A supersession
        chain through it is mended: the row it replaced takes its place, or is live again if it was the
        newest link, except a row it retracted (harsh contradiction), which stays retracted unless
        ``revive_retracted``."""
        ...

    def list_memories(
        self,
        tenant: Tenant,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """The tenant's rows of one type, newest first (catalog rows for the catalog tenant)."""
        ...

    def count_memories(
        self, tenant: Tenant, memory_type: MemoryType, *, include_superseded: bool = False, limit: int
    ) -> int:
        """How many of the tenant's rows of one type there are, counting no further than ``limit``;
        no row is read (a tab's count on every page view)."""
        ...

    def tenants(self) -> list[str]:
        """Every user id that has memories (ids only)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Row counts and the recorded models, for ``engram info``."""
        ...

    def close(self) -> None: ...


class UserErasure(Protocol):
    """Deleting everything of one user (a data-rights request): engram.data_rights."""

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Delete every row the user owns on this store, in every table or index: memories of every
        type with their text, vector, token and full-text entries, tombstones, consolidation state,
        the tenant's listing and per-tenant statistics, the user's API keys and their sessions, and
        whatever per-tenant object the engine keeps (an index, an internal user). Idempotent: a second
        call finds nothing and deletes nothing. Returns how many of each kind were deleted."""
        ...


class Store(MemoryStore, ConsolidationStore, TransferStore, KeyStore, SessionStore, UserErasure, Protocol):
    """A storage backend: every role above. The facade holds one; each consumer names only the role
    it uses (retrieval a SearchStore, auth a KeyStore and a SessionStore, consolidation a
    ConsolidationStore)."""
