"""A question about an earlier state gets what was true before first: "which phone did I have before
this one?" is answered by the phone a newer one replaced, not by the newer one that matches it better.
The pipeline asks this for queries that ``change_cues.asks_about_earlier_state``; ``currency`` puts the
current truth first for the others.
"""

from __future__ import annotations

import re

from engram.models import event_time
from engram.retrieval.candidate import Candidate, matches_as_well
from engram.retrieval.change_cues import announces_change, calls_new, word_stems


def put_past_first(order: list[Candidate], query: str, margin: float, places: int) -> dict[str, str]:
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
    if chosen is None or chosen is leader:
        return {}
    chosen.multipliers["past_lift"] = leader.final / chosen.final * 1.001
    order.sort(key=lambda c: -c.final)
    return {leader.memory.id: chosen.memory.id}


# what a question counts back from: "before the iPhone"; not "before my current phone" (the live one)
_BEFORE = re.compile(
    r"\b(?:before|prior\s+to)\s+(?!(?:(?:the|my|our|this)\s+)?(?:current|new|latest|present)\b)"
    r"((?:[\w'’-]+\s+){0,2}[\w'’-]+)",
    re.IGNORECASE,
)


def _named_after_before(query: str) -> set[str]:
    """The stems (``word_stems``) of the few words after "before": what the question counts back from
    ("before the iPhone" -> {"iphone"}; "before the promotion" names "promoted"; "what did I have
    before?" -> set())."""
    return {stem for found in _BEFORE.findall(query) for stem in word_stems(found)}
