import itertools
from datetime import UTC, datetime, timedelta

import pytest

from engram.models import CatalogItem, EpisodicMemory, ProceduralMemory, SemanticMemory
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.scoring import multipliers, speaker_match, speaker_of, time_decay, use_count_boost
from engram.retrieval.temporal import time_window
from engram.text import name_words, transcript_speaker

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
        ("Zoë: ça va", "Zoë"),
        ("RACE DAY: Bath half in 2:14:38", None),  # a heading, not a name
        ("E-214: the camera could not reach the hub", None),  # an error code
        ("note to self: buy milk", None),
        ("My Big Fat Greek Wedding: loved it", None),  # more than three words
        ("Caroline said: hi", None),
        ("Caroline:no space", None),
    ],
)
def test_transcript_speaker(text, speaker):
    assert transcript_speaker(text) == speaker


def test_name_words_split_possessives_and_drop_stopwords():
    assert name_words("What might John's degree be?") == {"might", "john", "degree"}
    assert name_words("Dr. Ann Lee") == {"dr", "ann", "lee"}


def test_speaker_match_needs_the_query_to_name_the_speaker():
    asked = name_words("What job might Maria pursue?")
    assert speaker_match("Maria", asked) == 1.2
    assert speaker_match("Maria Lopez", asked, boost=1.5) == 1.5  # any word of the name
    assert speaker_match("John", asked) == 1.0
    assert speaker_match(None, asked) == 1.0
    assert speaker_match("Maria", frozenset()) == 1.0


def test_speaker_of_prefers_the_callers_metadata_over_the_text():
    def turn(text, **metadata):
        return EpisodicMemory(
            id="epi_x", text=text, user_id="u", created_at=NOW, timestamp=NOW, metadata=metadata
        )

    assert speaker_of(turn("Caroline: hi")) == "Caroline"
    assert speaker_of(turn("Caroline: hi", speaker="Melanie")) == "Melanie"
    assert speaker_of(turn("I went hiking", speaker="Nate")) == "Nate"
    assert speaker_of(turn("I went hiking")) is None
    assert speaker_of(turn("Caroline: hi", speaker="  ")) == "Caroline"  # rows stored before the check


def test_speaker_match_is_a_multiplier_of_episodes_only():
    cfg = RetrievalConfig()
    asked = name_words("What does Nate like?")
    ep = EpisodicMemory(id="epi_x", text="Nate: turtles", user_id="u", created_at=NOW, timestamp=NOW)
    assert multipliers(ep, NOW, cfg, None, asked)["speaker_match"] == 1.2
    assert multipliers(ep, NOW, cfg.but(speaker_match_boost=1.0), None, asked)["speaker_match"] == 1.0
    assert multipliers(ep, NOW, cfg.but(multipliers=False), None, asked)["speaker_match"] == 1.0
    fact = SemanticMemory(id="sem_x", text="Nate: likes turtles", user_id="u", created_at=NOW)
    assert multipliers(fact, NOW, cfg, None, asked)["speaker_match"] == 1.0
