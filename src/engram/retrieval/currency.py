"""Current truth first: when a newer memory replaces what an older one said, a question about the
present gets the newer one first, and the older one is marked ``outdated_by`` it.

Two kinds of evidence that one candidate replaces another (``recorded_successors``, ``announced_successor``):

* **Supersession** (after consolidation or an agent's write): a live fact that supersedes, directly or
  down its chain, a fact that an episode supports replaces that episode ("we live in Bristol btw"
  supports "Sarah lives in Bristol", superseded by "Sarah lives in Leith, Edinburgh"); a superseded
  fact shown with ``include_superseded`` is replaced by the live fact at the end of its chain. The
  live fact must match the query nearly as well as what it replaces (raw MaxSim at least the old one's
  less ``margin``; for a query that expects a change, "do I still live in Bristol?", which names the
  old value, the chain alone, unless the query asks about something else the old turn said, "am I
  still allergic to peanuts?" of "we live in Bristol, I'm allergic to peanuts"), and at least as well
  as any other live fact the episode supports: it replaces the Bristol turn for "where do I live?",
  not for "how thick are my walls?" nor, when the turn also said "I work as a nurse", for "where do I
  work?".
  When the live fact is worded unlike the query but a turn it stands on, newer than the old one,
  matches within ``margin``, that turn replaces it ("I'm in the 1st XI squad for next season!" for
  "which team am I playing in this season?", where "Rohan is in Wolverton Town's 1st XI squad for
  2025" matches less than the old "I play for Wolverton Town, 2nd XI"). Failing both, it still
  replaces an old turn when the superseded fact that links them matches the query as well as the turn
  does: the turn answered with what that fact said ("my email is jo@gmail.com", its fact superseded by
  one an agent wrote as "please use jo@smith.co.uk from now on"). A fact written after the recall's
  present replaces nothing.
* **A newer turn that announces a change** (raw turns, no LLM needed): when a turn leads the ranking,
  the newest later turn of the same speaker that says something changed (``CHANGE_WORDS``: "moved",
  "switched", "anymore", "sorry ... wrong" ...) on a related subject (token vectors matching at least
  ``related_subject``: a cancelled health insurance is no successor to an orchestra) replaces it if
  late interaction or the embedder finds it at least as close to the query, or if it is among the
  first ``places`` (settings ``change_places``) within ``margin`` of the leader's raw MaxSim. Within
  twice that margin among those places, more cues count: the speaker saying they changed something
  ("we moved", ``says_own_change``) on the leader's subject (``same_subject``: the README's "we live
  in Bristol btw" -> "we moved to Edinburgh last week!"), calling new what the leader called theirs
  (``calls_new``: "new number: 0131 ..."), or calling old or denying what it said (``says_otherwise``:
  "the old astra was lucky to get 45"), and at any match a correction or an end naming the leader's
  value (``corrects``: "sorry, it's the 16th not the 14th" leaves out whose birthday; ``ends_value``:
  "finally sold the Fiesta!"); only these replace a leading live fact about the user, said after it
  was written (an agent's "Jo lives in Bristol"), and with such a fact the turns it stands on that were
  said before the newer one ("we moved to Edinburgh!" behind "Sarah lives in Edinburgh", when "we
  moved again, now in Glasgow" replaces it). A turn that says a change happened goes before one only
  cued by the older turn's words, then the newest ("do I need to send the old hub back?" does not
  replace "had enough of virgin, switched to Hyperoptic"). Cues: ``change_cues``.

How far a replaced memory falls depends on the evidence (``put_current_first``): supersession is a
recorded fact, and so is a change the query itself expects (``expects_change``: "now", "these days",
"still" ...): the old memory keeps the share ``outdated`` of its score. A change-announcing turn for any
other present query is a guess from words, so it only swaps places: the newer turn goes just above the
older one, which keeps its score (measured: demoting there cost LoCoMo dev 0.007 R@10; swapping gained
0.004, docs/benchmarks.md "Current truth").

A successor scored 0 cannot be lifted by a multiplier, so such a pair is left alone (the pipeline
keeps the bottom of its min-max-scaled head above 0 for this). Measured on bench/updates.py and LoCoMo
(docs/benchmarks.md, "Current truth").

Only for queries about the present: a query that names a period (``temporal.time_window``) or asks about
the past (``asks_about_past``: "before", "used to", "old", "did" ...) is left as it was, except that a
question about an earlier state ("which phone did I have before this one?") gets the fact a leading
live one superseded, else an older near match, first (``past_first.put_past_first``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

from engram.models import EpisodicMemory, Memory, SemanticMemory, event_time
from engram.retrieval.candidate import Candidate, matches_as_well
from engram.retrieval.change_cues import (
    announces_change,
    asks_of_the_rest,
    calls_new,
    corrects,
    ends_value,
    keeps_what_is_asked,
    repeats,
    says_otherwise,
    says_own_change,
    tells_of_another,
)
from engram.retrieval.own_voice import of_user
from engram.retrieval.scoring import recency, speaker_of
from engram.retrieval.temporal import TimeWindow
from engram.text import user_id_words

MAX_CHAIN = 16  # supersession links followed back from a live fact (a chain is a handful in practice)


def recorded_successors(
    order: Sequence[Candidate],
    superseded: Callable[[list[str]], list[Memory]],
    now: datetime,
    margin: float,
    changed_query: str | None = None,
    stored_match: Callable[[list[SemanticMemory]], dict[str, float]] = lambda facts: {},
) -> dict[str, Candidate]:
    """Old id -> the live fact that supersedes it (or a fact its turn supports), or a turn that live
    fact stands on. ``superseded`` fetches facts by id (the superseded ones a live fact's chain points
    back to); ``now`` is the recall's present: nothing written after it replaces anything. A query
    that expects a change (``changed_query``: "do I still live in Bristol?") names the old value, which
    the live fact does not say: the chain alone decides, not how well the live fact matches the query,
    unless the query asks about something else the old turn said (``asks_of_the_rest``).
    Otherwise, when the live fact does not match as well, the newest turn it stands on that does (and
    is newer than the old one) replaces it; failing that, the live fact still replaces an old turn when
    the superseded fact that links them matches the query as well as the turn (``stored_match``: raw
    MaxSim of those facts, by id, read in the user's own voice): the turn answers the query with what
    that fact said, which is no longer true ("my email is jo@gmail.com" for "what's my email address?",
    its fact superseded by one worded "please use jo@smith.co.uk from now on"; "I drive a Ford Focus"
    for "what car do I drive?", its fact "User drives a Ford Focus" superseded)."""
    found: dict[str, Candidate] = {}
    by_id = {c.memory.id: c for c in order}
    still_said = _live_facts_by_episode(order)
    said_before: dict[str, SemanticMemory] = {}  # old id -> the superseded fact linking it to its successor
    by_what_it_said: dict[str, Candidate] = {}  # old turn id -> successor, if the linking fact matches
    for old_id, new in _by_supersession(order, superseded, said_before).items():
        old = by_id.get(old_id)
        if old is None or event_time(new.memory) > now:
            continue
        # a turn that also said something still true keeps it when the query is about that
        if not all(
            matches_as_well(new, other, 0.0) for other in still_said.get(old_id, []) if other is not new
        ):
            continue
        # "do I still live in Bristol?" asks what the chain replaced, "am I still allergic to peanuts?"
        # what else the turn that said "Bristol" said: then the match decides
        linking = said_before.get(old_id)
        grounds = (linking.text if linking else "") + " " + new.memory.text
        elsewhere = changed_query is not None and asks_of_the_rest(changed_query, old.memory.text, grounds)
        if (changed_query is not None and not elsewhere) or matches_as_well(new, old, margin):
            found[old_id] = new
            continue
        # the live fact is worded unlike the query, but a turn it stands on may say it as the old one did
        assert isinstance(new.memory, SemanticMemory)
        stood_on = (by_id[e] for e in new.memory.supporting_episode_ids if e in by_id)
        said = [
            c
            for c in stood_on
            if event_time(old.memory) < event_time(c.memory) <= now and matches_as_well(c, old, margin)
        ]
        if said:
            found[old_id] = max(said, key=lambda c: event_time(c.memory))
        elif isinstance(old.memory, EpisodicMemory) and linking is not None:
            by_what_it_said[old_id] = new
    if by_what_it_said:
        matches = stored_match(list({said_before[i].id: said_before[i] for i in by_what_it_said}.values()))
        for old_id, new in by_what_it_said.items():
            linked, old_raw = matches.get(said_before[old_id].id), by_id[old_id].late_raw
            if linked is not None and old_raw is not None and linked >= old_raw - margin:
                found[old_id] = new
    return found


def announced_successor(
    order: Sequence[Candidate],
    now: datetime,
    margin: float,
    places: int,
    replaced: Collection[str] = (),
    subject_match: Callable[[Candidate, Candidate], float | None] = lambda new, old: None,
    same_subject: float = 1.01,
    related: float = -1.0,
    askers: Collection[str] = (),
    user_id: str | None = None,
    query: str = "",
) -> tuple[str, Candidate] | None:
    """(leader id, the turn that replaces it) by the module docstring's second rule, or None: the leader
    is a turn, or a live fact of ``user_id`` (``own_voice.of_user``), which only the cued turns replace
    (says_own_change on its subject, calls_new, says_otherwise: a fact is distilled), and not already
    ``replaced``; a turn that asks what the query asks (``askers``) replaces nothing. ``subject_match``
    is how closely two memories' token vectors match (None when unknown): at least ``related`` for a
    change announced by its words (an unknown match counts), at least ``same_subject`` for the speaker's
    own change. Example: "signed up with Helsana ... the German one is cancelled" matches "I play cello
    in an amateur orchestra" 0.66: no successor for "which orchestra do I play in now?" (related 0.70)."""
    old = order[0] if order else None  # a memory is checked for a newer turn only when it leads
    if old is None or old.memory.id in replaced:
        return None
    fact = old.memory
    if turn_led := isinstance(fact, EpisodicMemory):
        at, speaker = fact.timestamp, speaker_of(fact)
    elif isinstance(fact, SemanticMemory) and not fact.superseded_by and of_user(fact.text, user_id):
        # a fact about the user (an agent's "Jo lives in Bristol", not "Maeve's parents live in Belfast"),
        # and a turn said after it was written, which no consolidation has read yet
        at, speaker = max(event_time(fact), fact.created_at), None
    else:
        return None
    stated = () if turn_led else _live_facts_by_episode(order)  # a fact says it: supersession judges
    names = user_id_words(user_id or "")

    def agrees(turn: Candidate) -> bool:  # "we moved to Edinburgh!" after "Sarah lives in Edinburgh"
        return repeats(turn.memory.text, fact.text, query, names)

    later = [
        (place, c)
        for place, c in enumerate(order)
        if isinstance(c.memory, EpisodicMemory)
        and at < c.memory.timestamp <= now
        and speaker_of(c.memory) == speaker  # people update what they said themselves
        and c.memory.id not in askers  # "sorry, what car do I drive again?" announces nothing
        and not tells_of_another(c.memory.text, old.memory.text)  # "my husband switched jobs"
        and (turn_led or not (c.memory.id in stated or c.memory.text.rstrip().endswith("?") or agrees(c)))
    ]
    announced = [
        c
        for place, c in later
        if turn_led
        and announces_change(c.memory.text)
        and _at_least(subject_match(c, old), related, unknown=True)
        and (
            matches_as_well(c, old, 0.0)
            or _embeds_as_close(c, old)
            or (place < places and matches_as_well(c, old, margin))
        )
    ]
    cued = [
        c
        for place, c in later
        if place < places
        and (
            (
                matches_as_well(c, old, 2 * margin)  # not "how thick are my walls?" for a move
                and (
                    (says_own_change(c.memory.text) and _at_least(subject_match(c, old), same_subject))
                    or calls_new(c.memory.text, old.memory.text)
                    or says_otherwise(c.memory.text, old.memory.text)
                )
            )
            # "sorry, it's the 16th not the 14th", "sold the Fiesta": they name the value they correct or
            # end, not what it was of
            or (
                (corrects(c.memory.text, old.memory.text) or ends_value(c.memory.text, old.memory.text))
                and _at_least(subject_match(c, old), related, True)
            )
        )
    ]
    # the newest of those that say a change happened, else of those cued by the old turn's words: after
    # "had enough of virgin, switched to Hyperoptic", "do I need to send the old hub back?" says no more
    newer = [c for c in announced + cued if announces_change(c.memory.text)] or cued
    return (old.memory.id, max(newer, key=lambda c: event_time(c.memory))) if newer else None


def _stood_on(order: Iterable[Candidate], fact_id: str, new: Candidate) -> list[Candidate]:
    """The turns among ``order`` that the fact ``fact_id`` stands on, said before ``new`` (none when
    ``fact_id`` is a turn): a newer move that replaced "Sarah lives in Edinburgh" replaced the
    "we moved to Edinburgh!" behind it too (a newcomer's walk: that turn looked current at 0.50)."""
    fact = next((c.memory for c in order if c.memory.id == fact_id), None)
    stands_on = set(fact.supporting_episode_ids) if isinstance(fact, SemanticMemory) else set()
    return [c for c in order if c.memory.id in stands_on and event_time(c.memory) < event_time(new.memory)]


def _at_least(match: float | None, threshold: float, unknown: bool = False) -> bool:
    return unknown if match is None else match >= threshold


def _live_facts_by_episode(order: Iterable[Candidate]) -> dict[str, list[Candidate]]:
    """Episode id -> the live facts among the candidates that it supports."""
    by_episode: dict[str, list[Candidate]] = {}
    for c in order:
        if isinstance(c.memory, SemanticMemory) and c.memory.superseded_by is None:
            for episode_id in c.memory.supporting_episode_ids:
                by_episode.setdefault(episode_id, []).append(c)
    return by_episode


def _by_supersession(
    order: Iterable[Candidate],
    superseded: Callable[[list[str]], list[Memory]],
    said_before: dict[str, SemanticMemory] | None = None,
) -> dict[str, Candidate]:
    """Episodes (and superseded facts) replaced by the live facts among the candidates, by following
    each live fact's chain of ``supersedes`` back and collecting the supporting episodes on it; fills
    ``said_before`` with the superseded fact that links each to its successor."""
    said_before = {} if said_before is None else said_before
    found: dict[str, Candidate] = {}
    live = [
        c
        for c in order
        if isinstance(c.memory, SemanticMemory) and c.memory.superseded_by is None and c.late_raw is not None
    ]
    pointer = {c.memory.id: c.memory.supersedes for c in live if isinstance(c.memory, SemanticMemory)}
    heir = {c.memory.id: c for c in live}
    for _ in range(MAX_CHAIN):
        wanted = {old: heir[new] for new, old in pointer.items() if old}
        if not wanted:
            break
        pointer = {}
        for fact in superseded(sorted(wanted)):
            if not isinstance(fact, SemanticMemory):
                continue
            successor = wanted[fact.id]
            found.setdefault(fact.id, successor)
            said_before.setdefault(fact.id, fact)
            assert isinstance(successor.memory, SemanticMemory)
            still_supported = set(successor.memory.supporting_episode_ids)  # a turn that says both
            for episode_id in fact.supporting_episode_ids:
                if episode_id not in still_supported:
                    found.setdefault(episode_id, successor)
                    said_before.setdefault(episode_id, fact)
            heir[fact.id] = successor
            pointer[fact.id] = fact.supersedes
    return found


def _embeds_as_close(new: Candidate, old: Candidate) -> bool:
    """``new.dense >= old.dense``: the embedder finds the newer turn at least as close to the query."""
    return new.dense_score is not None and old.dense_score is not None and new.dense_score >= old.dense_score


def put_current_first(
    order: list[Candidate],
    superseded: Callable[[list[str]], list[Memory]],
    now: datetime,
    *,
    margin: float,
    outdated: float,
    places: int = 0,
    change_expected: bool = False,
    query: str = "",
    subject_match: Callable[[Candidate, Candidate], float | None] = lambda new, old: None,
    same_subject: float = 1.01,
    related: float = -1.0,
    askers: Collection[str] = (),
    stored_match: Callable[[list[SemanticMemory]], dict[str, float]] = lambda facts: {},
    half_life_days: float = 0.0,
    user_id: str | None = None,
) -> dict[str, str]:
    """Re-rank ``order`` (final order, best first) in place and return old id -> successor id.

    A successor that scores below what it replaces gets ``update_lift = old.final / new.final x 1.001``,
    so it ranks just above it. What it replaces gets the multiplier ``outdated`` (in (0, 1]) when the
    evidence is recorded (supersession) or the query expects a change (``change_expected``), else keeps
    its score (module docstring). Example: Bristol turn 0.66, Edinburgh fact 0.055, outdated 0.5 -> the
    fact 0.661 (lift 12.0), the turn 0.33. Then, for a query that expects a change, the turns' recency
    (``put_recent_first``, with ``half_life_days``; 0: off).
    """
    changed_query = query if change_expected else None
    recorded = recorded_successors(order, superseded, now, margin, changed_query, stored_match)
    announced = announced_successor(
        order, now, margin, places, recorded, subject_match, same_subject, related, askers, user_id, query
    )
    if announced and keeps_what_is_asked(announced[1].memory.text, query):  # "..., same flat though"
        announced = None
    found = recorded | dict([announced]) if announced else recorded
    if announced:  # the turns a replaced fact stands on said what it said ("we moved to Edinburgh!")
        found = {c.memory.id: announced[1] for c in _stood_on(order, *announced)} | found
    pairs = {old: new for old, new in found.items() if new.final > 0}
    by_id = {c.memory.id: c for c in order}
    for old_id, new in sorted(pairs.items(), key=lambda p: -by_id[p[0]].final):  # a chain: highest first
        old = by_id[old_id]
        if new.final < old.final:
            new.multipliers["update_lift"] = new.multipliers.get("update_lift", 1.0) * (
                old.final / new.final * 1.001
            )
    for old_id in pairs:
        if old_id in recorded or change_expected:
            by_id[old_id].multipliers["outdated"] = outdated
    order.sort(key=lambda c: -c.final)
    if change_expected and half_life_days > 0:
        put_recent_first(order, now, half_life_days, askers)
    return {old_id: new.memory.id for old_id, new in pairs.items()}


def turns_behind(outdated_by: dict[str, str], order: Sequence[Candidate]) -> list[tuple[str, str]]:
    """(old id, turn id) and (fact id, turn id) for each turn among ``order`` that a live fact replacing
    the old one stands on, said after the old one: it says what that fact says, so it answers what the
    old one and the fact answer (the demo's "big news - we moved to Edinburgh last week!" behind "Sarah
    lives in Edinburgh (Leith)", which replaced "we live in Bristol btw": its confidence 0.06 fell below
    the default threshold while the outdated turn's 0.25 did not; then 0.15, or 0.41 when the superseded
    fact was among the hits: the fact's own 0.45 both times now)."""
    by_id = {c.memory.id: c.memory for c in order}
    pairs = []
    for old_id, new_id in outdated_by.items():
        old, new = by_id.get(old_id), by_id.get(new_id)
        if old is None or not isinstance(new, SemanticMemory):
            continue
        for turn_id in new.supporting_episode_ids:
            turn = by_id.get(turn_id)
            if isinstance(turn, EpisodicMemory) and event_time(turn) > event_time(old):
                pairs += [(old_id, turn_id), (new_id, turn_id)]
    return pairs


def put_invalid_below(order: list[Candidate], when: datetime | TimeWindow, factor: float) -> None:
    """A fact whose recorded validity does not cover ``when`` (the present: its ``valid_to`` has passed,
    or its ``valid_from`` is still ahead; or a period the query names: it ended before the period or
    began after it) takes the multiplier ``validity = factor``, as a replaced memory takes
    ``outdated``, and ``order`` is sorted again: "Sam's office is in Canary Wharf", valid until last
    month, is not where the office is now, and "User lives in Glasgow", valid from 2025-09, is not
    where they lived in March 2024 (an outside review; a start counts against a period only for a fact
    that replaced another: ``valid_from`` is mostly when it was said). A month of any year moves nothing;
    a question about the past without a period sees it as it ranks (the caller's rule)."""
    if isinstance(when, TimeWindow):
        if when.start is None or when.end is None:
            return
        start, end, period = when.start, when.end, True
    else:
        start, end, period = when, when, False
    for c in order:
        m = c.memory
        if not isinstance(m, SemanticMemory):
            continue
        # a fact's valid_from is mostly when it was said ("lived in Leeds since 2015", written from a
        # 2025 turn): against a period, it tells when a value began only for one that replaced another
        began = m.valid_from is not None and m.valid_from > end and (not period or m.supersedes is not None)
        if began or (m.valid_to is not None and m.valid_to <= start):
            c.multipliers["validity"] = factor
    order.sort(key=lambda c: -c.final)


def put_recent_first(
    order: list[Candidate], now: datetime, half_life_days: float, skip: Collection[str]
) -> None:
    """For a question that expects a change ("what night is five-a-side these days?": ``expects_change``),
    every raw turn takes ``recency = 0.5 ** (age / half_life_days)`` (``scoring.recency``; age at
    ``now``), then the rows are re-ordered among the places of their own stage (the reranked among the
    reranked places, the late-interaction-only among theirs...): of two turns one stage scored close,
    the newer goes first, and a row a stage left unread never passes one it judged (tiers touch at
    their edges after ``keep_scores_ordered``, which would make any age tip them). Scores are then
    kept falling with rank (a row that now outscores the one above it is scaled just under it,
    ``stage_scale``). Facts are left as they are: a live fact is current by construction (the
    rules above order it against the turns it replaced), and so are playbooks and catalog rows, which
    have no event of their own, and a turn that asks what the query asks (``skip``; the caller puts
    it below the others again, ``contenders.put_askers_below``).

    Measured: docs/benchmarks.md, "A question that expects a change". A year's age: 0.88 at 2000 days.
    """
    for c in order:
        if isinstance(c.memory, EpisodicMemory) and c.memory.id not in skip:
            age_days = (now - c.memory.timestamp).total_seconds() / 86_400
            c.multipliers["recency"] = recency(age_days, half_life_days)
    places: dict[str, list[int]] = {}
    for i, c in enumerate(order):
        places.setdefault(c.stage, []).append(i)
    for at in places.values():
        for i, c in zip(at, sorted((order[i] for i in at), key=lambda c: -c.final), strict=True):
            order[i] = c
    for above, c in itertools.pairwise(order):  # scores keep falling with rank: one scaled under
        if c.final >= above.final > 0:
            c.multipliers["stage_scale"] = (
                c.multipliers.get("stage_scale", 1.0) * above.final / c.final * 0.999
            )
