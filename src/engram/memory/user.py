"""One user's memory: ``UserMemory`` (sees the user's rows and the catalog, writes the user's rows);
``engram.memory.reader`` has the same memory, read only.

``list`` methods shadow the builtin in class bodies: annotations there spell it ``builtins.list``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from typing import Any, Literal, overload

from engram import validation
from engram.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from engram.memory.engine import Engine
from engram.memory.handles import TenantHandle
from engram.models import (
    MEMORY_TYPES,
    SHED_RERANK,
    CompactHit,
    Contradiction,
    EpisodicMemory,
    FactType,
    Hit,
    Memory,
    MemoryType,
    ProceduralMemory,
    RecallView,
    SemanticMemory,
    ShedHits,
    Step,
    check_playbook,
    check_recall_options,
    confident,
    episode_context,
    episode_speaker,
    event_time,
    is_well_formed_id,
    new_id,
    utcnow,
)
from engram.recall_filter import MetadataValue, recall_filter
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.pipeline import recall as run_recall
from engram.storage.base import Supersession, playbook_outcome
from engram.validation import aware, build_row, check_applies, check_metadata, check_session_id, check_types

WRITABLE_TYPES = ("semantic", "procedural")
SESSION_LOOKBACK = 16  # a new turn's session is looked for among the user's last 16 turns


class UserMemory(TenantHandle):
    """Memory of one user. Sees the user's rows and the catalog; writes only the user's rows."""

    def __init__(self, engram: Engine, user_id: str) -> None:
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
        ``metadata["speaker"]`` may name who said it, in a conversation with several people (not on a
        single user's turns): the turn is searched as ``"Speaker: text"``, and a recall that names the
        speaker ranks it up (a line that already opens with ``"Name: "`` needs no key).
        """
        text = self._engram._check_text(text)
        check_session_id(session_id)
        meta = check_metadata(metadata)
        episode_speaker(meta)
        context, context_id = episode_context(meta, self._previous_turn(session_id))
        row = build_row(
            EpisodicMemory,
            id=new_id("episodic"),
            text=text,
            user_id=self.user_id,
            created_at=utcnow(),
            timestamp=validation.check_turn_time(at) or utcnow(),
            session_id=session_id,
            metadata=meta,
            context=context,
            context_id=context_id,
        )
        if not self._engram._store_row(self.user_id, row):  # answer it as stored
            row = row.model_copy(update={"context": None, "context_id": None})
        self._engram.session_tails.put(row)
        return row

    def _previous_turn(self, session_id: str | None) -> EpisodicMemory | None:
        """The latest turn of the session this process wrote, else the latest among the user's most
        recent turns (sessions interleave little: a turn continues one of the last few), or None."""
        if session_id is None:
            return None
        known = self._engram.session_tails.get(self.user_id, session_id)
        if known is not None:
            return known
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
        ``created_at`` backdates the row for imports. A fact with ``supporting_episode_ids`` and no
        ``valid_from`` holds from when the newest of those turns was said (its event time).
        """
        engram = self._engram
        meta = check_metadata(metadata)  # before any work: JSON must hold it as given
        if memory_type not in WRITABLE_TYPES:
            raise InvalidInput(
                f"memory_type must be one of {WRITABLE_TYPES} (episodes are written with "
                f"remember_turn, catalog rows by the admin); got {memory_type!r}"
            )
        if memory_type == "semantic" or text != "":  # a playbook may carry everything in its fields
            text = engram._check_text(text)
        cited = validation.items_of(supporting_episode_ids, "supporting_episode_ids", text_is_one=True)
        supporting = builtins.list(dict.fromkeys(cited))
        steps = validation.items_of(steps or (), "steps")
        of_fact = {
            "fact_type": fact_type,
            "confidence": confidence,
            "valid_from": valid_from,
            "valid_to": valid_to,
        }
        of_playbook = {"name": name, "trigger_text": trigger_text, "description": description, "steps": steps}
        check_applies(memory_type, of_fact | {"supporting_episode_ids": supporting}, of_playbook)
        said_at: datetime | None = None  # when the user last said what the fact stands on
        if supporting:  # provenance must be this user's own episodes
            found = {m.id: m for m in engram.store.fetch(self.user_id, supporting, include_catalog=False)}
            for episode_id in supporting:
                if episode_id not in found:
                    raise NotFound(str(episode_id))
                if not isinstance(found[episode_id], EpisodicMemory):  # the user's own row: say what it is
                    kind = found[episode_id].memory_type
                    raise InvalidInput(f"supporting_episode_ids names turns; {episode_id} is a {kind} memory")
            said_at = max(event_time(found[i]) for i in supporting)
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
            "created_at": validation.check_turn_time(created_at, "created_at", "a row is written by now")
            or now,
            "metadata": meta,
            "supersedes": supersede.old_id if supersede else None,
        }
        row: SemanticMemory | ProceduralMemory
        if memory_type == "semantic":
            number = isinstance(confidence, int | float) and not isinstance(confidence, bool)
            if not number or not 0 <= confidence <= 1:
                raise InvalidInput("confidence must be a number in [0, 1]")
            if contradiction == "harsh":
                confidence = max(0.0, confidence - engram.settings.supersede_penalty)
            fact = build_row(
                SemanticMemory,
                **common,
                fact_type=fact_type,
                confidence=confidence,
                supporting_episode_ids=supporting,
                contradiction=contradiction if supersede else None,
                # by default a fact holds from when the user said it, as consolidation writes it: its
                # event time, which a model compares with the turns' ("the later one is current")
                valid_from=aware(valid_from) or _unless_after(said_at, aware(valid_to)),
                valid_to=aware(valid_to),
            )
            if fact.valid_from and fact.valid_to and fact.valid_from > fact.valid_to:
                raise InvalidInput("valid_from is after valid_to")
            row = fact
        else:
            if not isinstance(name, str) or not name.strip():
                raise InvalidInput("a procedural memory needs a non-empty name")
            row = check_playbook(
                build_row(
                    ProceduralMemory,
                    **common,
                    name=name,
                    trigger_text=trigger_text or "",
                    description=description or "",
                    steps=[dict(s) if isinstance(s, Mapping) else s for s in steps],
                    version=engram._next_version(self.user_id, supersede),
                ),
                engram.settings.max_text_chars,
            )
        engram._store_row(self.user_id, row, supersede)
        return row

    @overload
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
        min_confidence: float | None = None,
        view: Literal["full"] = "full",
        *,
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[Hit]: ...

    @overload
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
        min_confidence: float | None = None,
        *,
        view: Literal["compact"],
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[CompactHit]: ...

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
        min_confidence: float | None = None,
        view: RecallView = "full",
        *,
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[Hit] | builtins.list[CompactHit]:
        """Search all of the user's memory types and the catalog in one call.

        Each hit carries its event time and a calibrated ``confidence`` in [0, 1]; ``min_confidence``
        keeps only the top ``k`` hits that reach it (an empty list: nothing relevant is stored).
        ``view="compact"`` returns ``CompactHit``s, sized for a model's context (no score breakdown).

        Returned live facts get ``use_count + 1`` and ``last_used_at = now`` (atomically); the
        returned rows show the values after that bump, their explain the values before it. When
        another writer holds the store (a bulk import), the bump is queued rather than waited for
        (see engram.use_counts) and the rows show the count read plus one.
        ``record_use=False`` leaves them untouched (evaluations, previews). ``as_of`` is the present
        that time decay measures ages from (default: now), for replays, audits and evaluations of
        recorded conversations; it does not hide rows written after it, and such a recall records no
        use unless ``record_use=True`` says so (a replay is not a use).

        ``session_id``, ``time_from`` (inclusive), ``time_to`` (exclusive, on each row's event time) and
        ``metadata`` (every pair equal) keep only the rows that match, inside the search: ``k`` matching
        rows are found when there are ``k`` (``engram.recall_filter``).
        """
        engram = self._engram
        query = engram._check_text(query, "query")
        validation.check_k(k)
        check_recall_options(min_confidence, view)
        validation.check_recall_flags(include_catalog, include_superseded, record_use)
        if config is not None and not isinstance(config, RetrievalConfig):
            raise InvalidInput(f"config must be a RetrievalConfig, not {type(config).__name__}")
        narrow = recall_filter(session_id, time_from, time_to, metadata)
        types = set(MEMORY_TYPES if memory_types is None else check_types(memory_types))
        if not types:  # an empty list finds nothing: a caller's mistake, not a question
            raise InvalidInput(f"memory_types is empty; name at least one of {MEMORY_TYPES}")
        if not include_catalog:
            types.discard("catalog")
        now = utcnow()
        telemetry = engram.telemetry
        with telemetry.span("engram.recall", k=k), ExitStack() as slot:
            with telemetry.stage("queue"):  # waiting for a recall slot (the gate; ~0 when idle)
                full = slot.enter_context(engram.recall_gate.enter(self.user_id))
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
                now=aware(as_of) or now,
                admission=engram.rerank_admission,
                shed_rerank=not full,
                helper_nice=engram.settings.recall_nice,
                telemetry=telemetry,
                narrow=narrow,
            )
        shed = any(h.explain.get("rerank") == SHED_RERANK for h in hits)
        telemetry.metrics.recalls.inc()
        if shed:
            telemetry.metrics.recalls_shed.inc()
        hits = confident(hits, min_confidence)
        if record_use if record_use is not None else as_of is None:
            used = [
                h.memory.id
                for h in hits
                if isinstance(h.memory, SemanticMemory) and h.memory.superseded_by is None
            ]
            counts = engram.use_counts.record(self.user_id, used, now) or {}  # None: queued, not applied
            used_set = set(used)
            hits = [_used(h, counts, now) if h.memory.id in used_set else h for h in hits]
        result = [h.compact() for h in hits] if view == "compact" else hits
        return ShedHits(result) if shed else result

    def record_outcome(self, playbook_id: str, success: bool) -> ProceduralMemory:
        """Count one use of one of the user's playbooks as a success or a failure, atomically and
        without an LLM: recall's prior for it (``scoring.success_prior``) moves at once. Returns the
        playbook with its counts after the change. Another user's playbook is NotFound; a row that is
        not a playbook (a fact, a turn, a catalog row) is InvalidInput."""
        if not isinstance(success, bool):
            raise InvalidInput("success must be true or false")
        if is_well_formed_id(playbook_id) and not playbook_id.startswith("pro_"):
            raise InvalidInput(f"{playbook_id} is not a playbook: outcomes are recorded for playbooks only")
        store = self._engram.store
        old = next(iter(store.fetch(self.user_id, [playbook_id], include_catalog=False)), None)
        if isinstance(old, ProceduralMemory) and old.superseded_by:  # recall shows the current one only
            raise Conflict(f"playbook {playbook_id} was superseded by {old.superseded_by}: record it there")
        store.apply_consolidation(self.user_id, playbook_outcome(playbook_id, success, utcnow()))
        rows = store.fetch(self.user_id, [playbook_id], include_catalog=False)
        if not rows or not isinstance(rows[0], ProceduralMemory):  # forgotten since
            raise NotFound(playbook_id)
        return rows[0]

    def history(self, memory_id: str) -> builtins.list[Memory]:
        """The supersession chain that contains ``memory_id``, oldest first (forgotten links are gone)."""
        start = self.get(memory_id)
        if start.user_id != self.user_id:
            return [start]  # a catalog row: no chains there
        chain = [start]
        seen = {start.id}
        back, forward = _links(start)
        while back and back not in seen:
            rows = self._engram.store.fetch(self._tenant, [back], include_catalog=False)
            if not rows:
                break
            chain.insert(0, rows[0])
            seen.add(back)
            back = _links(rows[0])[0]
        while forward and forward not in seen:
            rows = self._engram.store.fetch(self._tenant, [forward], include_catalog=False)
            if not rows:
                break
            chain.append(rows[0])
            seen.add(forward)
            forward = _links(rows[0])[1]
        return chain

    def list(
        self,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[Memory]:
        """The user's rows of one type, newest first, paged."""
        (checked,) = check_types([memory_type])
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


def _used(hit: Hit, counts: Mapping[str, int], now: datetime) -> Hit:
    """The hit with its fact's use recorded: the count the store returned, else the count read + 1."""
    fact = hit.memory
    if not isinstance(fact, SemanticMemory):
        return hit
    use_count = counts.get(fact.id, fact.use_count + 1)
    return hit.model_copy(
        update={"memory": fact.model_copy(update={"use_count": use_count, "last_used_at": now})}
    )


def _links(row: Memory) -> tuple[str | None, str | None]:
    """(the id the row supersedes, the id that supersedes it); only facts and playbooks have them."""
    if isinstance(row, SemanticMemory | ProceduralMemory):
        return row.supersedes, row.superseded_by
    return None, None


def _unless_after(at: datetime | None, end: datetime | None) -> datetime | None:
    """``at``, unless it falls after ``end`` (a fact given an end before its source turn keeps no start)."""
    return None if at is None or (end is not None and at > end) else at
