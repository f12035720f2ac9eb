"""Time words in a query, matched against event time: a pure parser and a multiplier.

A question such as "what did Maria donate in December 2023?" names a period that exists only in the
turns' timestamps, never in their text, so neither leg can match it. ``time_window`` reads the period
the query names (an explicit date, a month with or without a year, a year, or "yesterday", "last
week", "last month", "last year" relative to the recall's present); ``in_window`` tells whether an
event time falls in it. The pipeline turns that into the ``time_match`` multiplier.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# Most specific first: the first pattern that matches decides the window.
_PATTERNS = [
    ("day", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I | re.A)),  # October 13, 2023
    ("day", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I | re.A)),  # 13 October 2023
    ("month", re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.I | re.A)),  # December 2023
    (  # "in June"; not "since may I ask"
        "month_any_year",
        re.compile(
            rf"\b(?:in|during|since|early|mid|late)[\s-]+{_MONTH}\b(?!\s+(?:i|we|you|he|she|they)\b)",
            re.I | re.A,
        ),
    ),
    ("year", re.compile(rf"\b(?:in|during|of|since)\s+{_YEAR}\b", re.I | re.A)),
]
_RELATIVE = {
    "yesterday": (timedelta(days=2), timedelta(days=0)),
    "last week": (timedelta(days=14), timedelta(days=0)),
    "last month": (timedelta(days=62), timedelta(days=0)),
    "last year": (timedelta(days=730), timedelta(days=0)),
}
SLACK = timedelta(days=7)  # people tell of an event in the days after it: the window extends past its end


@dataclass(frozen=True)
class TimeWindow:
    """A period a query names: [start, end), or a month of any year (``month``, start/end None)."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None


def time_window(query: str, now: datetime) -> TimeWindow | None:
    """The period the query names, if any.

    Examples (now = 2023-11-01): "on October 13, 2023" -> [2023-10-13, 2023-10-21) (a day plus the
    slack); "in December 2022" -> [2022-12-01, 2023-01-08); "in June" -> June of any year;
    "in 2022" -> [2022-01-01, 2023-01-08); "last week" -> [2023-10-18, 2023-11-01]; no time words -> None.
    """
    for kind, pattern in _PATTERNS:
        found = pattern.search(query)
        if found is None:
            continue
        groups = found.groupdict()
        month = _MONTHS[groups["month"].lower()] if groups.get("month") else None
        if kind == "month_any_year":
            return TimeWindow(month=month)
        year = int(groups["year"])
        try:
            if kind == "day":
                start = datetime(year, month or 1, int(groups["day"]), tzinfo=UTC)
                return TimeWindow(start, start + timedelta(days=1) + SLACK)
            if kind == "month":
                start = datetime(year, month or 1, 1, tzinfo=UTC)
                days = calendar.monthrange(year, month or 1)[1]
                return TimeWindow(start, start + timedelta(days=days) + SLACK)
        except ValueError:  # "February 30, 2023": no such day
            return None
        return TimeWindow(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC) + SLACK)
    lowered = query.lower()
    for words, (back, forward) in _RELATIVE.items():
        if re.search(rf"\b{words}\b", lowered):
            try:
                return TimeWindow(now - back, now + forward + timedelta(seconds=1))
            except OverflowError:  # a present at the edge of the calendar
                return None
    return None


def in_window(at: datetime, window: TimeWindow) -> bool:
    """Whether an event time falls in the window (a month of any year: that month, plus the slack)."""
    if window.month is not None:
        before = at - SLACK if at > datetime.min.replace(tzinfo=at.tzinfo) + SLACK else at
        return window.month in (at.month, before.month)
    assert window.start is not None and window.end is not None
    return window.start <= at < window.end
