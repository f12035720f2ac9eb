"""Time words in queries: the parser's documented examples and the time_match multiplier."""

from datetime import UTC, datetime

import pytest

from engram.retrieval.scoring import time_match
from engram.retrieval.temporal import TimeWindow, in_window, time_window

NOW = datetime(2023, 11, 1, tzinfo=UTC)


def d(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("What did she paint on October 13, 2023?", TimeWindow(d(2023, 10, 13), d(2023, 10, 21))),
        ("what happened on 13th Oct 2023", TimeWindow(d(2023, 10, 13), d(2023, 10, 21))),
        ("What did Maria donate in December 2022?", TimeWindow(d(2022, 12, 1), d(2023, 1, 8))),
        ("When did Melanie go camping in June?", TimeWindow(month=6)),
        ("How many times has she gone to the beach in 2023?", TimeWindow(d(2023, 1, 1), d(2024, 1, 8))),
        ("what did I fix last week", TimeWindow(d(2023, 10, 18), d(2023, 11, 1, 0, 0, 1))),
        ("where does Sarah live?", None),
        ("may I ask about the 2023 model?", None),  # "may" is no month, a bare year no period
        ("on February 30, 2023", None),
        ("since may I ask about the hub?", None),
        ("in \u017feptember", None),  # the long s folds to "s" only under Unicode case rules
        ("trip in Sept 2023", TimeWindow(d(2023, 9, 1), d(2023, 10, 8))),
    ],
)
def test_time_window_reads_the_period_a_query_names(query, window):
    assert time_window(query, NOW) == window


def test_the_edges_of_the_calendar_do_not_crash():
    first, last = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    assert time_window("what happened yesterday", first) is None
    assert time_window("what happened last year", last) is None
    assert not in_window(d(1, 1, 2), TimeWindow(month=12))


def test_in_window_and_the_multiplier():
    june = TimeWindow(month=6)
    assert in_window(d(2021, 6, 30), june) and in_window(d(2023, 7, 5), june)  # the slack
    assert not in_window(d(2023, 7, 9), june)
    dec = time_window("in December 2022", NOW)
    assert dec is not None and in_window(d(2022, 12, 24), dec) and not in_window(d(2022, 11, 30), dec)
    assert time_match(d(2022, 12, 24), dec) == 1.5
    assert time_match(d(2022, 11, 30), dec) == 1.0
    assert time_match(d(2022, 12, 24), None) == 1.0
    assert time_match(None, dec) == 1.0
