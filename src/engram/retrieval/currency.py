"""Current truth first: when a newer memory replaces what an older one said, a question about the
present gets the newer one first, and the older one is marked ``outdated_by`` it.

Two kinds of evidence that one candidate replaces another (``successors``):

* **Supersession** (after consolidation or an agent's write): a live fact that supersedes, directly or
  down its chain, a fact that an episode supports replaces that episode ("we live in Bristol btw"
  supports "Sarah lives in Bristol", superseded by "Sarah lives in Leith, Edinburgh"); a superseded
  fact shown with ``include_superseded`` is replaced by the live fact at the end of its chain. The
  live fact must match the query nearly as well as what it replaces (raw MaxSim at least the old one's
  less ``margin``): it replaces the Bristol turn for "where do I live?", not for "how thick are my walls?".
* **A newer turn that announces a change** (raw turns, no LLM needed): when a turn leads the ranking,
  the newest later turn that says something changed (``CHANGE_WORDS``: "moved", "switched", "no more",
  "sorry ... wrong" ...) and that late interaction or the embedder finds at least as close to the query
  replaces it.

Measured on bench/updates.py (dev split, docs/benchmarks.md): raw turns current@1 0.32 -> 0.54, stale
ranked above the current turn 43% -> 25% of "current" questions, "unchanged" and "past" unchanged; with
consolidated facts current@1 0.71 -> 0.86, stale above 18% -> 7%.

Only for queries about the present: a query that names a period (``temporal.time_window``) or asks about
an earlier state (``asks_about_past``: "before", "used to", "old", "did" ...) is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from engram.models import EpisodicMemory, Memory, SemanticMemory, event_time
from engram.retrieval.candidate import Candidate
from engram.retrieval.scoring import speaker_of
from engram.text import query_words

# A question with one of these asks about an earlier state; past tense ("where did I live?") included.
PAST_WORDS = frozenset(
    "before previous previously prior former formerly old older originally original earlier used ago "  # noqa: SIM905
    "first did was were had ever".split()
)
# ... unless it also says it wants the present ("what did I say my new address was?").
PRESENT_WORDS = frozenset("now current currently new these still latest today anymore".split())  # noqa: SIM905
# A turn with one of these announces a change ("we moved...", "switched to", "no more nights", "sorry, I
# got it wrong"). Without this test, any newer turn that matched as well replaced the top one, and the
# "unchanged" questions of bench/updates.py lost most of their R@1 to newer chatter (docs/benchmarks.md).
CHANGE_WORDS = frozenset(
    "moved moving switched switching swapped changed replaced traded upgraded quit promoted adopted sold "  # noqa: SIM905
    "anymore longer instead actually sorry wrong dropped stopped gave broke".split()
)
MAX_CHAIN = 16  # supersession links followed back from a live fact (a chain is a handful in practice)


def asks_about_past(query: str) -> bool:
    """Whether the query asks about an earlier state rather than the present.

    Examples: "where did I live before?" -> True; "where do I live now?" -> False; "what did I say
    my new address was?" -> False (it wants the present).
    """
    words = query_words(query)
    return bool(words & PAST_WORDS) and not words & PRESENT_WORDS


def announces_change(text: str) -> bool:
    """Whether a turn says that something changed. Example: "we moved to Edinburgh last week!" -> True."""
    return bool(query_words(text) & CHANGE_WORDS)


def successors(
    order: Sequence[Candidate],
    superseded: Callable[[list[str]], list[Memory]],
    now: datetime,
    margin: float,
) -> dict[str, Candidate]:
    """Which candidate replaces which: old id -> successor (module docstring). ``superseded`` fetches
    facts by id (the superseded ones a live fact's chain points back to); ``now`` is the recall's
    present: nothing said after it replaces anything."""
    found: dict[str, Candidate] = {}
    by_id = {c.memory.id: c for c in order}
    for old_id, new in _by_supersession(order, superseded).items():
        if old_id in by_id and _matches_as_well(new, by_id[old_id], margin):
            found[old_id] = new
    old = order[0] if order else None  # a turn is checked for a newer one only when it leads
    if old is not None and old.memory.id not in found and isinstance(old.memory, EpisodicMemory):
        at, speaker = old.memory.timestamp, speaker_of(old.memory)
        newer = [
            c
            for c in order
            if isinstance(c.memory, EpisodicMemory)
            and at < c.memory.timestamp <= now
            and speaker_of(c.memory) == speaker  # people update what they said themselves
            and announces_change(c.memory.text)
            and (_matches_as_well(c, old, 0.0) or _embeds_as_close(c, old))
        ]
        if newer:
            found[old.memory.id] = max(newer, key=lambda c: event_time(c.memory))
    return found


def _by_supersession(
    order: Iterable[Candidate], superseded: Callable[[list[str]], list[Memory]]
) -> dict[str, Candidate]:
    """Episodes (and superseded facts) replaced by the live facts among the candidates, by following
    each live fact's chain of ``supersedes`` back and collecting the supporting episodes on it."""
    found: dict[str, Candidate] = {}
    live = [c for c in order if isinstance(c.memory, SemanticMemory) and c.memory.superseded_by is None]
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
            assert isinstance(successor.memory, SemanticMemory)
            still_supported = set(successor.memory.supporting_episode_ids)  # a turn that says both
            for episode_id in fact.supporting_episode_ids:
                if episode_id not in still_supported:
                    found.setdefault(episode_id, successor)
            heir[fact.id] = successor
            pointer[fact.id] = fact.supersedes
    return found


def _embeds_as_close(new: Candidate, old: Candidate) -> bool:
    """``new.dense >= old.dense``: the embedder finds the newer turn at least as close to the query."""
    return new.dense_score is not None and old.dense_score is not None and new.dense_score >= old.dense_score


def _matches_as_well(new: Candidate, old: Candidate, margin: float) -> bool:
    """``new.late_raw >= old.late_raw - margin``; False without both scores (late interaction off)."""
    return new.late_raw is not None and old.late_raw is not None and new.late_raw >= old.late_raw - margin


def put_current_first(
    order: list[Candidate],
    superseded: Callable[[list[str]], list[Memory]],
    now: datetime,
    *,
    margin: float,
    outdated: float,
) -> dict[str, str]:
    """Re-rank ``order`` (final order, best first) in place and return old id -> successor id.

    Each replaced candidate gets the multiplier ``outdated`` (in (0, 1]); a successor that scores
    below what it replaces gets ``update_lift = old.final / new.final x 1.001`` first, so it ranks just
    above it. Example: Bristol turn 0.66, Edinburgh fact 0.055, outdated 0.5 -> the fact 0.661 (lift
    12.0), the turn 0.33.
    """
    pairs = successors(order, superseded, now, margin)
    for old_id, new in sorted(pairs.items(), key=lambda p: -_final(order, p[0])):
        old = next(c for c in order if c.memory.id == old_id)
        if 0 < new.final < old.final:
            new.multipliers["update_lift"] = new.multipliers.get("update_lift", 1.0) * (
                old.final / new.final * 1.001
            )
    for old_id in pairs:
        next(c for c in order if c.memory.id == old_id).multipliers["outdated"] = outdated
    order.sort(key=lambda c: -c.final)
    return {old_id: new.memory.id for old_id, new in pairs.items()}


def _final(order: Sequence[Candidate], memory_id: str) -> float:
    return next(c.final for c in order if c.memory.id == memory_id)
