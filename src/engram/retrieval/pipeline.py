"""Recall: legs -> RRF -> shape -> late interaction -> rerank -> final score -> current first -> top k.

1. Two legs over the tenant's scope, ``leg_candidates`` each: BM25 (FTS; an episode is indexed with
   the turn it replied to) and exact dense kNN.
2. Fuse by RRF (``fusion.rrf``).
3. Multipliers (``scoring.multipliers``) shape the fused order.
4. Late interaction re-orders the top ``late_window`` fused candidates by ColBERT MaxSim over their
   stored token vectors (``late_interaction.late_score``, min-max scaled within the head): a row deep
   in one leg can still reach the cross-encoder's window.
5. The cross-encoder scores the contested places of the top ``rerank_window`` candidates
   (``contenders.contenders``: the leader's near-ties by late-interaction MaxSim, within
   ``rerank_gap`` among raw turns and ``rerank_gap_distilled`` in a window holding a distilled memory,
   or a row both legs rank first), and at least the leader, for its confidence: the calibration of a
   leader left unscored put unrelated ones at 0.3-0.5 in small stores, and now serves only when the
   stage is shed or fails. It reads the query and the user's facts in the user's own voice
   (``own_voice``: "What is Sarah's job?" -> "What is my job?").
6. Final score = relevance × Π multipliers (relevance = rerank probability, else late-interaction
   score, else RRF). Each stage re-orders only its head: reranked candidates rank above the rest
   of the late-interaction head, which ranks above the RRF tail, and a ``stage_scale`` factor keeps
   scores falling with rank across them (``keep_scores_ordered``). If a model stage raises, recall
   continues on the previous order and says so in every hit's explain (``<stage>_error``); under
   overload the rerank stage is skipped the same way (``admission``), explain ``"rerank": "skipped:
   load"``.
7. Current truth first (``currency.put_current_first``): for a question about the present, a newer
   memory that replaces a candidate (a live fact superseding what an episode supports, a newer turn
   announcing a change) ranks above it; the replaced one's explain names ``outdated_by``, and it is
   multiplied by ``outdated`` unless a change-announcing turn replaced it for a query that does not
   expect a change (then the two only swap places); for one that does, older turns count a little less
   (``currency.put_recent_first``, explain ``recency``). For a question about an earlier state, the fact
   a leading live one superseded, else an older near match, goes above the leader
   (``past_first.put_past_first``, explain ``past_lift``). A fact whose ``valid_from``/``valid_to`` do
   not cover the present, or the period the query names, is multiplied by ``outdated`` too
   (``currency.put_invalid_below``, explain ``validity``); a retracted fact (never true) is left out
   unless ``include_superseded``.
8. Each hit gets its event time and a calibrated ``confidence`` (``confidence.confidence``); a
   successor's is at least that of what it replaced; a hit without the name, number, time, day,
   colour or occupation the question asks for gets less (``asked_value``; explain ``asked_value``,
   and its score the ``missing_value`` multiplier from step 3 on).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from engram.errors import public_failure
from engram.models import EpisodicMemory, Hit, MemoryType, SemanticMemory, event_time, search_text_of
from engram.observability import Telemetry
from engram.providers.base import Embedder, Reranker, TokenEncoder, query_content_positions
from engram.recall_filter import NO_FILTER, RecallFilter
from engram.retrieval.admission import Admission
from engram.retrieval.asked_value import missing_value
from engram.retrieval.candidate import Candidate, subject_match
from engram.retrieval.change_cues import asks_about_earlier_state, asks_about_past, expects_change
from engram.retrieval.confidence import confidence
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.contenders import contenders, is_echo, put_askers_below, set_aside_askers
from engram.retrieval.currency import put_current_first, put_invalid_below, turns_behind
from engram.retrieval.fusion import rrf
from engram.retrieval.late_interaction import (
    Matrix,
    late_score,
    normalised,
    pack_all,
    query_coverage,
    token_maxima,
)
from engram.retrieval.own_voice import in_own_words, names_nobody, names_user_uncapitalised, own_voice
from engram.retrieval.past_first import put_past_first
from engram.retrieval.rerank import apply_rerank
from engram.retrieval.scoring import keep_scores_ordered, multipliers, named_speakers
from engram.retrieval.temporal import time_window
from engram.storage.base import CandidateSearch, SearchFilter, SearchStore, Tenant
from engram.text import query_words, user_id_words, user_named_in
from engram.threads import lower_priority

# Rows without stored token vectors are encoded at recall (~3 ms each) up to this many; past it the
# stage is skipped, so a store upgraded from 0.1 keeps 0.1's latency until `engram reindex` has run.
MAX_ENCODED_AT_RECALL = 8
# Superseded facts re-encoded in the user's voice per recall (``stored_late_scores``; ~3 ms each)
MAX_VOICED_AT_RECALL = 4
_LEG_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="engram-leg")  # recall's work only
_ADMIT_ALL = Admission(0)
T = TypeVar("T")
_SHED_ALL = Admission.closed()


def recall(
    store: SearchStore,
    embedder: Embedder,
    reranker: Reranker | None,
    token_encoder: TokenEncoder | None,
    tenant: Tenant,
    query: str,
    *,
    k: int,
    memory_types: frozenset[MemoryType],
    include_superseded: bool,
    config: RetrievalConfig,
    now: datetime,
    admission: Admission | None = None,
    shed_rerank: bool = False,
    helper_nice: int = 0,
    telemetry: Telemetry | None = None,
    narrow: RecallFilter = NO_FILTER,
) -> list[Hit]:
    """One recall through the stages of the module docstring; ``helper_nice``: the CPU priority (nice)
    of the pool threads running its legs and query encoding; ``telemetry`` times (and traces) each
    stage; ``narrow``: the rows it may return (session, event time, metadata), inside both legs."""
    stage = telemetry.stage if telemetry is not None else _untimed
    # a question about the past also sees what was true then: facts superseded since ("what was my old car?")
    about_past = asks_about_past(query)
    history = include_superseded or (config.current_first and about_past)
    where = SearchFilter(memory_types=memory_types, include_superseded=history, narrow=narrow)
    late = token_encoder is not None and config.late_interaction and config.late_window > 0
    # The query's token vectors are encoded on a worker while the legs run.
    query_tokens = (
        _in_background(helper_nice, token_encoder.encode_query, query) if late and token_encoder else None
    )
    if isinstance(store, CandidateSearch) and set(config.legs) == {"bm25", "dense"}:
        # A networked store answers legs, rows and token vectors in one statement (fewer round trips).
        with stage("legs"):
            found = store.search_candidates(
                tenant, query, embedder.embed_query(query), where, config.leg_candidates, late
            )
        legs = {
            "bm25": [(h.id, h.score) for h in found.bm25],
            "dense": [(h.id, h.score) for h in found.dense],
        }
        fetched, prefetched = found.rows, found.tokens
    else:
        with stage("legs"):
            legs = _search_legs(store, embedder, tenant, query, where, config, helper_nice)
        fetched, prefetched = None, None
    fused = rrf({leg: [i for i, _ in hits] for leg, hits in legs.items()}, k=config.rrf_k)
    if fetched is None:
        with stage("fetch"):
            fetched = store.fetch(tenant, list(fused), include_catalog="catalog" in memory_types)
    rows = {m.id: m for m in fetched}
    # a retracted fact was never true: a question about the past gets it only with include_superseded
    shown = [i for i in fused if i in rows and (include_superseded or not getattr(rows[i], "retracted", 0))]
    candidates = [Candidate(memory=rows[i], rrf=fused[i]) for i in shown]
    by_id = {c.memory.id: c for c in candidates}
    for leg, hits in legs.items():
        for rank, (doc_id, score) in enumerate(hits, start=1):
            if doc_id in by_id:
                setattr(by_id[doc_id], f"{leg}_rank", rank)
                setattr(by_id[doc_id], f"{leg}_score", score)
    period = time_window(query, now)
    speakers = named_speakers(
        (c.memory for c in candidates if isinstance(c.memory, EpisodicMemory)), query_words(query)
    )
    # a hit without the name, number, time, day, colour or occupation asked for cannot answer (asked_value)
    lacking = missing_value(query, {c.memory.id: search_text_of(c.memory) for c in candidates}, tenant or "")
    for c in candidates:
        c.multipliers = multipliers(c.memory, now, config, period, speakers)
        if c.memory.id in lacking:
            c.multipliers["missing_value"] = config.missing_value_rank
    candidates.sort(key=lambda c: -c.final)

    errors: dict[str, str] = {}
    notes: dict[str, str] = {}  # a stage skipped, or run on part of its window, says why
    heads = [len(candidates)]  # where each stage's re-ordered head ends
    if query_tokens is not None and token_encoder is not None and candidates:
        head = candidates[: config.late_window]
        with stage("late_interaction"):
            late_error = apply_late_interaction(
                store, token_encoder, tenant, query_tokens, head, prefetched, query
            )
        if late_error is None:
            head.sort(key=lambda c: -c.final)
            candidates[: len(head)] = head
            heads.append(len(head))
        else:
            errors["late_interaction"] = late_error
    tier = candidates[: heads[-1]]  # the late-interaction head, or every fused candidate
    asker_ids = set_aside_askers(tier, query, config.asked_factor, max(k, config.rerank_window))
    candidates[: len(tier)] = tier
    window = candidates[: config.rerank_window] if config.rerank and reranker is not None else []
    contested = contenders(window, config.rerank_gap, query, config.rerank_gap_distilled, asker_ids)
    uncontested: Candidate | None = None  # a leader nothing came near, left unscored: its own calibration
    reranked = False  # the cross-encoder scored the window's contested places
    if window and not contested:  # nothing but the query's own echo
        notes["rerank"] = "skipped: nothing but the query's own turn"
    elif reranker is not None and window:
        others = [c for c in window if not (is_echo(c, query) or c.memory.id in asker_ids)]
        partial, window = contested < len(window), window[:contested]
        # a raw turn leads and nothing came near it (a single row is no clear leader: nothing to lose);
        # its own calibration was fitted on such turns, not on facts
        raw_turns = all(isinstance(c.memory, EpisodicMemory) for c in others)
        alone = raw_turns and len(others) > 1 and sum(1 for c in window if c in others) == 1
        rerank_error = None
        with (_SHED_ALL if shed_rerank else admission or _ADMIT_ALL).slot() as admitted:
            if admitted:  # a shed recall's skipped stage is counted as shed, not timed as a rerank
                with stage("rerank"):
                    rerank_error = apply_rerank(reranker, query, window, config.rerank_weight, tenant or "")
        if not admitted:
            notes["rerank"] = "skipped: load"
        elif rerank_error is None:
            if partial and contested == 1:  # for its confidence (module docstring)
                notes["rerank_contenders"] = "the first only: nothing near it; read for its confidence"
            elif partial:
                notes["rerank_contenders"] = f"the first {contested}: near enough to trade places"
            window.sort(key=lambda c: -c.final)
            candidates[: len(window)] = window
            heads.append(len(window))
            reranked = True
        else:
            errors["rerank"] = rerank_error
        if alone and not reranked:  # shed or failed
            uncontested = others[0]
            notes["rerank_contenders"] = "the first only: nothing near it; calibrated as such (not read)"
    bounds = sorted(set(heads))
    keep_scores_ordered([candidates[a:b] for a, b in zip([0, *bounds], bounds, strict=False) if a < b])
    put_askers_below(candidates, asker_ids, max(k, config.rerank_window))
    outdated_by: dict[str, str] = {}
    subjects = subject_match(token_encoder.dim if token_encoder is not None else 0)
    if config.current_first and period is None and not about_past:
        with stage("current_first"):
            outdated_by = put_current_first(
                candidates,
                lambda ids: store.fetch(tenant, ids, include_catalog=False),
                now,
                margin=config.replace_margin,
                outdated=config.outdated_factor,
                places=config.change_places,
                change_expected=expects_change(query),
                half_life_days=config.recency_half_life_days,
                query=query,
                subject_match=subjects,
                same_subject=config.same_subject,
                related=config.related_subject,
                askers=asker_ids,
                user_id=tenant,
                stored_match=(
                    stored_late_scores(store, token_encoder, tenant, query_tokens, query)
                    if query_tokens is not None and token_encoder is not None
                    else lambda ids: {}
                ),
            )
            put_invalid_below(candidates, now, config.outdated_factor)
            put_askers_below(candidates, asker_ids, max(k, config.rerank_window))  # again, after recency
    if config.current_first and period is not None:  # a fact that held before or after the period named
        put_invalid_below(candidates, period, config.outdated_factor)
    answers_for: dict[str, str] = {}  # id -> an id that answers as it does (in its place, or below it)
    if config.current_first and period is None and asks_about_earlier_state(query):
        answers_for = put_past_first(
            candidates, query, config.replace_margin, config.change_places, subjects, config.related_subject
        )

    judged = reranked or uncontested is not None  # what ranks below it was left unscored on purpose
    confidences = {
        c.memory.id: confidence(
            config.calibration,
            c.rerank,
            c.late_raw,
            c.dense_score,
            c is uncontested,
            c.coverage,
            below=judged and c is not uncontested,
        )
        * (config.asked_factor if c.memory.id in asker_ids else 1.0)
        for c in candidates
    }
    answers_for |= outdated_by
    answering = [*answers_for.items(), *turns_behind(outdated_by, candidates)]
    for _ in answering:  # a successor answers what its predecessor answered, down a chain too
        raised = False
        for old_id, new_id in answering:
            if confidences[old_id] > confidences[new_id]:
                confidences[new_id], raised = confidences[old_id], True
        if not raised:
            break
    for c in candidates[:k]:  # what was replaced is as likely to be the answer now as it ranks
        confidences[c.memory.id] *= c.multipliers.get("outdated", 1.0) * c.multipliers.get("validity", 1.0)
    for c in candidates[:k]:  # after every other rule: nothing raises it back
        confidences[c.memory.id] *= config.missing_value_factor if c.memory.id in lacking else 1.0
    return [
        Hit(
            memory=c.memory,
            score=c.final,
            rank=rank,
            confidence=confidences[c.memory.id],
            event_time=event_time(c.memory),
            explain=c.explain(errors, notes)
            | ({"outdated_by": outdated_by[c.memory.id]} if c.memory.id in outdated_by else {})
            | ({"asked_value": lacking[c.memory.id]} if c.memory.id in lacking else {}),
        )
        for rank, c in enumerate(candidates[:k], start=1)
    ]


def _untimed(name: str) -> AbstractContextManager[None]:
    return nullcontext()


def apply_late_interaction(
    store: SearchStore,
    encoder: TokenEncoder,
    tenant: Tenant,
    query: Future[Matrix],
    head: list[Candidate],
    prefetched: dict[str, bytes] | None = None,
    query_text: str = "",
) -> str | None:
    """Set each head candidate's late-interaction score, and its coverage of the content words of
    ``query_text`` (``query_coverage``, with the turn it replied to); the user's own name counts in
    neither; return an error text instead of raising.

    Token vectors come from the store (or ``prefetched`` with the candidates), with those of the turns
    the candidates replied to (their context); a row stored without them (written before this stage
    existed) is encoded here.
    """
    try:
        context_of = {
            c.memory.id: c.memory.context_id
            for c in head
            if isinstance(c.memory, EpisodicMemory) and c.memory.context_id
        }
        wanted = [c.memory.id for c in head] + list(context_of.values())
        blobs = (
            {i: prefetched[i] for i in wanted if i in prefetched}
            if prefetched is not None
            else store.token_vectors(tenant, wanted)
        )
        missing = [c.memory for c in head if c.memory.id not in blobs]
        if len(missing) > MAX_ENCODED_AT_RECALL:
            return (
                f"skipped: {len(missing)} candidates have no token vectors (written before late "
                "interaction existed): run `engram reindex`"
            )
        if missing:  # one at a time: the batch graph is for bulk writes; made here, a recall waited ~1 s
            encoded = [v for m in missing for v in encoder.encode_documents([search_text_of(m)])]
            # scored now, not stored: the int8 format, the closer one
            blobs.update(zip([m.id for m in missing], pack_all(encoded), strict=True))
        order = list(blobs)
        content, named = _query_positions(encoder, query_text, tenant)
        maxima = dict(
            zip(order, token_maxima(query.result(), [blobs[i] for i in order], encoder.dim), strict=True)
        )
        scores, coverages = [], []
        for c in head:
            own = maxima[c.memory.id]
            context = maxima.get(context_id) if (context_id := context_of.get(c.memory.id)) else None
            scores.append(late_score(own, context, named))
            coverages.append(query_coverage(own if context is None else np.maximum(own, context), content))
    except Exception as exc:  # recall must never fail because of an optional stage
        return public_failure(exc, "late interaction")  # logged there; no driver text in explain
    for candidate, raw, score, covered in zip(head, scores, normalised(scores), coverages, strict=True):
        candidate.late, candidate.late_raw, candidate.coverage = score, raw, covered
        candidate.tokens = blobs.get(candidate.memory.id)
    return None


def _query_positions(encoder: TokenEncoder, query_text: str, tenant: Tenant) -> tuple[list[int], list[int]]:
    """(content positions, the user's own name's positions) of the query's tokens: the name is left
    out of MaxSim as it is of coverage (late_score's docstring)."""
    content = query_content_positions(encoder, query_text, user_id_words(tenant) if tenant else frozenset())
    if not user_named_in(query_text, tenant or ""):
        return content, []
    return content, sorted(set(query_content_positions(encoder, query_text, frozenset())) - set(content))


def stored_late_scores(
    store: SearchStore, encoder: TokenEncoder, tenant: Tenant, query: Future[Matrix], query_text: str
) -> Callable[[list[SemanticMemory]], dict[str, float]]:
    """Raw late-interaction scores of facts that are not candidates (a superseded fact,
    ``currency.recorded_successors``) by id, as a candidate's ``late_raw`` (without a context). A fact
    that names the user ("User drives a Ford Focus") is read in their own voice, as the cross-encoder
    reads it ("I drive a Ford Focus": ``own_voice``), encoded now; the others from their stored
    token vectors. The user's turns say "I", and a first-person question matched the named fact less
    well than the turn it came from, so the turn kept answering with what the fact no longer says."""

    def scores(facts: list[SemanticMemory]) -> dict[str, float]:
        try:
            return matched(facts)
        except Exception as exc:  # an optional rule: recall goes on without it (logged)
            public_failure(exc, "the superseded facts' match")
            return {}

    def matched(facts: list[SemanticMemory]) -> dict[str, float]:
        voice = "" if tenant is None or names_user_uncapitalised(query_text, tenant) else tenant
        said = {f.id: search_text_of(f) for f in facts}
        voiced = {i: v for i, text in said.items() if (v := own_voice(text, voice, fact=True)) != text}
        # a user id that is no name ("u-8f3a"): such a fact names the user as its first word, as the
        # turn it was distilled from says "I" ("Sam's surname is Smith" from "my surname is Smith")
        if tenant is not None and names_nobody(tenant):
            voiced |= {
                i: v for i, text in said.items() if i not in voiced and (v := in_own_words(text)) != text
            }
        voiced = dict(list(voiced.items())[:MAX_VOICED_AT_RECALL])  # the rest: their stored vectors
        blobs = store.token_vectors(
            tenant, [f.id for f in facts if f.id not in voiced], include_catalog=False
        )
        named = _query_positions(encoder, query_text, tenant)[1]
        q = query.result()
        maxima = token_maxima(q, list(blobs.values()), encoder.dim)
        found = {i: late_score(m, None, named) for i, m in zip(blobs, maxima, strict=True)}
        for fact_id, text in voiced.items():  # one text at a time: the packaged graph, no batch set-up
            tokens = encoder.encode_documents([text])[0]
            found[fact_id] = late_score((q @ tokens.T).max(axis=1), None, named)
        return found

    return scores


def _in_background(nice: int, work: Callable[..., T], *args: Any) -> Future[T]:
    """Run ``work`` on the leg pool, its thread at nice ``nice`` at least (the pool runs only recall's
    work, so its threads never need their priority back)."""

    def niced() -> T:
        lower_priority(nice)
        return work(*args)

    return _LEG_POOL.submit(niced)


def _search_legs(
    store: SearchStore,
    embedder: Embedder,
    tenant: Tenant,
    query: str,
    where: SearchFilter,
    config: RetrievalConfig,
    helper_nice: int,
) -> dict[str, list[tuple[str, float]]]:
    """The legs as separate store calls: BM25 on a worker thread while this one embeds the query and
    runs the dense leg (SQLite and onnxruntime both release the GIL, so they overlap)."""
    legs: dict[str, list[tuple[str, float]]] = {}
    text_leg = (
        _in_background(helper_nice, store.search_text, tenant, query, where, config.leg_candidates)
        if "bm25" in config.legs
        else None
    )
    if "dense" in config.legs:
        vector = embedder.embed_query(query)
        legs["dense"] = [
            (h.id, h.score) for h in store.search_vector(tenant, vector, where, config.leg_candidates)
        ]
    if text_leg is not None:
        legs = {"bm25": [(h.id, h.score) for h in text_leg.result()], **legs}
    return legs
