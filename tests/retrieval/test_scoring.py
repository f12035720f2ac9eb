import itertools
from datetime import UTC, datetime, timedelta

import pytest

from engram.models import (
    CatalogItem,
    EpisodicMemory,
    ProceduralMemory,
    SemanticMemory,
    search_text_of,
    transcript_line,
)
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.scoring import (
    multipliers,
    named_speakers,
    recency,
    speaker_match,
    speaker_of,
    time_decay,
    use_count_boost,
)
from engram.retrieval.temporal import time_window
from engram.text import name_words, query_words, transcript_speaker

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("age", "expected"),
    [(0, 1.0), (90, 1.0), (180, 1.0), (1092.5, 0.5**0.25), (2005, 0.5), (-10, 1.0)],
)
def test_time_decay_curve(age, expected):
    assert time_decay(age) == pytest.approx(expected, abs=1e-9)


def test_time_decay_is_monotonic_past_the_offset():
    values = [time_decay(d) for d in range(180, 6000, 100)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert time_decay(4000) < 0.5


@pytest.mark.parametrize(("age", "expected"), [(0, 1.0), (-5, 1.0), (365, 0.5 ** (365 / 2000)), (2000, 0.5)])
def test_recency_halves_per_half_life(age, expected):
    assert recency(age, 2000.0) == pytest.approx(expected)
    assert recency(age, 0.0) == 1.0  # off


def test_time_decay_rejects_bad_parameters():
    with pytest.raises(ValueError):
        time_decay(10, decay=1.0)
    with pytest.raises(ValueError):
        time_decay(10, scale=0)


@pytest.mark.parametrize(("uses", "expected"), [(0, 1.0), (9, 1.2), (99, 1.4), (-3, 1.0)])
def test_use_count_boost(uses, expected):
    assert use_count_boost(uses) == pytest.approx(expected)


def test_multipliers_follow_each_type_lifecycle():
    cfg = RetrievalConfig()
    old = NOW - timedelta(days=2005)
    ep = EpisodicMemory(id="epi_x", text="t", user_id="u", created_at=NOW, timestamp=old)
    assert multipliers(ep, NOW, cfg)["decay"] == pytest.approx(0.5)
    fact = SemanticMemory(id="sem_x", text="t", user_id="u", created_at=old, use_count=9)
    m = multipliers(fact, NOW, cfg)
    assert (m["decay"], m["use_count_boost"]) == (pytest.approx(0.5), pytest.approx(1.2))
    recently_used = fact.model_copy(update={"last_used_at": NOW - timedelta(days=1)})
    assert multipliers(recently_used, NOW, cfg)["decay"] == 1.0  # relevance decay, not fact decay
    playbook = ProceduralMemory(id="pro_x", text="", user_id="u", created_at=old, name="n")
    assert multipliers(playbook, NOW, cfg) == {
        "decay": 1.0,
        "use_count_boost": 1.0,
        "source_prior": 1.0,
        "success_prior": 1.0,
        "time_match": 1.0,
        "speaker_match": 1.0,
    }
    proven = playbook.model_copy(update={"success_count": 9})
    assert multipliers(proven, NOW, cfg)["success_prior"] == 1.0  # off by default
    assert multipliers(proven, NOW, cfg.but(procedural_feedback=True))["success_prior"] == pytest.approx(
        1.409, abs=1e-3
    )
    said_then = time_window(f"what did I say in {old:%B %Y}?", NOW)
    assert multipliers(ep, NOW, cfg, said_then)["time_match"] == 1.5
    assert multipliers(fact, NOW, cfg, said_then)["time_match"] == 1.0  # facts have no event time
    item = CatalogItem(id="cat_x", text="t", user_id=None, created_at=old)
    assert multipliers(item, NOW, cfg)["source_prior"] == 0.85
    assert multipliers(item, NOW, cfg)["decay"] == 1.0
    assert multipliers(fact, NOW, cfg.but(multipliers=False)) == {
        "decay": 1.0,
        "use_count_boost": 1.0,
        "source_prior": 1.0,
        "success_prior": 1.0,
        "time_match": 1.0,
        "speaker_match": 1.0,
    }


@pytest.mark.parametrize(
    ("s", "f", "expected"), [(0, 0, 1.0), (1, 0, 1.1667), (0, 1, 0.8333), (9, 0, 1.4091), (0, 9, 0.5909)]
)
def test_success_prior(s, f, expected):
    from engram.retrieval.scoring import success_prior

    assert success_prior(s, f) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "speaker"),
    [
        ("Caroline: I went to the support group", "Caroline"),
        ("Dr. Ann Lee: take two a day", "Dr. Ann Lee"),
        ("O'Brien: see you", "O'Brien"),
        ("Zoe\u0308: ça va", "Zoë"),  # decomposed (NFD) input reads as the composed name
        ("RACE DAY: Bath half in 2:14:38", None),  # a heading, not a name
        ("E-214: the camera could not reach the hub", None),  # an error code
        ("Update: the courier says Friday", None),  # a line label
        ("Correction: I told you wrong, my dentist is actually Dr. Lee", None),  # a correction's label
        ("Btw: we moved", None),
        ("Re: invoice 442", None),
        ("Monday: gym", None),
        ("note to self: buy milk", None),
        ("My Big Fat Greek Wedding: loved it", None),  # more than three words
        ("Caroline said: hi", None),
        ("Caroline:no space", None),
        ("10:30 at the dentist", None),
        ("http://example.com: down again", None),
    ],
)
def test_transcript_speaker(text, speaker):
    assert transcript_speaker(text) == speaker


def test_query_and_name_words():
    assert query_words("What might John's degree be?") >= {"john", "degree"}
    assert "don" not in query_words("why don't you call?")  # a contraction stays one word
    assert {"mary", "jane"} <= query_words("Did Mary-Jane call?")
    assert name_words("Dr. Ann Lee") == {"ann", "lee"}  # a title names nobody
    assert name_words("Mary-Jane") == {"mary", "jane"}
    assert name_words("Will") == frozenset()  # cannot be told from the verb


def turn(text, **metadata):
    return EpisodicMemory(
        id="epi_x", text=text, user_id="u", created_at=NOW, timestamp=NOW, metadata=metadata
    )


def test_named_speakers_needs_a_conversation_of_several_people():
    group = [turn("Caroline: hi"), turn("Melanie: hey Caroline"), turn("no speaker here")]
    assert named_speakers(group, query_words("What might Caroline study?")) == {"caroline"}
    both = query_words("What do Caroline and Melanie share?")
    assert named_speakers(group, both) == {"caroline", "melanie"}
    assert named_speakers(group, query_words("What job might Maria pursue?")) == frozenset()
    alone = [turn("I love hiking", speaker="Nate"), turn("Nate: and turtles")]
    assert named_speakers(alone, query_words("What does Nate love?")) == frozenset()  # one person
    dr = [turn("Dr. Lee: rest"), turn("Dr. Park: ice")]
    assert named_speakers(dr, query_words("What did Dr. Park say?")) == {"dr. park"}
    same = [turn("hi", speaker="Sam"), turn("hello", speaker="sam"), turn("Sam: hey")]
    assert named_speakers(same, query_words("What did Sam say?")) == frozenset()  # one person, any case


def test_speaker_match():
    assert speaker_match("maria", frozenset({"maria"})) == 1.1
    assert speaker_match("maria", frozenset({"maria"}), boost=1.5) == 1.5
    assert speaker_match("john", frozenset({"maria"})) == 1.0
    assert speaker_match(None, frozenset({"maria"})) == 1.0


def test_speaker_of_prefers_the_callers_metadata_over_the_text():
    assert speaker_of(turn("Caroline: hi")) == "caroline"
    assert speaker_of(turn("Caroline: hi", speaker="Melanie")) == "melanie"
    assert speaker_of(turn("I went hiking", speaker=" Nate ")) == "nate"
    assert speaker_of(turn("I went hiking")) is None
    assert speaker_of(turn("Caroline: hi", speaker="  ")) == "caroline"  # rows stored before the check
    assert speaker_of(turn("Caroline: hi", speaker=7)) == "caroline"


def test_speaker_match_is_a_multiplier_of_episodes_only():
    cfg = RetrievalConfig()
    named = frozenset({"nate"})
    ep = turn("Nate: turtles")
    assert multipliers(ep, NOW, cfg, None, named)["speaker_match"] == 1.1
    assert multipliers(ep, NOW, cfg.but(speaker_match_boost=1.0), None, named)["speaker_match"] == 1.0
    assert multipliers(ep, NOW, cfg.but(multipliers=False), None, named)["speaker_match"] == 1.0
    fact = SemanticMemory(id="sem_x", text="Nate: likes turtles", user_id="u", created_at=NOW)
    assert multipliers(fact, NOW, cfg, None, named)["speaker_match"] == 1.0


def test_transcript_line_names_the_speaker_once():
    assert transcript_line(turn("see you at 6", speaker=" Priya ")) == "Priya: see you at 6"
    assert transcript_line(turn("priya: see you at 6", speaker="Priya")) == "priya: see you at 6"
    assert transcript_line(turn("see you at 6")) == "see you at 6"
    assert transcript_line(turn("see you at 6", speaker=7)) == "see you at 6"  # stored before the check
    assert search_text_of(turn("see you at 6", speaker="Priya")) == "Priya: see you at 6"
