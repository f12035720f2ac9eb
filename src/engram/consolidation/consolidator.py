"""Consolidation: turn a user's new episodes into facts, playbooks, supersessions and feedback.

Per batch of the user's waiting episodes (oldest first): one LLM call extracts candidates; guards
filter them (cited episodes of this batch only, assistant words never become facts, confidence floor,
duplicate check against the hybrid top-5 neighbours with one batched judge call for the unclear ones);
then everything is written in ONE transaction that also marks the batch's episodes consolidated: a
crash before the commit leaves nothing behind, and the batch waits for the next run.

A batch whose LLM reply is malformed, or that the endpoint refuses as too big (HTTP 400 or 413), is
split in halves down to single episodes; an episode the LLM cannot read alone, twice, is set aside
(marked skipped, reported) so it never blocks later turns. When neither half of a split can be read,
the LLM is at fault: the run stops with an error and nothing is set aside.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from engram.consolidation import guards
from engram.consolidation.feedback import playbook_feedback
from engram.consolidation.llm import LLMClient, LLMError, LLMOutputError
from engram.consolidation.policy import ConsolidationPolicy, ConsolidationReport
from engram.consolidation.prompts import (
    ASSISTANT_CONTEXT_KEY,
    EXTRACT_SYSTEM,
    JUDGE_SYSTEM,
    extraction_prompt,
    judge_prompt,
)
from engram.consolidation.schema import Extraction, JudgeVerdicts, NewFact
from engram.errors import Conflict, EngramError, InvalidInput, NotFound
from engram.models import (
    EpisodicMemory,
    Memory,
    ProceduralMemory,
    SemanticMemory,
    Vectors,
    check_playbook,
    check_text,
    new_id,
    search_text_of,
    transcript_line,
    utcnow,
)
from engram.providers.base import Embedder, TokenEncoder
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.pipeline import recall
from engram.storage.base import (
    ConsolidationStore,
    ConsolidationWrite,
    FactMerge,
    MemoryStore,
    Supersession,
    episode_marks,
)
from engram.validation import validate_user_id

__all__ = ["ConsolidationPolicy", "ConsolidationReport", "Consolidator", "ConsolidatorStore", "RowEncoder"]

log = logging.getLogger(__name__)
NEIGHBOURS = 5  # hybrid top-k existing facts each candidate is compared with
PROMPT_NEWEST_FACTS = 200  # stored facts the prompt shows besides each turn's NEIGHBOURS nearest
_NEIGHBOUR_SEARCH = RetrievalConfig(rerank=False, multipliers=False)
_Row = TypeVar("_Row", SemanticMemory, ProceduralMemory)

# Rows to their embeddings and packed token vectors, as the facade stores them (Engram.encode_rows).
RowEncoder = Callable[[Sequence[Memory]], tuple[Vectors, list[bytes] | None]]


class ConsolidatorStore(MemoryStore, ConsolidationStore, Protocol):
    """The store roles a run uses: the waiting episodes and the one-transaction write, the user's
    facts and playbooks, and the hybrid search that finds a candidate's neighbours."""


class Consolidator:
    """Consolidates one user at a time. It is given the store, the embedder (for its duplicate check)
    and the facade's row encoder, never the facade itself: ``Engram.consolidate`` makes one per run."""

    def __init__(
        self,
        store: ConsolidatorStore,
        embedder: Embedder,
        llm: LLMClient,
        policy: ConsolidationPolicy | None = None,
        *,
        encode_rows: RowEncoder,
        token_encoder: TokenEncoder | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.encode_rows = encode_rows
        self.token_encoder = token_encoder  # the neighbour search uses late interaction as recall does
        self.llm = llm
        self.policy = policy or ConsolidationPolicy()

    def run(self, user: str) -> ConsolidationReport:
        """Consolidate the waiting episodes of ``user`` (InvalidInput if it is not a valid user id)."""
        validate_user_id(user)  # a public entry point beside the facade: never a catalog or '' tenant
        store = self.store
        report = ConsolidationReport(user_id=user)
        unreadable: list[tuple[EpisodicMemory, str]] = []
        while True:
            episodes = store.waiting_episodes(user, self.policy.batch_size)
            episodes = [e for e in episodes if e.id not in {u.id for u, _ in unreadable}]
            if not episodes:
                break
            try:
                self._consolidate(user, episodes, report, unreadable)
            except LLMError as exc:
                report.status = f"error: {exc}"
                unreadable.clear()  # the LLM is failing, not these turns: they stay waiting
                break
            except (Conflict, NotFound) as exc:  # a fact it touches changed or was forgotten meanwhile
                report.status = f"stopped: {exc}"
                break
            if len(episodes) < self.policy.batch_size:
                break
        if unreadable and not report.batches:  # nothing at all could be read: blame the LLM
            report.status = f"error: every LLM reply was malformed ({unreadable[0][1]}); nothing skipped"
        elif unreadable:
            self._set_aside(user, unreadable, report)
        return report

    def _consolidate(
        self,
        user: str,
        episodes: list[EpisodicMemory],
        report: ConsolidationReport,
        unreadable: list[tuple[EpisodicMemory, str]],
    ) -> bool:
        """Plan and apply one batch; on a malformed reply, each half on its own (see the module
        docstring). True if any part of it was consolidated; raises LLMOutputError when no part of a
        split could be (then the LLM is failing, not an episode)."""
        try:
            write = self._plan(user, episodes, report)
        except LLMError as exc:
            if not _splittable(exc):
                raise
            if len(episodes) == 1:
                try:  # one more try before a turn is set aside for good: the fault may be passing
                    write = self._plan(user, episodes, report)
                except LLMError as again:
                    if not _splittable(again):
                        raise
                    unreadable.append((episodes[0], str(exc)))
                    return False
            else:
                half = len(episodes) // 2
                log.warning("consolidation of %s: %s for %d episodes, splitting", user, exc, len(episodes))
                first = self._consolidate(user, episodes[:half], report, unreadable)
                second = self._consolidate(user, episodes[half:], report, unreadable)
                if not (first or second):
                    raise LLMOutputError(
                        f"every part of a batch of {len(episodes)} was refused or malformed: {exc}"
                    ) from exc
                return True
        self.store.apply_consolidation(user, write)
        report.batches += 1
        report.episodes += len(episodes)
        report.written += [r.id for r in write.rows]
        report.merged += [m.fact_id for m in write.merges]
        report.superseded += [s.old_id for s in write.supersede.values()]
        report.feedback += [
            f"{f.playbook_id}:{'success' if f.success else 'failure'}" for f in write.feedback
        ]
        return True

    def _set_aside(
        self, user: str, unreadable: list[tuple[EpisodicMemory, str]], report: ConsolidationReport
    ) -> None:
        ids = [episode.id for episode, _ in unreadable]
        try:
            self.store.apply_consolidation(
                user, episode_marks(ids, utcnow(), self.embedder.dim, skipped=True)
            )
        except EngramError as exc:  # keep the report of what did commit; they stay waiting
            report.status = f"partial: could not set aside {len(ids)} unreadable episodes: {exc}"
            return
        log.warning(
            "consolidation of %s: set aside %d episodes the LLM could not read: %s", user, len(ids), ids
        )
        report.skipped_episodes += ids
        if report.status == "ok":
            report.status = (
                f"partial: {len(ids)} episodes skipped (malformed LLM output, or refused as too big)"
            )

    # -- one batch ------------------------------------------------------------------------------
    def _plan(
        self, user: str, episodes: list[EpisodicMemory], report: ConsolidationReport
    ) -> ConsolidationWrite:
        store, now = self.store, utcnow()
        # the newest facts, and those nearest each turn: an old fact a turn changes must be in the prompt
        # (only the newest 500 were: a user's 501st fact could no longer be superseded)
        newest = store.list_memories(user, "semantic", limit=PROMPT_NEWEST_FACTS)
        related = [n for e in episodes for n in self._neighbours(user, e.text)]
        facts = list({f.id: f for f in [*newest, *related] if isinstance(f, SemanticMemory)}.values())
        playbooks = [
            m for m in store.list_memories(user, "procedural", limit=200) if isinstance(m, ProceduralMemory)
        ]
        extraction = self.llm.complete_json(
            EXTRACT_SYSTEM, extraction_prompt(episodes, facts, playbooks), Extraction
        )
        batch = {e.id: e for e in episodes}

        def said_at(support: list[str]) -> datetime:
            """A fact's valid_from: when the user last said it, not when this run wrote it down (its event
            time: a model told "the later one is the current truth" compares it with turns)."""
            return max(batch[i].timestamp for i in support)

        assistant = [
            e.metadata[ASSISTANT_CONTEXT_KEY]
            for e in episodes
            if isinstance(e.metadata.get(ASSISTANT_CONTEXT_KEY), str)
        ]
        rows: list[Memory] = []
        supersede: dict[str, Supersession] = {}
        merges: dict[str, set[str]] = {}

        def drop(text: str, reason: str) -> None:
            report.dropped.append({"text": text, "reason": reason})

        for item in extraction.rejected:
            drop(item, "not the shape asked for")

        def admissible(
            text: str, cited_ids: list[str], confidence: float, facts_only: bool = True
        ) -> list[str] | None:
            support = guards.cited(cited_ids, set(batch))
            if not support:
                drop(text, "cites no episode of this user's batch")
                return None
            if confidence < self.policy.confidence_floor:
                drop(text, f"confidence {confidence:.2f} below the floor {self.policy.confidence_floor}")
                return None
            if facts_only:
                try:
                    check_text(text, "text", self.policy.max_text_chars)
                except InvalidInput as exc:
                    drop(text, f"not storable: {exc}")
                    return None
            # Facts are about the user, so only the user's words count. A playbook is often the
            # assistant's procedure that the user confirmed; its provenance check is the citation.
            leaked = (
                guards.assistant_only_words(text, [transcript_line(e) for e in episodes], assistant)
                if facts_only
                else None
            )
            if leaked:
                drop(text, f"words only the assistant said: {', '.join(sorted(leaked))}")
                return None
            return support

        # supersessions first: the replaced facts must not also count as duplicates below
        live = {f.id: f for f in facts}
        for s in extraction.supersessions:
            support = admissible(s.new_text, s.supporting_episode_ids, s.confidence)
            if support is None:
                continue
            if s.fact_id not in live:
                drop(s.new_text, f"supersedes {s.fact_id!r}, which is not a live fact of this user")
                continue
            earlier = next((i for i, x in supersede.items() if x.old_id == s.fact_id), None)
            if earlier is not None:  # "York", then "actually Leeds": the later statement is the change
                first = next(r for r in rows if r.id == earlier)
                if isinstance(first, SemanticMemory) and (first.valid_from or now) > said_at(support):
                    drop(s.new_text, f"this reply changes {s.fact_id!r} again, later")
                    continue
                rows.remove(first)
                del supersede[earlier]
                drop(first.text, f"this reply changes {s.fact_id!r} again, later")
            harsh = s.contradiction == "harsh"
            row = SemanticMemory(
                id=new_id("semantic"),
                text=s.new_text,
                user_id=user,
                created_at=now,
                fact_type=s.fact_type,
                confidence=max(0.0, s.confidence - (self.policy.supersede_penalty if harsh else 0.0)),
                supporting_episode_ids=support,
                supersedes=s.fact_id,
                contradiction=s.contradiction,
                valid_from=said_at(support),
            )
            rows.append(row)
            supersede[row.id] = Supersession(old_id=s.fact_id, retract=harsh, at=now)
        replaced = {x.old_id for x in supersede.values()}
        duplicate, repeat = self.policy.duplicate_similarity, self.policy.repeat_similarity

        def merge(target: SemanticMemory, support: list[str]) -> None:
            if self._merge(target, support, rows, merges):  # into a fact new in this reply: reported here
                report.merged.append(target.id)

        unclear: list[tuple[str, list[SemanticMemory], list[str], NewFact]] = []
        for fact in extraction.facts:
            support = admissible(fact.text, fact.supporting_episode_ids, fact.confidence)
            if support is None:
                continue
            # not a neighbour to merge into, but no new fact either: "Sarah lives in Bristol" listed
            # beside the supersession that replaces it would make it live again
            if replaced and self._closest(fact.text, [live[i] for i in replaced])[0] >= repeat:
                drop(fact.text, "repeats a fact this batch replaces")
                continue
            pending = [r for r in rows if isinstance(r, SemanticMemory)]
            neighbours = [n for n in self._neighbours(user, fact.text) if n.id not in replaced] + pending
            similarity, best = self._closest(fact.text, neighbours)
            kind = guards.classify(similarity, self.policy.duplicate_similarity, self.policy.judge_similarity)
            if kind == "duplicate" and best is not None and guards.differs_in_detail(fact.text, best.text):
                kind = "judge"  # "Mia is 8" beside "Mia is 7": a change, never a merge
            if kind == "duplicate" and best is not None:
                merge(best, support)
            elif kind == "judge":
                unclear.append((fact.text, neighbours, support, fact))
            else:
                rows.append(self._fact_row(user, fact, support, now, said_at(support)))
        if unclear:
            verdicts = self.llm.complete_json(
                JUDGE_SYSTEM, judge_prompt([(t, n) for t, n, _, _ in unclear]), JudgeVerdicts
            )
            for item in verdicts.rejected:  # its candidate is written as new, as with no verdict
                drop(item, "a judge verdict not of the shape asked for")
            said = {v.index: v for v in verdicts.verdicts}
            for index, (_text, neighbours, support, fact) in enumerate(unclear):
                verdict = said.get(index)
                target = next((n for n in neighbours if verdict and n.id == verdict.duplicate_of), None)
                changed = next((n for n in neighbours if verdict and n.id == verdict.replaces), None)
                row = self._fact_row(user, fact, support, now, said_at(support))
                if target is not None:
                    merge(target, support)
                elif changed is not None and changed.id not in {r.id for r in rows} | replaced:
                    # the judge found a change the extraction gave as a plain fact: a supersession
                    rows.append(row.model_copy(update={"supersedes": changed.id, "contradiction": "natural"}))
                    supersede[row.id] = Supersession(old_id=changed.id, retract=False, at=now)
                    replaced.add(changed.id)
                else:  # listed twice and judged twice (near an older fact): the second copy merges
                    sim, kept = self._closest(fact.text, [r for r in rows if isinstance(r, SemanticMemory)])
                    if kept and sim >= duplicate and not guards.differs_in_detail(fact.text, kept.text):
                        merge(kept, support)
                    else:
                        rows.append(row)

        for pb in extraction.playbooks:
            support = admissible(pb.name, pb.supporting_episode_ids, 1.0, facts_only=False)
            if support is None:
                continue
            playbook = ProceduralMemory(
                id=new_id("procedural"),
                text="",
                user_id=user,
                created_at=now,
                name=pb.name,
                trigger_text=pb.trigger_text,
                description=pb.description,
                steps=pb.steps,
                metadata={"supporting_episode_ids": support},
            )
            try:  # the limits write() holds a playbook to (a NUL, a 5,000-character name, 500 steps)
                check_playbook(playbook, self.policy.max_text_chars)
            except InvalidInput as exc:
                drop(pb.name, f"not storable: {exc}")
                continue
            written = [r for r in rows if isinstance(r, ProceduralMemory)]  # the same one twice in a reply
            similarity, twin = self._closest(search_text_of(playbook), [*playbooks, *written])
            if similarity >= duplicate:
                drop(
                    pb.name,
                    "duplicate of a " + ("playbook in this reply" if twin in written else "stored playbook"),
                )
                continue
            rows.append(playbook)

        feedback = playbook_feedback(
            extraction.procedural_updates, playbooks, set(batch), self.policy.max_text_chars, drop
        )

        vectors, tokens = self.encode_rows(rows)
        return ConsolidationWrite(
            rows=rows,
            vectors=vectors,
            tokens=tokens,
            supersede=supersede,
            merges=[FactMerge(fact_id, tuple(sorted(ids))) for fact_id, ids in merges.items()],
            feedback=feedback,
            episode_ids=[e.id for e in episodes],
            at=now,
        )

    # -- helpers --------------------------------------------------------------------------------
    def _neighbours(self, user: str, text: str) -> list[SemanticMemory]:
        """The user's live facts nearest to ``text``: hybrid search without rerank or multipliers (no
        use is recorded: a consolidation run is not a use)."""
        hits = recall(
            self.store,
            self.embedder,
            None,  # no cross-encoder: _NEIGHBOUR_SEARCH turns the rerank stage off
            self.token_encoder,
            user,
            text,
            k=NEIGHBOURS,
            memory_types=frozenset({"semantic"}),
            include_superseded=False,
            config=_NEIGHBOUR_SEARCH,
            now=utcnow(),
        )
        return [h.memory for h in hits if isinstance(h.memory, SemanticMemory)]

    def _closest(self, text: str, neighbours: Sequence[_Row]) -> tuple[float, _Row | None]:
        if not neighbours:
            return 0.0, None
        vectors = self.embedder.embed_documents([text] + [search_text_of(n) for n in neighbours])
        sims = guards.cosine_to_neighbours(vectors[0], vectors[1:])
        best = int(sims.argmax())
        return float(sims[best]), neighbours[best]

    @staticmethod
    def _merge(
        target: SemanticMemory, support: list[str], rows: list[Memory], merges: dict[str, set[str]]
    ) -> bool:
        """Add ``support`` to ``target``'s provenance; True when the target is new in this batch."""
        for i, row in enumerate(rows):
            if row.id == target.id and isinstance(row, SemanticMemory):  # a fact new in this same batch
                ids = list(dict.fromkeys([*row.supporting_episode_ids, *support]))
                rows[i] = row.model_copy(update={"supporting_episode_ids": ids})
                return True
        merges.setdefault(target.id, set()).update(support)
        return False

    @staticmethod
    def _fact_row(
        user: str, fact: NewFact, support: list[str], now: datetime, said: datetime
    ) -> SemanticMemory:
        return SemanticMemory(
            id=new_id("semantic"),
            text=fact.text,
            user_id=user,
            created_at=now,
            fact_type=fact.fact_type,
            confidence=fact.confidence,
            supporting_episode_ids=support,
            valid_from=said,
        )


def _splittable(exc: LLMError) -> bool:
    """A failure a smaller batch may not meet: a malformed reply, or a request refused as too big (a
    context too long is HTTP 400 on OpenAI, vLLM and llama.cpp, 413 behind some proxies)."""
    return isinstance(exc, LLMOutputError) or exc.status in (400, 413)
