"""Which candidates the cross-encoder scores: the contested places of the window, not all of it.

After late interaction, a leading raw turn far ahead of the rest by raw MaxSim keeps its place under
the cross-encoder far more often than not, and where the cross-encoder reorders a long window of
chatty turns it trades as many right answers away as it finds. Among the LoCoMo dev questions where it
moved the first gold turn, it helped in 130 and hurt in 128; those it helped had a median margin of
0.006 between the two leading raw MaxSims, those it left alone 0.019. On distilled memories (facts,
playbooks, catalog items: short, cheap to score) it is worth its cost: skipping it whenever a turn
led cost R@1 and MRR on the evaluation corpus's dev split (0.676 -> 0.662, 0.786 -> 0.774), but there
it is the gap that was too narrow: a window holding a distilled memory scored over the leader's
near-ties within a wider gap (0.05) ranks as the whole window did (own dev R@1 / R@5 / MRR 0.704 /
0.934 / 0.802 vs 0.704 / 0.934 / 0.805, agent-voice dev the same to the third decimal) with 41% fewer
pairs. A window's leader is always scored, so its confidence comes from the cross-encoder: the
calibration of a raw-turn leader left unscored put unrelated leaders of small stores at 0.3-0.5 ("what
car do I drive?" -> "I have two kids, Sam and Lily", 0.32), where the cross-encoder says 0.04.
Measured on the development sets in docs/benchmarks.md ("Cross-encoder on near-ties", "Distilled
windows", "The leader is always judged").
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

from engram.models import EpisodicMemory
from engram.retrieval.candidate import Candidate
from engram.retrieval.change_cues import asks_about_past
from engram.text import content_stems

# a sentence that ends in a question mark, matched from sentence starts only (linear in the text)
_QUESTION = re.compile(r"(?:^|(?<=[?.!\n]))[^?.!\n]*\?")
_TOKEN = re.compile(r"[\w'’-]+")
_SELF = frozenset("i i'm i've i'd i'll i’m i’ve i’d i’ll".split())  # noqa: SIM905 capitalised, naming nothing
# A day or month names a value however it is written ("now that it moved to wednesdays?"); not "may",
# "march", "august" in lower case, which are words first ("may I ask, what car do I drive?")
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()  # noqa: SIM905
_MONTHS = "january february april june july september october november december".split()  # noqa: SIM905
_CALENDAR = frozenset([*_DAYS, *(day + "s" for day in _DAYS), *_MONTHS])


def contenders(
    window: Sequence[Candidate],
    gap: float,
    query: str,
    distilled_gap: float = 1.0,
    aside: Collection[str] = (),
) -> int:
    """How many of the window's leading candidates the cross-encoder should score (the first ``n``).

    A window led by ``window[0]`` (the head's best after late interaction and the multipliers):
    ``n = |{i : late_raw_i >= late_raw_0 - gap}|``, the near-ties of the leader, or more when both legs
    put one row first that late interaction did not (``n >= its place + 1``: an exact error code or
    name that BM25 and the embedder agree on, where MaxSim is a hair off), and at least the leader
    (``n >= 1``), for its confidence. A window holding a distilled memory (fact, playbook, catalog
    item) counts near-ties within ``distilled_gap`` instead. The
    count says how many places are contested, the head's order which rows hold them (scoring the
    prefix through the last near-tie instead cost pairs and measured no better). The whole window
    when a raw score is missing or not finite (late interaction off, failed, or skipped).

    Leading echoes of the query (a turn whose text is the query itself, ignoring case and surrounding
    space) and turns that ask it (``aside``: ``set_aside_askers``) are scored with the contenders but do
    not lead them: an agent writes the user's turn, then recalls by its words, and that turn, first by
    far, would otherwise leave every recall uncontested (or, asked twice, take the places the answer
    needed: "where do I live again?" over "Sarah lives in Bristol", a newcomer's walk).

    Example (turns): raw MaxSims [0.86, 0.85, 0.80, 0.855], gap 0.015 -> 3 (three within 0.015 of the
    leader); [0.86, 0.82, 0.80] -> 1 (the leader alone), or 3 when both legs rank the third first; an
    echo then [0.76, 0.755] -> 3. The same rows holding a fact, distilled gap 0.05: 3; [0.86, 0.70] -> 1.
    """
    echoes = 0
    while echoes < len(window) and (is_echo(window[echoes], query) or window[echoes].memory.id in aside):
        echoes += 1
    rest = window[echoes:]
    raws = [c.late_raw for c in rest]
    if any(r is None or not math.isfinite(r) for r in raws):
        return len(window)
    if not rest:  # nothing but the query's own turn, or turns that ask it: those are read (their confidence)
        return 0 if all(is_echo(c, query) for c in window) else echoes
    distilled = any(not isinstance(c.memory, EpisodicMemory) for c in rest)
    leader = raws[0]
    assert leader is not None
    n = sum(1 for r in raws if r is not None and r >= leader - (distilled_gap if distilled else gap))
    agreed = _first_by_both_legs(rest)
    if agreed is not None:
        n = max(n, agreed + 1)
    return echoes + n  # n >= 1: the leader is its own near-tie


def is_echo(candidate: Candidate, query: str) -> bool:
    """Whether a candidate is a turn whose text is the query itself (ignoring case and surrounding space)."""
    memory = candidate.memory
    return isinstance(memory, EpisodicMemory) and memory.text.strip().casefold() == query.strip().casefold()


def asks_the_query(text: str, query: str) -> bool:
    """Whether a turn asks what the query asks, and says little else: one of its questions (a sentence
    ending in "?") shares with the query at least two content words by light stem, two thirds of the
    fewer of the two, and holds at least a third of the turn's content words; and the turn names
    nothing the query does not (``_named``: "is the wifi password BTHub-4821?" confirms a value). A
    user's question tells nothing of its answer, yet the cross-encoder scores it as if it did: "what
    car do I drive? the insurance form asks" got 0.68 where "ok I bought a Skoda Octavia estate" got
    0.09. Examples for the query "what car do I drive?": "hey, quick one - what car do I drive again?"
    -> True; "what car should I buy for a family of four?" -> False (one word shared); "do you think
    my Skoda Octavia is a good car to drive in snow?" -> False (names something). A query of one
    content word ("where do I live?") has no such turns: one shared word is a question on the subject,
    which often tells ("my sister Magda is coming over, what should we do?")."""
    if "?" not in text:
        return False
    asked = content_stems(query)
    if not asked:
        return False
    told = content_stems(text)
    if not _named(text) <= _named(query):
        return False
    for found in _QUESTION.finditer(text):
        question = content_stems(found.group(0))
        shared = len(question & asked)
        if (
            # one word: the same question and nothing else ("where do I live again?"; not "who's my gp? dr
            # patel", which answers it: an outside review)
            (shared >= 2 or question == asked == told)
            and shared >= 2 / 3 * min(len(question), len(asked))
            and 3 * len(question) >= len(told)
        ):
            return True
    return False


def _named(text: str) -> set[str]:
    """What a text names beyond common words (casefolded): its tokens with a digit, its days and months
    however written, and its capitalised words past a sentence's start but "I". "is the wifi password
    BTHub-4821?" -> {"bthub-4821"}; "Is my Skoda ok? I drive it daily" -> {"skoda"}; "now that it
    moved to wednesdays?" -> {"wednesdays"}."""
    named: set[str] = set()
    end = 0
    for found in _TOKEN.finditer(text):
        word, starts = found.group(0), end == 0 or any(ch in ".?!:\n" for ch in text[end : found.start()])
        end = found.end()
        if (
            any(ch.isdigit() for ch in word)
            or (word[0].isupper() and not starts and word.casefold() not in _SELF)
            or word.casefold() in _CALENDAR
        ):
            named.add(word.casefold())
    return named


def set_aside_askers(order: list[Candidate], query: str, factor: float, places: int) -> set[str]:
    """Multiply by ``factor`` (multiplier ``asked``) the turns of ``order`` (one stage's ranking) that
    ask what the query asks (``asks_the_query``), re-sort ``order`` in place and return their ids.
    Done before the cross-encoder's window is chosen, so that it judges what could answer; only the
    first ``places`` and the turns that rise into them count, which one pass over the first ``places``
    plus as many more as it set aside covers. Not for a question about the past ("what did I ask you
    about the car I drive?" is answered by the question), nor with a factor of 1."""
    if factor >= 1 or asks_about_past(query):
        return set()
    asker_ids: set[str] = set()
    end = places
    for place, c in enumerate(order):
        if place >= end:
            break
        if isinstance(c.memory, EpisodicMemory) and asks_the_query(c.memory.text, query):
            c.multipliers["asked"] = factor
            asker_ids.add(c.memory.id)
            end += 1  # the next one rises into the first places
    if asker_ids:
        order.sort(key=lambda c: -c.final)
    return asker_ids


def put_askers_below(order: list[Candidate], asker_ids: set[str], places: int) -> None:
    """After the last stage: each of ``asker_ids`` among the first ``places`` of ``order`` (the final
    ranking) that still outscores a turn that tells goes just below the lowest such turn there (its
    ``asked`` multiplier scaled by ``lowest / its final x 0.999``); re-sorts ``order`` in place. The
    factor alone is not enough where the cross-encoder scored the question 0.96 and the answer "ok I
    bought a Skoda Octavia estate" 0.0006."""
    tellers = [c.final for c in order[:places] if c.memory.id not in asker_ids and c.final > 0]
    if not tellers:
        return
    floor = min(tellers)
    for c in order[:places]:
        if c.memory.id in asker_ids and c.final >= floor:
            c.multipliers["asked"] = c.multipliers.get("asked", 1.0) * floor / c.final * 0.999
    order.sort(key=lambda c: -c.final)


def _first_by_both_legs(rest: Sequence[Candidate]) -> int | None:
    """The place in ``rest`` of the row that both BM25 and the dense leg rank best among ``rest``, if
    there is one such row (one leg may have missed the others, never that one)."""
    by_text = min(range(len(rest)), key=lambda i: rest[i].bm25_rank or math.inf)
    by_meaning = min(range(len(rest)), key=lambda i: rest[i].dense_rank or math.inf)
    both = rest[by_text]
    if by_text == by_meaning and both.bm25_rank is not None and both.dense_rank is not None:
        return by_text
    return None
