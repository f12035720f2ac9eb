"""Bulk import of a user's memories or of catalog items from JSON.

User document::

    {"user_id": "sarah",
     "episodic":   [{"text", "timestamp" | "days_ago", "session_id"?, "metadata"?, "key"?}],
     "semantic":   [{"text", "fact_type"?, "confidence"?, "timestamp" | "days_ago",
                     "supporting_episodes"?: [key], "supersedes"?: key, "contradiction"?, "key"?}],
     "procedural": [{"name", "trigger_text"?, "description"?, "steps": [{order, instruction, tool}],
                     "text"?, "success_count"?, "failure_count"?, "key"?}]}

Catalog document: ``[{"title", "text", "metadata"?, "key"?}]``.

``key`` names a record, so records can point at each other (a fact superseding an older fact, a
fact citing its episodes); the import returns the generated id of every key.
Every record is validated before anything is embedded; an error names the record
(``semantic[3].confidence: ...``) and nothing is written. A valid document is then embedded and
written in chunks of ``import_chunk`` rows, one transaction each, so a large import never holds the
store's write lock for long (live turns and recall keep going beside it); records only point at
earlier ones, so each chunk's references are already written.

Identity is per record: a row's id derives from the user, the record's type and its ``key`` when it
has one (a key names one record for good), else its canonical content (every field, its time as
written too) and how many identical records come before it in the file. A document imported again,
grown or not, writes only the records the store does not hold; one that stopped midway (a store
failure, a client that gave up) is finished by sending it again; two runs at once write each row
once; a row forgotten since is not written again. The result counts the rows written per type and,
apart, those ``skipped`` (there already, or forgotten).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError
from rich.progress import Progress

from engram import validation
from engram.errors import Conflict, EngramError, ImportFileError, InvalidInput, StorageError
from engram.import_records import (
    CatalogRecord,
    Record,
    UserDocument,
)
from engram.models import (
    CatalogItem,
    EpisodicMemory,
    Memory,
    MemoryType,
    ProceduralMemory,
    SemanticMemory,
    Vectors,
    check_playbook,
    check_text,
    episode_context,
    episode_speaker,
    new_id,
    utcnow,
)
from engram.settings import EngramSettings
from engram.storage.base import CATALOG, MemoryStore, Supersession, Tenant, TransferStore
from engram.validation import (
    check_metadata,
    check_metadata_size,
    check_session_id,
    check_title,
    validate_user_id,
)

ProgressCallback = Callable[[int, int], None]  # rows looked at so far, rows in all


class ImportStore(MemoryStore, TransferStore, Protocol):
    """The store roles an import uses: fetch and insert rows, read tombstones (forgotten stays forgotten)."""


class ImportTarget(Protocol):
    """What an import writes through: the facade (``Engram``) is one. The importer takes only these,
    so it sits below the facade that calls it."""

    @property
    def settings(self) -> EngramSettings: ...

    @property
    def store(self) -> ImportStore: ...

    def encode_rows(self, rows: Sequence[Memory]) -> tuple[Vectors, list[bytes] | None]: ...


def _fail(exc: ValidationError, prefix: str = "") -> ImportFileError:
    problems = []
    for err in exc.errors()[:5]:
        loc = prefix
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        problems.append(f"{loc or 'document'}: {err['msg']}")
    more = f" (and {len(exc.errors()) - 5} more)" if len(exc.errors()) > 5 else ""
    return ImportFileError("invalid import file: " + "; ".join(problems) + more)


def import_document(
    engram: ImportTarget,
    document: Mapping[str, Any] | Sequence[Any] | UserDocument,
    *,
    user_id: str | None = None,
    progress: bool = False,
    on_progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Validate a whole document (the REST API passes a UserDocument, validated already), then embed
    and insert it chunk by chunk; see the module docstring. ``on_progress(done, total)`` is called
    after each chunk (rows looked at, rows in the document)."""
    if isinstance(document, Sequence) and not isinstance(document, str | bytes):
        if user_id:
            raise ImportFileError(
                "a JSON array is a catalog import, shared by every user: it takes no user "
                f"(got user {user_id!r}); a user's import is a JSON object"
            )
        return _import_catalog(engram, document, progress, on_progress)
    if not isinstance(document, Mapping | UserDocument):
        raise ImportFileError("an import file is a JSON object (user memories) or array (catalog)")
    try:
        doc = UserDocument.model_validate(document)
    except ValidationError as exc:
        raise _fail(exc) from None
    if user_id and doc.user_id and user_id != doc.user_id:
        raise ImportFileError(f"the file is for user {doc.user_id!r}, not {user_id!r}")
    owner = user_id or doc.user_id
    if not owner:
        raise ImportFileError("no user: pass --user or put user_id in the file")
    owner = validate_user_id(owner)
    identity = _Identity(owner)
    now = utcnow()
    rows: list[Memory] = []
    keys: dict[str, str] = {}
    supersede: dict[str, Supersession] = {}
    linked_at: dict[str, str] = {}  # a superseding fact's row id -> where it is in the file, for errors

    def checked(text: str, where: str) -> str:
        try:
            return check_text(text, where, engram.settings.max_text_chars)
        except InvalidInput as exc:
            raise ImportFileError(f"invalid import file: {exc}") from None

    def remember_key(key: str | None, row_id: str, where: str) -> None:
        if key is None:
            return
        if key in keys:
            raise ImportFileError(f"invalid import file: {where}.key {key!r} is used twice")
        keys[key] = row_id

    episodes: list[EpisodicMemory] = []
    for i, ep in enumerate(doc.episodic):
        where = f"episodic[{i}]"
        try:
            check_metadata(ep.metadata)
            episode_speaker(ep.metadata)
            check_session_id(ep.session_id)
            validation.check_turn_time(ep.at(now), "timestamp")
        except InvalidInput as exc:
            raise ImportFileError(f"invalid import file: {where}.{exc}") from None
        turn = EpisodicMemory(
            id=identity.of("episodic", ep),
            text=checked(ep.text, f"{where}.text"),
            user_id=owner,
            created_at=now,
            timestamp=ep.at(now) or now,
            session_id=ep.session_id,
            metadata=ep.metadata,
        )
        remember_key(ep.key, turn.id, where)
        episodes.append(turn)
    for i, before in _previous_turns(episodes).items():
        context, context_id = episode_context(episodes[i].metadata, episodes[before] if before >= 0 else None)
        if context is not None:
            episodes[i] = episodes[i].model_copy(update={"context": context, "context_id": context_id})
    # A turn's context is the turn before it in time: write in time order so it is there first.
    in_time_order: list[EpisodicMemory] = sorted(episodes, key=lambda ep: ep.timestamp)
    rows.extend(in_time_order)
    superseded: set[str] = set()
    fact_times: dict[str, datetime] = {}  # each fact's time, for the time the next one replaced it
    said_at = {ep.id: ep.timestamp for ep in episodes}  # a fact without a time holds from its turns
    for i, fact in enumerate(doc.semantic):
        where = f"semantic[{i}]"
        _check_record(fact, where, fact.at(now))
        row_id = identity.of("semantic", fact)
        unknown = [k for k in fact.supporting_episodes if not keys.get(k, "").startswith("epi_")]
        if unknown:
            raise ImportFileError(
                f"invalid import file: {where}.supporting_episodes: {unknown} are not keys of episodes"
            )
        supersedes = None
        confidence = fact.confidence
        if fact.supersedes is not None:
            if fact.supersedes not in keys:
                raise ImportFileError(
                    f"invalid import file: {where}.supersedes: {fact.supersedes!r} is not the key of an "
                    "earlier record"
                )
            supersedes = keys[fact.supersedes]
            if not supersedes.startswith("sem_") or supersedes in superseded:
                raise ImportFileError(
                    f"invalid import file: {where}.supersedes: {fact.supersedes!r} is not a fact, or is "
                    "already superseded by an earlier record"
                )
            superseded.add(supersedes)
            harsh = fact.contradiction == "harsh"
            # replaced when its successor was said (not at the import: a fact of last year then read
            # "replaced today" by one dated last month), never before it was itself stored
            said = fact.at(now) or now
            at = max(said, fact_times.get(supersedes, said))
            supersede[row_id] = Supersession(old_id=supersedes, retract=harsh, at=at)
            linked_at[row_id] = f"{where}.supersedes ({fact.supersedes!r})"
            if harsh:
                confidence = max(0.0, confidence - engram.settings.supersede_penalty)
        elif fact.contradiction is not None:
            raise ImportFileError(f"invalid import file: {where}.contradiction needs supersedes")
        remember_key(fact.key, row_id, where)
        fact_times[row_id] = fact.at(now) or now
        rows.append(
            SemanticMemory(
                id=row_id,
                text=checked(fact.text, f"{where}.text"),
                user_id=owner,
                created_at=fact.at(now) or now,
                metadata=fact.metadata,
                fact_type=fact.fact_type,
                confidence=confidence,
                supporting_episode_ids=[keys[k] for k in fact.supporting_episodes],
                valid_from=None
                if fact.at(now)
                else max((said_at[keys[k]] for k in fact.supporting_episodes), default=None),
                supersedes=supersedes,
                contradiction=fact.contradiction if supersedes else None,
            )
        )
    for i, pb in enumerate(doc.procedural):
        where = f"procedural[{i}]"
        _check_record(pb, where, pb.at(now))
        playbook = ProceduralMemory(
            id=identity.of("procedural", pb),
            text=checked(pb.text, f"{where}.text") if pb.text else "",
            user_id=owner,
            created_at=pb.at(now) or now,
            metadata=pb.metadata,
            name=checked(pb.name, f"{where}.name"),
            trigger_text=pb.trigger_text,
            description=pb.description,
            steps=pb.steps,
            success_count=pb.success_count,
            failure_count=pb.failure_count,
        )
        try:
            check_playbook(playbook, engram.settings.max_text_chars)
        except InvalidInput as exc:
            raise ImportFileError(f"invalid import file: {where}.{exc}") from None
        remember_key(pb.key, playbook.id, where)
        rows.append(playbook)
    report = _embed_and_insert(engram, owner, rows, supersede, progress, on_progress, linked_at)
    return {**report, "user_id": owner, "ids": keys}


def _import_catalog(
    engram: ImportTarget, document: Sequence[Any], progress: bool, on_progress: ProgressCallback | None
) -> dict[str, Any]:
    now = utcnow()
    rows: list[Memory] = []
    keys: dict[str, str] = {}
    records: list[CatalogRecord] = []
    for i, raw in enumerate(document):
        try:
            records.append(CatalogRecord.model_validate(raw))
        except ValidationError as exc:
            raise _fail(exc, f"catalog[{i}]") from None
    identity = _Identity("")
    for i, record in enumerate(records):
        try:
            text = check_text(record.text, f"catalog[{i}].text", engram.settings.max_text_chars)
            title = check_title(record.title, f"catalog[{i}].title")
        except InvalidInput as exc:
            raise ImportFileError(f"invalid import file: {exc}") from None
        _check_record(record, f"catalog[{i}]")
        row = CatalogItem(
            id=identity.of("catalog", record),
            text=text,
            title=title,
            user_id=None,
            created_at=now,
            metadata=record.metadata,
        )
        if record.key:
            if record.key in keys:
                raise ImportFileError(f"invalid import file: catalog[{i}].key {record.key!r} is used twice")
            keys[record.key] = row.id
        rows.append(row)
    report = _embed_and_insert(engram, CATALOG, rows, {}, progress, on_progress)
    return {**report, "ids": keys}


def _previous_turns(episodes: Sequence[EpisodicMemory]) -> dict[int, int]:
    """Index of each episode -> index of the turn before it in its session (by event time, then file
    order), -1 for a session's first turn and for turns without a session."""
    previous = dict.fromkeys(range(len(episodes)), -1)
    sessions: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        if ep.session_id is not None:
            sessions.setdefault(ep.session_id, []).append(i)
    for members in sessions.values():
        members.sort(key=lambda i: (episodes[i].timestamp, i))
        previous.update(zip(members[1:], members[:-1], strict=True))
    return previous


def _embed_and_insert(
    engram: ImportTarget,
    tenant: Tenant,
    rows: list[Memory],
    supersede: dict[str, Supersession],
    progress: bool,
    on_progress: ProgressCallback | None,
    linked_at: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Write the rows not in the store yet, chunk by chunk; returns the rows written per type and how
    many were skipped (there already, or forgotten since an earlier run: forgotten stays forgotten).
    ``linked_at``: where each superseding fact is in the file (``_check_links``)."""
    for row in rows:  # bounded like one write's (Engine._store_row), before any is written
        try:
            check_metadata_size(row.metadata, engram.settings.max_metadata_chars)
        except InvalidInput as exc:
            raise ImportFileError(f"invalid import file: a record ({row.memory_type}): {exc}") from None
    chunk, skipped = engram.settings.import_chunk, 0
    written = dict.fromkeys(("episodic", "semantic", "procedural", "catalog"), 0)
    forgotten = {t.id for t in engram.store.tombstones(tenant)}
    _check_links(engram, tenant, [r.id for r in rows if r.id not in forgotten], supersede, linked_at or {})
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("importing", total=len(rows))
        for start in range(0, len(rows), chunk):
            part = [row for row in rows[start : start + chunk] if row.id not in forgotten]
            try:
                new = _insert_missing(engram, tenant, part, supersede)
            except EngramError as exc:
                if start:
                    raise StorageError(
                        f"the import stopped after {start} of {len(rows)} rows: {exc}; send it "
                        "again to finish (the rows written are skipped)"
                    ) from exc
                raise
            written.update({t: written[t] + sum(r.memory_type == t for r in new) for t in written})
            looked = min(chunk, len(rows) - start)
            skipped += looked - len(new)
            bar.advance(task, looked)
            if on_progress is not None:
                on_progress(start + looked, len(rows))
    return {**written, "written": sum(written.values()), "skipped": skipped}


_FETCH_PAGE = 500  # ids per fetch: well under any backend's bound on one statement


def _check_links(
    engram: ImportTarget,
    tenant: Tenant,
    to_write: Sequence[str],
    supersede: Mapping[str, Supersession],
    linked_at: Mapping[str, str],
) -> None:
    """Before anything is written, each superseding fact not stored yet must find the fact it replaces
    among the rows to write or live in the store: else ImportFileError (forgotten) or Conflict (replaced
    by another write), naming the record. Without this, such a document stopped at the chunk holding
    the link, the chunks before it written, on every retry (an outside review's repro)."""
    linked = [row_id for row_id in to_write if row_id in supersede]
    wanted = [*linked, *(supersede[row_id].old_id for row_id in linked)]
    pages = (wanted[start : start + _FETCH_PAGE] for start in range(0, len(wanted), _FETCH_PAGE))
    there = {m.id: m for page in pages for m in engram.store.fetch(tenant, page, include_catalog=False)}
    writing = set(to_write)
    for row_id in linked:
        if row_id in there:  # written by an earlier run: skipped
            continue
        old_id, where = supersede[row_id].old_id, linked_at.get(row_id, "a fact's supersedes")
        old = there.get(old_id)
        if old is None and old_id not in writing:
            raise ImportFileError(
                f"invalid import file: {where}: the fact it replaces was forgotten since an earlier import, "
                "so there is nothing to supersede; drop the link (or the record) and import again"
            )
        replaced_by = getattr(old, "superseded_by", None)
        if replaced_by not in (None, row_id):
            raise Conflict(
                f"{where}: the fact it replaces ({old_id}) was superseded since by {replaced_by}; "
                "supersede that one instead, or drop the link"
            )


def _insert_missing(
    engram: ImportTarget, tenant: Tenant, part: list[Memory], supersede: dict[str, Supersession]
) -> list[Memory]:
    """Insert the rows of ``part`` the store does not hold; returns those written. Other runs of the
    same import may write some between the look and the write: their Conflict is answered by looking
    again while each look finds more of them there (else the Conflict is not theirs)."""
    conflict: Conflict | None = None
    missing = len(part)
    while True:
        there = {m.id for m in engram.store.fetch(tenant, [r.id for r in part], include_catalog=False)}
        new = [row for row in part if row.id not in there]
        if not new:
            return []
        if conflict is not None and len(new) >= missing:
            raise conflict
        missing = len(new)
        vectors, tokens = engram.encode_rows(new)
        links = {row.id: supersede[row.id] for row in new if row.id in supersede}
        try:
            engram.store.insert(tenant, new, vectors, links, tokens)
        except Conflict as exc:
            conflict = exc
            continue
        return new


class _Identity:
    """A record's row id: from its owner, type and ``key``, else its canonical content and how many
    identical records came before it in the file (two equal turns are two rows, on every run)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.seen: dict[str, int] = {}

    def of(self, memory_type: MemoryType, record: Record) -> str:
        if record.key is not None:
            basis = f"key\n{record.key}"
        else:
            content = json.dumps(
                record.model_dump(mode="json", exclude={"key"}), sort_keys=True, separators=(",", ":")
            )
            occurrence = self.seen.get(content, 0)
            self.seen[content] = occurrence + 1
            basis = f"content\n{content}\n{occurrence}"
        digest = hashlib.sha256(f"{self.owner}\n{memory_type}\n{basis}".encode()).hexdigest()
        return new_id(memory_type, digest)


def _check_record(record: Record, where: str, at: datetime | None = None) -> None:
    try:
        check_metadata(record.metadata)
        validation.check_turn_time(at, "timestamp", "a row is written by now")  # as write's created_at
    except InvalidInput as exc:  # before anything is embedded: the store would fail or change it
        raise ImportFileError(f"invalid import file: {where}.{exc}") from None
