"""The public facade: ``Engram`` opens a store; ``for_user`` and ``catalog`` give tenant-scoped handles.

Every operation goes through a handle bound to one tenant, and the handle passes that tenant to every
Store call: there is no code path that reads or writes without a tenant.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engram.errors import ConfigError, InvalidInput, NotFound, PermissionDenied
from engram.models import (
    MEMORY_TYPES,
    CatalogItem,
    Contradiction,
    EpisodicMemory,
    FactType,
    Hit,
    Memory,
    MemoryType,
    ProceduralMemory,
    SemanticMemory,
    Step,
    Tombstone,
    check_playbook,
    check_text,
    episode_context,
    new_id,
    search_text_of,
    utcnow,
)
from engram.providers.base import Embedder, Reranker, TokenEncoder, Vectors
from engram.retrieval.admission import Admission
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.late_interaction import pack
from engram.retrieval.pipeline import recall as run_recall
from engram.settings import DEFAULT_ANN_MIN_ROWS, EngramSettings, load_settings
from engram.storage.base import CATALOG, Store, Supersession, Tenant
from engram.use_counts import UseRecorder

_USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:+\-]{0,127}$")
WRITABLE_TYPES = ("semantic", "procedural")
_ENCODE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engram-encode")
SESSION_LOOKBACK = 16  # a new turn's session is looked for among the user's last 16 turns


def validate_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not _USER_ID.match(user_id):
        raise InvalidInput("user_id must be 1-128 characters: letters, digits and . _ @ : + - (not first)")
    return user_id


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
        from engram.storage.postgres import PostgresStore

        return PostgresStore(url, admin_url=pg_admin_url)
    from engram.storage.sqlite import SQLiteStore

    return SQLiteStore(path, ann_min_rows=ann_min_rows)


def _close_all(resources: Sequence[object]) -> None:
    """Close what has a close() (HTTP clients, thread pools); local ONNX sessions need none."""
    for resource in resources:
        close = getattr(resource, "close", None)
        if callable(close):
            close()


class Engram:
    """One store, one embedder, one reranker; hands out tenant-scoped handles."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None,
        *,
        token_encoder: TokenEncoder | None = None,
        config: RetrievalConfig | None = None,
        settings: EngramSettings | None = None,
    ) -> None:
        self.settings = settings or EngramSettings.defaults()  # no environment: only Engram.open reads it
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.token_encoder = token_encoder  # late interaction; None: recall skips that stage
        self.config = config or RetrievalConfig.from_settings(self.settings)
        self.use_counts = UseRecorder(store, self.settings.use_wait_ms / 1000)
        self.rerank_admission = Admission(self.settings.rerank_queue)  # sheds the cross-encoder under load
        # Recalls past this many wait their turn, leaving CPU to writes (the hot path an agent waits on).
        n = self.settings.recall_concurrency
        self._recall_slots = threading.BoundedSemaphore(n) if n else contextlib.nullcontext()
        self._made: list[object] = []  # providers from_settings made: close() closes them too
        store.ensure_model(embedder.name, embedder.dim)
        if token_encoder is not None:
            store.ensure_model(token_encoder.name, token_encoder.dim, kind="token")

    @classmethod
    def open(cls, url: str | None = None, **settings: Any) -> Engram:
        """Open the embedded store (default ``$ENGRAM_HOME/engram.db``) or the store at ``url``,
        with the packaged local models. Keyword arguments override settings (e.g. ``rerank_window=40``)."""
        resolved = load_settings(**settings)
        return cls.from_settings(resolved, url=url)

    @classmethod
    def from_settings(cls, settings: EngramSettings, url: str | None = None) -> Engram:
        from engram.providers import default_embedder, default_reranker, default_token_encoder

        store = open_store(url or settings.store_url(), settings.pg_admin_url, settings.ann_min_rows)
        made: list[object] = []
        try:
            embedder = default_embedder(settings)
            made.append(embedder)
            reranker = default_reranker(settings) if settings.rerank else None
            made.append(reranker)
            token_encoder = default_token_encoder(settings) if settings.late_interaction else None
            made.append(token_encoder)
            engram = cls(store, embedder, reranker, token_encoder=token_encoder, settings=settings)
        except BaseException:
            _close_all(made)
            store.close()
            raise
        engram._made = made
        return engram

    def for_user(self, user_id: str) -> UserMemory:
        return UserMemory(self, validate_user_id(user_id))

    def reader(self, user_id: str) -> MemoryReader:
        """A read-only view of one user's memory, for inspection (the inspector's admin path)."""
        return MemoryReader(self, validate_user_id(user_id))

    @property
    def catalog(self) -> CatalogAdmin:
        """The admin handle for the shared catalog (readable by all, writable only here)."""
        return CatalogAdmin(self)

    def import_json(
        self,
        document: Mapping[str, Any] | Sequence[Any],
        *,
        user_id: str | None = None,
        progress: bool = False,
    ) -> dict[str, int]:
        """Import a user document or a catalog list (see ``engram.importer``); an invalid one writes
        nothing."""
        from engram.importer import import_document

        return import_document(self, document, user_id=user_id, progress=progress)

    def consolidate(self, user_id: str, llm: Any = None) -> Any:
        """Turn the user's episodes since the last run into facts and playbooks; returns a
        ConsolidationReport (status "disabled: no LLM configured" when there is no LLM)."""
        from engram.consolidation import ConsolidationPolicy, ConsolidationReport, Consolidator, LLMClient

        s = self.settings
        made_here = llm is None
        if llm is None:
            if not (s.llm_base_url and s.llm_model):
                return ConsolidationReport(
                    user_id=validate_user_id(user_id), status="disabled: no LLM configured"
                )
            llm = LLMClient(
                s.llm_base_url,
                s.llm_model,
                api_key=s.llm_api_key,
                timeout=s.llm_timeout_s,
                max_retries=s.llm_max_retries,
            )
        policy = ConsolidationPolicy(
            batch_size=s.consolidation_batch,
            duplicate_similarity=s.dedup_similarity,
            judge_similarity=s.dedup_judge_similarity,
            confidence_floor=s.confidence_floor,
            supersede_penalty=s.supersede_penalty,
        )
        try:
            return Consolidator(self, llm, policy).run(user_id)
        finally:
            if made_here:
                llm.close()

    def close(self) -> None:
        self.use_counts.close()
        _close_all(self._made)
        self.store.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- shared by the handles ------------------------------------------------------------------
    def _check_text(self, text: object, what: str = "text") -> str:
        return check_text(text, what, self.settings.max_text_chars)

    def encode_rows(self, rows: Sequence[Memory]) -> tuple[Vectors, list[bytes] | None]:
        """Rows' embeddings and packed late-interaction token vectors (None without a token encoder)."""
        texts = [search_text_of(r) for r in rows]
        if self.token_encoder is None:
            return self.embedder.embed_documents(texts), None
        # Both models release the GIL: the token vectors are computed while the embedding is.
        tokens = _ENCODE_POOL.submit(self.token_encoder.encode_documents, texts)
        vectors = self.embedder.embed_documents(texts)
        return vectors, [pack(m) for m in tokens.result()]

    def reindex(self, batch: int = 256) -> int:
        """Compute the token vectors that rows written before late interaction (or with it off) lack,
        for every user and the catalog; returns how many rows got them. Safe to run while serving."""
        if self.token_encoder is None:
            raise InvalidInput("late interaction is off (ENGRAM_LATE_INTERACTION=false): nothing to index")
        done = 0
        for tenant in [CATALOG, *self.store.tenants()]:
            while rows := self.store.rows_without_tokens(tenant, batch):
                encoded = self.token_encoder.encode_documents([search_text_of(r) for r in rows])
                self.store.set_tokens(tenant, {r.id: pack(m) for r, m in zip(rows, encoded, strict=True)})
                done += len(rows)
        return done

    def _store_row(self, tenant: Tenant, row: Memory, supersede: Supersession | None = None) -> None:
        vectors, tokens = self.encode_rows([row])
        self.store.insert(tenant, [row], vectors, {row.id: supersede} if supersede else None, tokens)


class _Handle:
    """Operations common to user and catalog handles; ``_tenant`` is fixed at construction."""

    _tenant: Tenant

    def __init__(self, engram: Engram) -> None:
        self._engram = engram

    def get(self, memory_id: str) -> Memory:
        """The row, if it is in this handle's scope (catalog rows are readable by every tenant)."""
        rows = self._engram.store.fetch(self._tenant, [memory_id], include_catalog=True)
        if not rows:
            raise NotFound(str(memory_id))
        return rows[0]

    def forget(self, memory_id: str) -> Tombstone:
        """Hard-delete one of this tenant's rows; an audit tombstone without text remains."""
        self._deny_catalog_write(memory_id)
        return self._engram.store.forget(self._tenant, memory_id, utcnow())

    def _deny_catalog_write(self, memory_id: str) -> None:
        pass


class UserMemory(_Handle):
    """Memory of one user. Sees the user's rows and the catalog; writes only the user's rows."""

    def __init__(self, engram: Engram, user_id: str) -> None:
        super().__init__(engram)
        self._tenant = user_id
        self.user_id = user_id

    def remember_turn(
        self,
        text: str,
        at: datetime | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> EpisodicMemory:
        """Store one user turn verbatim (episodic), visible to the very next recall.

        ``metadata["assistant_context"]`` may carry the assistant message this turn replied to:
        consolidation shows it to the LLM as context, and never lets it become a fact. The turn is
        searched together with that message, else with the previous turn of its ``session_id``, so an
        elliptic reply ("yes, twice last week") is found by the words of what it answers.
        """
        text = self._engram._check_text(text)
        meta = dict(metadata or {})
        context, context_id = episode_context(meta, self._previous_turn(session_id))
        row = _build(
            EpisodicMemory,
            id=new_id("episodic"),
            text=text,
            user_id=self.user_id,
            created_at=utcnow(),
            timestamp=_aware(at) or utcnow(),
            session_id=session_id,
            metadata=meta,
            context=context,
            context_id=context_id,
        )
        self._engram._store_row(self.user_id, row)
        return row

    def _previous_turn(self, session_id: str | None) -> EpisodicMemory | None:
        """The latest turn of the session among the user's most recent turns (sessions interleave
        little: a turn continues one of the last few), or None."""
        if session_id is None:
            return None
        recent = self._engram.store.list_memories(self.user_id, "episodic", limit=SESSION_LOOKBACK)
        return next((m for m in recent if isinstance(m, EpisodicMemory) and m.session_id == session_id), None)

    def write(
        self,
        text: str,
        memory_type: MemoryType = "semantic",
        *,
        fact_type: FactType = "identity",
        confidence: float = 1.0,
        supporting_episode_ids: Sequence[str] = (),
        supersedes_id: str | None = None,
        contradiction: Contradiction | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        name: str | None = None,
        trigger_text: str = "",
        description: str = "",
        steps: Iterable[Step | Mapping[str, Any]] = (),
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> SemanticMemory | ProceduralMemory:
        """Write a fact (semantic) or a playbook (procedural).

        With ``supersedes_id`` the new row replaces that live row of the same type, in one transaction:
        ``contradiction="natural"`` (default: a routine change) or ``"harsh"`` (the old one was never
        true: it is marked retracted and the new fact's confidence is lowered by the penalty).
        ``created_at`` backdates the row for imports.
        """
        engram = self._engram
        if memory_type not in WRITABLE_TYPES:
            raise InvalidInput(
                f"memory_type must be one of {WRITABLE_TYPES} (episodes are written with "
                f"remember_turn, catalog rows by the admin); got {memory_type!r}"
            )
        if memory_type == "semantic" or text != "":  # a playbook may carry everything in its fields
            text = engram._check_text(text)
        supporting = list(dict.fromkeys(supporting_episode_ids))
        if supporting:  # provenance must be this user's own episodes
            found = {m.id for m in engram.store.fetch(self.user_id, supporting, include_catalog=False)}
            for episode_id in supporting:
                if episode_id not in found or not episode_id.startswith("epi_"):
                    raise NotFound(str(episode_id))
        now = utcnow()
        supersede = None
        if supersedes_id is None:
            if contradiction is not None:
                raise InvalidInput("contradiction is only meaningful with supersedes_id")
        else:
            contradiction = contradiction or "natural"
            if contradiction not in ("natural", "harsh"):
                raise InvalidInput("contradiction must be 'natural' or 'harsh'")
            supersede = Supersession(old_id=str(supersedes_id), retract=contradiction == "harsh", at=now)
        common = {
            "id": new_id(memory_type),
            "text": text,
            "user_id": self.user_id,
            "created_at": _aware(created_at) or now,
            "metadata": dict(metadata or {}),
            "supersedes": supersede.old_id if supersede else None,
        }
        row: SemanticMemory | ProceduralMemory
        if memory_type == "semantic":
            if not isinstance(confidence, int | float) or not 0.0 <= confidence <= 1.0:
                raise InvalidInput("confidence must be a number in [0, 1]")
            if contradiction == "harsh":
                confidence = max(0.0, confidence - engram.settings.supersede_penalty)
            row = _build(
                SemanticMemory,
                **common,
                fact_type=fact_type,
                confidence=confidence,
                supporting_episode_ids=supporting,
                contradiction=contradiction if supersede else None,
                valid_from=_aware(valid_from),
                valid_to=_aware(valid_to),
            )
            if row.valid_from and row.valid_to and row.valid_from > row.valid_to:
                raise InvalidInput("valid_from is after valid_to")
        else:
            if not isinstance(name, str) or not name.strip():
                raise InvalidInput("a procedural memory needs a non-empty name")
            row = _build(
                ProceduralMemory,
                **common,
                name=name,
                trigger_text=trigger_text or "",
                description=description or "",
                steps=[s if isinstance(s, Step) else dict(s) for s in steps],
            )
            check_playbook(row, engram.settings.max_text_chars)
        engram._store_row(self.user_id, row, supersede)
        return row

    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        config: RetrievalConfig | None = None,
        record_use: bool | None = None,
        as_of: datetime | None = None,
    ) -> list[Hit]:
        """Search all of the user's memory types and the catalog in one call.

        Returned semantic facts get ``use_count + 1`` and ``last_used_at = now`` (atomically); the
        returned rows show the values after that bump, their explain the values before it. When
        another writer holds the store (a bulk import), the bump is queued rather than waited for
        (see engram.use_counts) and the rows show the count read plus one.
        ``record_use=False`` leaves them untouched (evaluations, previews). ``as_of`` is the present
        that time decay measures ages from (default: now), for replays, audits and evaluations of
        recorded conversations; it does not hide rows written after it, and such a recall records no
        use unless ``record_use=True`` says so (a replay is not a use).
        """
        engram = self._engram
        query = engram._check_text(query, "query")
        if not isinstance(k, int) or not 1 <= k <= 1000:
            raise InvalidInput("k must be an integer in [1, 1000]")
        types = set(MEMORY_TYPES if memory_types is None else _check_types(memory_types))
        if not include_catalog:
            types.discard("catalog")
        now = utcnow()
        with engram._recall_slots:
            hits = run_recall(
                engram.store,
                engram.embedder,
                engram.reranker,
                engram.token_encoder,
                self.user_id,
                query,
                k=k,
                memory_types=frozenset(types),
                include_superseded=include_superseded,
                config=config or engram.config,
                now=_aware(as_of) or now,
                admission=engram.rerank_admission,
            )
        if not (record_use if record_use is not None else as_of is None):
            return hits
        used = [
            h.memory.id for h in hits if h.memory.memory_type == "semantic" and h.memory.superseded_by is None
        ]
        counts = engram.use_counts.record(self.user_id, used, now)
        used_set = set(used)
        return [
            h.model_copy(
                update={
                    "memory": h.memory.model_copy(
                        update={
                            "use_count": (counts or {}).get(h.memory.id, h.memory.use_count + 1),
                            "last_used_at": now,
                        }
                    )
                }
            )
            if h.memory.id in used_set
            else h
            for h in hits
        ]

    def history(self, memory_id: str) -> list[Memory]:
        """The supersession chain that contains ``memory_id``, oldest first (forgotten links are gone)."""
        start = self.get(memory_id)
        if start.user_id != self.user_id:
            return [start]  # a catalog row: no chains there
        chain = [start]
        seen = {start.id}
        back = getattr(start, "supersedes", None)
        while back and back not in seen:
            rows = self._engram.store.fetch(self._tenant, [back], include_catalog=False)
            if not rows:
                break
            chain.insert(0, rows[0])
            seen.add(back)
            back = getattr(rows[0], "supersedes", None)
        forward = getattr(start, "superseded_by", None)
        while forward and forward not in seen:
            rows = self._engram.store.fetch(self._tenant, [forward], include_catalog=False)
            if not rows:
                break
            chain.append(rows[0])
            seen.add(forward)
            forward = getattr(rows[0], "superseded_by", None)
        return chain

    def list(
        self,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """The user's rows of one type, newest first, paged."""
        (checked,) = _check_types([memory_type])
        if checked == "catalog":
            raise InvalidInput("list the catalog through the catalog handle")
        return self._engram.store.list_memories(
            self.user_id, checked, include_superseded=include_superseded, limit=limit, offset=offset
        )

    def import_json(self, document: Mapping[str, Any], *, progress: bool = False) -> dict[str, Any]:
        """Import a user document (see ``engram.importer``) into this user's memory; a ``user_id`` in
        it must be this user's. An invalid document writes nothing (ImportFileError)."""
        return self._engram.import_json(document, user_id=self.user_id, progress=progress)

    def _deny_catalog_write(self, memory_id: str) -> None:
        if isinstance(memory_id, str) and memory_id.startswith("cat_"):
            rows = self._engram.store.fetch(self.user_id, [memory_id], include_catalog=True)
            if rows:
                raise PermissionDenied("catalog rows can only be changed through the admin handle")


class CatalogAdmin(_Handle):
    """The shared catalog: rows with no owner, readable by every tenant, written only here."""

    _tenant = CATALOG

    def add(
        self,
        text: str,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> CatalogItem:
        row = _build(
            CatalogItem,
            id=new_id("catalog"),
            text=self._engram._check_text(text),
            title=title or "",
            user_id=None,
            created_at=_aware(created_at) or utcnow(),
            metadata=dict(metadata or {}),
        )
        self._engram._store_row(CATALOG, row)
        return row

    def list(self, *, limit: int = 50, offset: int = 0) -> list[Memory]:
        return self._engram.store.list_memories(CATALOG, "catalog", limit=limit, offset=offset)

    def import_json(self, items: Sequence[Any], *, progress: bool = False) -> dict[str, Any]:
        """Import catalog items ``[{"title", "text", ...}]``; an invalid list writes nothing."""
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise InvalidInput("a catalog import is a JSON array of items")
        return self._engram.import_json(items, progress=progress)


class MemoryReader:
    """One user's memory, read only: list, get, history and a recall that records no use.

    It has no write method, so whoever holds one (the inspector, for the admin key, which reads no
    user's memories otherwise) can look but never change anything, not even use counts."""

    def __init__(self, engram: Engram, user_id: str) -> None:
        self._memory = UserMemory(engram, user_id)
        self.user_id = user_id

    def get(self, memory_id: str) -> Memory:
        return self._memory.get(memory_id)

    def present(self, memory_ids: Iterable[str]) -> set[str]:
        """Which of these ids are rows this user can still read (their own, or catalog rows)."""
        engram = self._memory._engram
        return {m.id for m in engram.store.fetch(self.user_id, sorted(set(memory_ids)), include_catalog=True)}

    def history(self, memory_id: str) -> list[Memory]:
        return self._memory.history(memory_id)

    def list(
        self, memory_type: MemoryType, *, include_superseded: bool = False, limit: int = 50, offset: int = 0
    ) -> list[Memory]:
        return self._memory.list(
            memory_type, include_superseded=include_superseded, limit=limit, offset=offset
        )

    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
    ) -> list[Hit]:
        return self._memory.recall(
            query,
            k=k,
            memory_types=memory_types,
            include_catalog=include_catalog,
            include_superseded=include_superseded,
            record_use=False,
        )


def _check_types(memory_types: Iterable[Any]) -> list[MemoryType]:
    if isinstance(memory_types, str):
        memory_types = [memory_types]
    result = list(memory_types)
    for t in result:
        if t not in MEMORY_TYPES:
            raise InvalidInput(f"unknown memory_type {t!r}; expected one of {MEMORY_TYPES}")
    return result


def _aware(at: datetime | None) -> datetime | None:
    """Timestamps are stored in UTC; a naive datetime is taken to be UTC already."""
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise InvalidInput(f"expected a datetime, got {type(at).__name__}")
    try:
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 has no UTC equivalent
        raise InvalidInput(f"{at.isoformat()} is out of the representable range") from None


def _build(model: type[Any], **fields: Any) -> Any:
    """Construct a row model, turning pydantic's errors into InvalidInput."""
    try:
        return model(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInput(problems) from None
