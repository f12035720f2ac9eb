"""The cross-encoder scores the leader's near-ties only (engram.retrieval.contenders)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.models import EpisodicMemory, Memory, SemanticMemory
from engram.retrieval.candidate import Candidate
from engram.retrieval.contenders import asks_the_query, contenders, put_askers_below, set_aside_askers

AT = datetime(2026, 6, 1, tzinfo=UTC)


def head(
    *raws: float | None,
    texts: tuple[str, ...] = (),
    fact_at: int | None = None,
    firsts_by_both_legs: int | None = None,
) -> list[Candidate]:
    out = []
    for i, raw in enumerate(raws):
        text = texts[i] if i < len(texts) else f"turn {i}"
        memory: Memory = EpisodicMemory(
            id=f"epi_{i:022d}", text=text, user_id="u", created_at=AT, timestamp=AT
        )
        if i == fact_at:
            memory = SemanticMemory(id=f"sem_{i:022d}", text=text, user_id="u", created_at=AT)
        legs = 1 if i == firsts_by_both_legs else 2 + i  # the legs' ranks
        out.append(Candidate(memory=memory, rrf=1.0, late_raw=raw, bm25_rank=legs, dense_rank=legs))
    return out


@pytest.mark.parametrize(
    ("raws", "gap", "expected"),
    [
        ((0.86, 0.85, 0.80, 0.855), 0.015, 3),  # the docstring's example: three near-ties, first three scored
        ((0.86, 0.82, 0.80), 0.015, 1),  # a clear leader: nothing to decide but its confidence
        ((0.86,), 0.015, 1),  # one row: its confidence
        ((0.86, 0.82, 0.80), 1.0, 3),  # a wide gap: the whole window, as before the stage existed
        ((0.86, None, 0.80), 0.015, 3),  # a row without a late score: the whole window
        ((float("nan"), 0.85, 0.80), 0.015, 3),  # nor a finite one
        ((0.86,), 1.0, 1),  # a single turn, whatever the gap: nothing to order, its confidence to judge
        ((), 0.015, 0),
    ],
)
def test_only_the_leaders_near_ties_are_contested(raws, gap, expected):
    assert contenders(head(*raws), gap, "which battery?") == expected


def test_a_row_both_legs_rank_first_is_contested_up_to_its_place():
    assert contenders(head(0.86, 0.82, 0.80, firsts_by_both_legs=2), 0.015, "E-4012?") == 3
    assert contenders(head(0.86, 0.82, 0.80, firsts_by_both_legs=0), 0.015, "E-4012?") == 1
    split = head(0.86, 0.82, 0.80)
    split[1].bm25_rank, split[2].dense_rank = 1, 1  # the legs disagree: late interaction's order stands
    assert contenders(split, 0.015, "E-4012?") == 1


def test_a_window_holding_a_distilled_memory_counts_near_ties_by_its_own_gap_and_always_its_leader():
    assert contenders(head(0.86, 0.82, 0.80, fact_at=0), 0.015, "which battery?", 0.05) == 2
    assert contenders(head(0.86, 0.82, 0.80, fact_at=2), 0.015, "which battery?", 0.07) == 3
    assert contenders(head(0.86, 0.70, fact_at=1), 0.015, "which battery?", 0.05) == 1  # the leader alone
    assert contenders(head(0.86, 0.70, fact_at=1), 0.015, "which battery?", 1.0) == 2  # the whole window
    assert contenders(head(0.86, 0.70, 0.69, fact_at=0, firsts_by_both_legs=2), 0.015, "E-4012?", 0.05) == 3
    assert contenders(head(0.86, None, fact_at=0), 0.015, "which battery?", 0.05) == 2  # no late score


def test_the_query_echoed_by_a_stored_turn_does_not_lead_the_contest():
    query = "E-4012 is back. What did we find last time?"
    echo_then_ties = head(0.99, 0.76, 0.755, 0.70, texts=(f"  {query.upper()} ",))
    assert contenders(echo_then_ties, 0.015, query) == 3  # the echo and both near-ties
    echo_then_leader = head(0.99, 0.76, 0.70, texts=(query,))
    assert contenders(echo_then_leader, 0.015, query) == 2  # the echo and the leader, alone
    assert contenders(head(0.99, 0.76, 0.755), 0.015, query) == 1  # not an echo: it leads alone
    assert contenders(head(0.99, texts=(query,)), 0.015, query) == 0  # only the echo
    fact_echo = head(0.99, 0.76, 0.70, texts=(query,), fact_at=0)  # a fact is never an echo
    assert contenders(fact_echo, 0.015, query, 0.05) == 1
    fact_after_echo = head(0.99, 0.76, 0.74, texts=(query,), fact_at=2)
    assert contenders(fact_after_echo, 0.015, query, 0.05) == 3  # the echo, the leader and its near-tie


def test_recall_reranks_near_ties_and_says_so_and_skips_a_clear_leader(eng):
    mem = eng.for_user("sarah")
    twin = "Sarah's garage sensor runs on a CR2032 coin cell"
    mem.remember_turn(twin)
    mem.remember_turn(twin)  # the same text twice: the same raw MaxSim (within any CPU's rounding)
    mem.remember_turn("Sarah's dog chews cables")
    query = "which battery does the garage sensor take?"
    hits = mem.recall(query, config=eng.config.but(rerank_gap=1e-6))
    assert [h.explain["relevance"] for h in hits] == ["rerank", "rerank", "late_interaction"]
    assert all(
        h.explain["rerank_contenders"].startswith("the first 2: near enough to trade places") for h in hits
    )

    other = eng.for_user("marco")
    other.remember_turn(twin)
    other.remember_turn("Marco's dog chews cables")
    other.remember_turn("Marco lives in Leith")
    alone = other.recall(query, config=eng.config.but(rerank_gap=1e-6))
    assert [h.explain["relevance"] for h in alone] == ["rerank", "late_interaction", "late_interaction"]
    assert alone[0].memory.text == twin  # the leader alone is judged, for its confidence
    assert all(h.explain["rerank_contenders"].startswith("the first only: nothing near it") for h in alone)
    from engram.retrieval.confidence import confidence

    cal, (first, second) = eng.config.calibration, (h.explain["query_coverage"] for h in alone[:2])
    assert alone[0].confidence == confidence(cal, alone[0].explain["rerank"], None, None, coverage=first)
    runner_up = alone[1].explain["late_interaction_raw"]  # below what was judged: its own calibration
    assert alone[1].confidence == confidence(cal, None, runner_up, None, coverage=second, below=True)
    shed = run_recall(other, query, eng.config.but(rerank_gap=1e-6), shed=True)  # the stage shed: the
    lead = shed[0].explain["late_interaction_raw"]  # leader's own calibration, for one no other came near
    assert shed[0].explain["rerank"] == "skipped: load" and shed[0].memory.text == twin
    assert shed[0].explain["rerank_contenders"].endswith("calibrated as such (not read)")
    assert shed[0].confidence == confidence(cal, None, lead, None, uncontested=True, coverage=first)
    assert shed[1].confidence == confidence(cal, None, runner_up, None, coverage=second, below=True)
    unjudged = other.recall(query, config=eng.config.but(rerank=False))[1]  # no verdict above it
    raw, covered = unjudged.explain["late_interaction_raw"], unjudged.explain["query_coverage"]
    assert unjudged.confidence == confidence(cal, None, raw, None, coverage=covered)
    assert unjudged.confidence != confidence(cal, None, raw, None, coverage=covered, below=True)
    whole = other.recall(query, config=eng.config.but(rerank_gap=1.0))
    assert [h.explain["relevance"] for h in whole] == ["rerank"] * 3
    assert "rerank_contenders" not in whole[0].explain
    facts = eng.for_user("lena")
    for text in (twin, "Lena's dog chews cables", "Lena lives in Leith"):
        facts.write(text)  # distilled memories: their own gap, and the leader always
    narrow = eng.config.but(rerank_gap=1.0, rerank_gap_distilled=1e-6)
    distilled = facts.recall(query, config=narrow)
    assert [h.explain["relevance"] for h in distilled] == ["rerank", "late_interaction", "late_interaction"]
    assert distilled[0].memory.text == twin
    assert distilled[0].explain["rerank_contenders"].startswith("the first only: nothing near it")
    wide = facts.recall(query, config=eng.config.but(rerank_gap=1e-6, rerank_gap_distilled=1.0))
    assert [h.explain["relevance"] for h in wide] == ["rerank"] * 3


@pytest.mark.parametrize(
    ("text", "query", "asks"),
    [
        ("what car do I drive? the insurance form asks", "what car do I drive?", True),
        ("hey, quick one - what car do I drive again?", "what car do I drive?", True),
        ("What car do I drive?", "what car do I drive", True),  # the query's own turn
        ("what car should I buy for a family of four?", "what car do I drive?", False),  # one word shared
        ("ok I bought a Skoda Octavia estate", "what car do I drive?", False),  # no question
        ("do you think my Skoda Octavia is a good car to drive in snow?", "what car do I drive?", False),
        ("is the wifi password BTHub-4821?", "what's the wifi password?", False),  # it confirms a value
        # a day names a value in lower case too (an outside review's repro)
        (
            "what time is my pilates class now that it moved to wednesdays?",
            "when is my pilates class?",
            False,
        ),
        ("what time is my pilates class on Wednesday?", "when is my pilates class on wednesday?", True),
        ("may I ask, what car do I drive?", "what car do I drive?", True),  # "may" is no month here
        # one content word: the same question (a newcomer's walk: asked twice, it buried the answer)
        ("where do I live? the form asks", "where do I live?", False),  # says more: not judged
        ("where do I live again?", "where do I live?", True),
        ("who's my gp? dr patel", "who's my gp?", False),  # it answers too (an outside review)
        ("where do I live? Leeds, obviously", "where do I live?", False),
        ("do I live in Leeds?", "where do I live?", False),  # it names a place: a guess that tells
        ("what should we do?", "what's my sister called?", False),
        ("is this ok? " + "word " * 20_000, "is this ok now?", False),  # long, and linear in its length
        # one shared word is a question on the subject, and it tells: "my sister Magda"
        ("my sister Magda is coming over in november, what should we do?", "what's my sister called?", False),
        (  # a turn that mostly tells (LoCoMo)
            "Since I was 17 or so. I find it so empowering and cathartic, it shows what is hard to put "
            "into words. How long have you been into art?",
            "How long has Melanie been creating art?",
            False,
        ),
    ],
)
def test_a_turn_that_asks_what_the_query_asks_is_told_from_one_that_tells(text, query, asks):
    assert asks_the_query(text, query) is asks


def test_askers_are_set_aside_down_the_places_and_re_sorted():
    query = "what car do I drive?"
    texts = ("what car do I drive?", "I drive a Skoda", "what car do I drive again?", "is a car seat ok?")
    order = head(0.9, 0.8, 0.7, 0.6, texts=texts)
    for c, late in zip(order, (1.0, 0.6, 0.5, 0.4), strict=True):
        c.late = late
    # the second question rises into the first two places once the first is set aside: it counts too
    questions = {order[0].memory.id, order[2].memory.id}
    assert set_aside_askers(order, query, 0.1, places=2) == questions
    assert [c.memory.text for c in order] == ["I drive a Skoda", "is a car seat ok?", *texts[::2]]
    assert order[2].multipliers["asked"] == 0.1
    assert set_aside_askers(head(0.9, texts=texts), query, 1.0, places=2) == set()  # a factor of 1: off
    past = head(0.9, texts=("what car do I drive?",))
    assert set_aside_askers(past, "what did I ask you about the car I drive?", 0.1, places=2) == set()


def test_askers_go_below_every_turn_that_tells_after_the_last_stage():
    """The cross-encoder scored the question 0.96 and the answer 0.0006: the factor alone leaves the
    question first, so it goes just below the lowest turn that tells among the first places."""
    order = head(0.9, 0.8, 0.7, texts=("what car do I drive? the form asks", "I bought a Skoda", "junk"))
    for c, relevance in zip(order, (0.96, 0.0006, 0.0001), strict=True):
        c.late = relevance
    order[0].multipliers["asked"] = 0.1
    put_askers_below(order, {order[0].memory.id}, places=3)
    assert [c.memory.text for c in order] == [
        "I bought a Skoda",
        "junk",
        "what car do I drive? the form asks",
    ]
    assert order[2].final == pytest.approx(0.0001 * 0.999)
    assert [c.final for c in order] == sorted((c.final for c in order), reverse=True)


def test_a_question_asked_before_does_not_answer_it_again(eng):
    """An outside bug hunt's repro: the agent's flow stores each user turn, and an earlier turn that asked
    the same question led at 0.68, so the agent was handed the user's own question as what it knows."""
    from datetime import timedelta

    from engram.models import utcnow
    from engram.settings import DEFAULT_MIN_CONFIDENCE

    mem = eng.for_user("dana")
    now = utcnow()
    leeds = mem.remember_turn("I live in Leeds with my partner Sam", at=now - timedelta(days=120))
    skoda = mem.remember_turn("ok I bought a Skoda Octavia estate", at=now - timedelta(days=95))
    asked = mem.remember_turn("what car do I drive? the insurance form asks", at=now - timedelta(days=30))
    hits = mem.recall("what car do I drive?", record_use=False)
    assert hits[0].memory.id != asked.id
    (again,) = [h for h in hits if h.memory.id == asked.id]
    assert again.explain["asked"] <= eng.config.asked_factor and again.confidence < DEFAULT_MIN_CONFIDENCE
    before = mem.recall("what did I ask you about the car I drive?", record_use=False)  # the question answers
    assert before[0].memory.id == asked.id and "asked" not in before[0].explain
    # a question that a change word opens is no successor: it does not replace the answer
    again = mem.remember_turn("sorry, what car do I drive again? the form asks", at=now - timedelta(days=2))
    hits = mem.recall("what car do I drive?", record_use=False)
    assert {h.memory.id for h in hits[:2]} == {skoda.id, leeds.id}
    assert all("outdated_by" not in h.explain for h in hits) and hits[-1].memory.id in {asked.id, again.id}


def test_a_one_word_question_asked_twice_leaves_the_answer_first_and_judged(eng):
    """A newcomer's walk: the agent stores each user turn, so "where do I live?" asked before, then
    again, led the recall (0.64 and 0.57) and the fact fell to 0.14 as the cross-encoder read only
    the two questions."""
    mem = eng.for_user("sarah")
    fact = mem.write("Sarah lives in Bristol")
    for asked in ("where do I live?", "where do I live again?"):
        mem.remember_turn(asked)
    hits = mem.recall("where do I live?", record_use=False)
    assert hits[0].memory.id == fact.id and hits[0].explain["relevance"] == "rerank"
    assert hits[0].confidence > 0.5 and all(h.confidence < 0.1 for h in hits[1:3])
    assert [h.memory.id for h in mem.recall("where do I live?", min_confidence=0.1, record_use=False)] == [
        fact.id
    ]
    # the query's own words, said before as a statement, are what the user said: they stay first
    said = mem.remember_turn("I'm allergic to peanuts")
    mem.remember_turn("I'm allergic to pollen in spring")
    assert mem.recall("I'm allergic to peanuts", record_use=False)[0].memory.id == said.id
    # a question that the same turn answers is no asker (an outside review: 0.78 fell to 0.09)
    answered = eng.for_user("gus").remember_turn("who's my gp? dr patel")
    (hit,) = eng.for_user("gus").recall("who's my gp?", min_confidence=0.1, record_use=False)
    assert hit.memory.id == answered.id and hit.explain["relevance"] == "rerank"


def test_a_single_turn_is_no_clear_leader(eng):
    from engram.retrieval.confidence import confidence

    mem = eng.for_user("nora")
    mem.remember_turn("my garage sensor runs on a CR2032 coin cell")
    (hit,) = mem.recall("which battery does the garage sensor take?")
    assert hit.explain["relevance"] == "rerank"  # judged for its confidence
    (shed,) = run_recall(mem, "which battery does the garage sensor take?", eng.config, shed=True)
    raw = shed.explain["late_interaction_raw"]  # shed: the general calibration, nothing came near to lose
    covered = shed.explain["query_coverage"]
    assert shed.confidence == confidence(eng.config.calibration, None, raw, None, coverage=covered)


def test_only_the_querys_own_turn_leaves_nothing_to_judge(eng):
    mem = eng.for_user("olga")
    mem.remember_turn("which battery does the garage sensor take?")
    (hit,) = mem.recall("which battery does the garage sensor take?")
    assert hit.explain["rerank"] == "skipped: nothing but the query's own turn"


def run_recall(mem, query, config, shed=False):
    """A recall through the pipeline itself, with the cross-encoder's stage shed when asked."""
    from engram.models import MEMORY_TYPES, utcnow
    from engram.retrieval.pipeline import recall

    e = mem._engram
    return recall(
        e.store,
        e.embedder,
        e.reranker,
        e.token_encoder,
        mem.user_id,
        query,
        k=10,
        memory_types=frozenset(MEMORY_TYPES),
        include_superseded=False,
        config=config,
        now=utcnow(),
        shed_rerank=shed,
    )
