"""Confidence (engram.retrieval.confidence): pure calibration, and what recall reports with it."""

import math

import pytest

from engram.retrieval.confidence import Calibration, confidence, logit, sigmoid

CAL = Calibration(
    rerank=(1.0, 0.0, 0.0),
    late=(10.0, 0.0, -7.0),
    dense=(5.0, -3.0),
    leader=(10.0, 0.0, -6.0),
    coverage_mean=0.5,
)
WITH_COVERAGE = Calibration(
    rerank=(1.0, 2.0, -1.0),
    late=(10.0, 4.0, -9.0),
    dense=(5.0, -3.0),
    leader=(10.0, 4.0, -8.0),
    coverage_mean=0.5,
)


def test_the_docstring_examples():
    assert sigmoid(0.0) == 0.5 and logit(0.5) == 0.0
    assert confidence(CAL, 0.5, None, None) == pytest.approx(0.5)
    assert confidence(CAL, None, 0.7, None) == pytest.approx(0.5)
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0  # no overflow
    assert math.isfinite(logit(0.0)) and math.isfinite(logit(1.0))


def test_the_strongest_stage_that_scored_a_hit_gives_its_confidence():
    assert confidence(CAL, 0.9, 0.8, 0.7) == pytest.approx(0.9)
    assert confidence(CAL, None, 0.8, 0.7) == pytest.approx(sigmoid(1.0))  # cross-encoder skipped
    assert confidence(CAL, None, None, 0.7) == pytest.approx(sigmoid(0.5))  # late interaction off
    assert confidence(CAL, None, None, None) == 0.0  # only BM25 found it: nothing absolute


def test_an_uncontested_leader_has_its_own_late_interaction_calibration():
    assert confidence(CAL, None, 0.7, 0.7, uncontested=True) == pytest.approx(sigmoid(1.0))
    assert confidence(CAL, 0.9, 0.7, 0.7, uncontested=True) == pytest.approx(0.9)  # reranked all the same


def test_a_hit_below_what_the_cross_encoder_judged_has_its_own_calibration():
    below = Calibration(**{**CAL.__dict__, "below": (10.0, 0.0, -8.0)})
    assert confidence(below, None, 0.7, 0.7, below=True) == pytest.approx(sigmoid(-1.0))
    assert confidence(below, None, 0.7, 0.7) == pytest.approx(0.5)  # the general late calibration
    assert confidence(below, 0.9, 0.7, 0.7, below=True) == pytest.approx(0.9)  # scored: its own score
    assert confidence(CAL, None, 0.7, 0.7, below=True) == pytest.approx(0.5)  # no such coefficients


def test_a_hit_that_covers_the_query_less_is_less_likely_relevant():
    """The coverage term: the docstring example, the same stage score with coverage 0.2 vs 0.8, and a
    missing coverage standing at the calibration's mean."""
    assert confidence(WITH_COVERAGE, 0.5, None, None, coverage=0.5) == pytest.approx(0.5)
    for rerank, late in [(0.9, 0.8), (None, 0.8)]:
        low = confidence(WITH_COVERAGE, rerank, late, None, coverage=0.2)
        high = confidence(WITH_COVERAGE, rerank, late, None, coverage=0.8)
        assert low < high
    missing = confidence(WITH_COVERAGE, None, 0.8, None, coverage=None)
    assert missing == pytest.approx(confidence(WITH_COVERAGE, None, 0.8, None, coverage=0.5))


def test_recall_gives_a_question_about_something_never_said_less_confidence(eng):
    """Both questions share most words with the stored turn; only one's subject was ever mentioned.
    Each hit explains its coverage of the query's content words (the user's own name is not one)."""
    mem = eng.for_user("anna")
    mem.remember_turn("my sister Lena is a midwife in Hamburg, she works nights")
    mem.remember_turn("the boiler is making a knocking noise again")
    said = mem.recall("what does Anna's sister do for work?", record_use=False)[0]
    never = mem.recall("when is Anna's sister's birthday?", record_use=False)[0]
    assert said.explain["query_coverage"] > never.explain["query_coverage"]
    assert said.confidence > never.confidence


def test_a_score_that_is_not_a_number_counts_as_missing():
    nan, inf = float("nan"), float("inf")
    assert confidence(CAL, nan, 0.8, 0.7) == pytest.approx(sigmoid(1.0))  # the next stage answers
    assert confidence(CAL, nan, nan, inf) == 0.0


def test_a_calibration_that_is_not_finite_is_refused():
    from engram.errors import ConfigError
    from engram.settings import EngramSettings

    with pytest.raises(ConfigError, match="confidence_late"):
        EngramSettings.defaults(confidence_late=(float("nan"), 0.0, 0.0))


def test_a_calibration_of_two_numbers_reads_as_one_without_the_coverage_term():
    """(a, c), written before the coverage term, is the same calibration as (a, 0, c)."""
    from engram.settings import EngramSettings

    settings = EngramSettings.defaults(confidence_rerank=[0.217, -0.681])
    assert settings.confidence_rerank == (0.217, 0.0, -0.681)


def test_confidence_rises_with_each_stage_score():
    for low, high in [(0.1, 0.9), (0.001, 0.01)]:
        assert confidence(CAL, low, 0.7, None) < confidence(CAL, high, 0.7, None)
    assert confidence(CAL, None, 0.6, None) < confidence(CAL, None, 0.9, None)


def test_recall_reports_the_same_confidence_with_or_without_the_cross_encoder_scale(eng):
    """Skipping the cross-encoder changes which calibration applies, not the scale: both are
    probabilities, and an unrelated query stays far below a matching one either way."""
    mem = eng.for_user("sarah")
    mem.write("Sarah's router is a Fritzbox 7590")
    for config in (eng.config, eng.config.but(rerank=False)):
        matching = mem.recall("which router does Sarah have?", config=config, record_use=False)[0]
        unrelated = mem.recall("how many moons does Jupiter have?", config=config, record_use=False)[0]
        assert 0 <= unrelated.confidence < 0.1 < matching.confidence <= 1, config.rerank
