"""A question about an earlier state gets what was true before first: "which phone did I have before
this one?" is answered by the phone a newer one replaced, not by the newer one that matches it better.
The pipeline asks this for queries that ``change_cues.asks_about_earlier_state``; ``currency`` puts the
current truth first for the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from engram.models import event_time
from engram.retrieval.candidate import Candidate, matches_as_well
from engram.retrieval.change_cues import CHANGE_WORDS, announces_change, calls_new, word_stems
from engram.text import NAME_TITLES, content_stems


def put_past_first(
    order: list[Candidate],
    query: str,
    margin: float,
    places: int,
    subject_match: Callable[[Candidate, Candidate], float | None] = lambda new, old: None,
    related: float = 1.01,
) -> dict[str, str]:
    """For a question about an earlier state (``asks_about_earlier_state``), put what was true before
    first, by ``past_lift = leader.final / its final x 1.001``; returns {leader id: its id}, or {}.
    A superseded leader was true before: it stays first, unless a word of it follows "before" ("which
    phone did I have before the iPhone?"; not "before my current phone"): an outside review's chain
    Pixel -> iPhone -> Galaxy gave the Pixel for "what phone did I have before?".

    * **Recorded:** when the leader, or a live memory among the first ``places`` that matches the
      query nearly as well (raw MaxSim within ``margin``), supersedes a candidate (a question about the
      past sees superseded facts), that one goes first, however it matches:
      "who was my broadband with before hyperoptic?" is answered by the superseded "Fiona's broadband
      is Virgin Media", not by "Fiona's broadband is Hyperoptic" that the query names. A retracted
      fact (never true) answers nothing.
    * **Guessed:** else, when a memory older than the leader is among the first ``places`` and matches
      the query nearly as well (raw MaxSim within ``margin``; twice that when the leader announces a
      change or calls new what it called the speaker's: "got a new phone, my number is now ..." for
      "what was my old phone number?"), the best ranked such one: "which phone did I have before this
      one?" is answered by the iPhone turn, not by the newer "the night mode on the new phone is
      unreal" that outscored it.
    * **Counted back from what came after:** else, when the question names it ("where did I work
      before Fernway?", ``_counted_from``) and the leader says it, the best ranked of the first ``2 x
      places`` said before any of them first said it, on the leader's subject (``subject_match``, token
      vectors, at least ``related``), goes second, below the leader: that one often tells of the change
      and may name what came before ("bought the new car!! the león went") or not ("got offered a job
      at Fernway Foods"), with the leader's confidence when it is near the query (``_put_second``).
      Measured on bench/updates.py: first place won 10 dev questions and lost 4 of another writer's,
      second wins 3 and loses none.
    """
    leader = order[0] if order else None
    if leader is None:
        return {}
    if getattr(leader.memory, "superseded_by", None) and not _named_after_before(query) & word_stems(
        leader.memory.text
    ):
        return {}
    by_id = {c.memory.id: c for c in order}
    live = [c for c in order[:places] if getattr(c.memory, "superseded_by", None) is None]
    recorded = [
        by_id[before]
        for c in live
        if live[0] is leader  # a superseded leader already tells what was true before
        and (c is leader or matches_as_well(c, leader, margin))  # the leader's subject, not any chain
        and (before := getattr(c.memory, "supersedes", None)) in by_id
        and not getattr(by_id[before].memory, "retracted", False)
    ]
    # a leader that says it is new ("got a new phone, my number is now ...") tells of what it replaced
    changed = announces_change(leader.memory.text)
    older = [
        c
        for c in order[1:places]
        if event_time(c.memory) < event_time(leader.memory)
        and c.final > 0
        and (
            matches_as_well(c, leader, margin)
            or (
                matches_as_well(c, leader, 2 * margin)
                and (changed or calls_new(leader.memory.text, c.memory.text))
            )
        )
    ]
    chosen = next((c for c in recorded + older if c.final > 0), None)
    if chosen is None and len(order) > 1:
        found = _said_before(order[: 2 * places], _counted_from(query), subject_match, related)
        return _put_second(order, found, margin)
    if chosen is None or chosen is leader:
        return {}
    chosen.multipliers["past_lift"] = leader.final / chosen.final * 1.001
    order.sort(key=lambda c: -c.final)
    return {leader.memory.id: chosen.memory.id}


# what a question counts back from: "before the iPhone"; not "before my current phone" (the live one)
_BEFORE_WORD = r"\b(?:before|prior\s+to)\s+(?!(?:(?:the|my|our|this)\s+)?(?:current|new|latest|present)\b)"
_BEFORE = re.compile(_BEFORE_WORD + r"((?:[\w'’-]+\s+){0,2}[\w'’-]+)", re.IGNORECASE)
# ... up to the clause's end, and what names no value: how it came ("before he moved to Manchester"),
# a title ("before Dr Khan"), "one" ("before this one")
_COUNTED_FROM = re.compile(_BEFORE_WORD + r"((?:[\w'’-]+\s+){0,5}[\w'’-]+)", re.IGNORECASE)
_HOW_IT_CAME = frozenset("bought buying got getting started joined took went one".split())  # noqa: SIM905
_NAMES_NO_VALUE = _HOW_IT_CAME | CHANGE_WORDS | NAME_TITLES


def _named_after_before(query: str) -> set[str]:
    """The stems (``word_stems``) of the few words after "before": what the question counts back from
    ("before the iPhone" -> {"iphone"}; "before the promotion" names "promoted"; "what did I have
    before?" -> set())."""
    return {stem for found in _BEFORE.findall(query) for stem in word_stems(found)}


def _counted_from(query: str) -> set[str]:
    """The stems (``content_stems``) of the value a question counts back from, without how it came:
    "where did I live before moving in with nico?" -> {"nico"}; "before I moved" -> set()."""
    words = (w for found in _COUNTED_FROM.findall(query) for w in found.split())
    return content_stems(" ".join(w for w in words if w.lower() not in _NAMES_NO_VALUE))


def _said_before(
    head: list[Candidate],
    named: set[str],
    subject_match: Callable[[Candidate, Candidate], float | None],
    related: float,
) -> Candidate | None:
    """The best ranked of ``head`` after its leader, on the leader's subject (``subject_match`` at least
    ``related``), said before the first row on that subject that says every word of ``named``; None
    unless the leader says them. Every word: "food shop done" says nothing of "Fernway Foods"; on the
    subject: "my cousin just started at fernway" tells nothing of the user's job (an outside review)."""
    leader = head[0]

    def says(c: Candidate) -> bool:
        return named <= content_stems(c.memory.text)

    def on_subject(c: Candidate) -> bool:
        return (match := subject_match(c, leader)) is not None and match >= related

    if not named or not says(leader):
        return None
    first = min(event_time(c.memory) for c in head if says(c) and (c is leader or on_subject(c)))
    return next((c for c in head[1:] if event_time(c.memory) < first and c.final > 0 and on_subject(c)), None)


def _put_second(order: list[Candidate], found: Candidate | None, margin: float) -> dict[str, str]:
    """Scale ``found`` (``past_lift``) to rank just below the leader; {leader id: its id} when it sits
    second and matches the query within twice ``margin`` of the leader (raw MaxSim): it answers as the
    leader does, which an agent's confidence threshold would miss otherwise; not for "had a lovely
    roast at my mum's today", which token vectors put on a job's subject (outside reviews)."""
    if found is None:
        return {}
    if found is not order[1]:
        found.multipliers["past_lift"] = min(order[1].final * 1.001, order[0].final * 0.999) / found.final
        order.sort(key=lambda c: -c.final)
    near = found is order[1] and matches_as_well(found, order[0], 2 * margin)
    return {order[0].memory.id: found.memory.id} if near else {}
