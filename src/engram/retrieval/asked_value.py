"""The kind of value a question asks for, and whether a row states one: a row without it cannot answer.

"what's maeve's cat called?" over "maeve's cat hates me btw" is a near-perfect match for every model
recall has (same words, same subject), yet the row holds no name, so it cannot be the answer. Questions
about something never said are mostly of this shape: a name, a number, a day or a colour asked about a
subject that was mentioned. Recall lowers the confidence of such rows (``Settings.missing_value_factor``)
and leaves their rank alone (docs/benchmarks.md).

The checks are deliberately generous to the row: any capitalised word new to the query counts as a
name, any digit as a number or a day. A question answered by when the row was said ("when did we
move?", "what year did I start?") asks for nothing in the text: the hit's event time answers it.
"""

from __future__ import annotations

import re
from enum import StrEnum

from engram.text import STOPWORDS


class AskedValue(StrEnum):
    """What a question wants in its answer's text."""

    NAME = "name"
    NUMBER = "number"
    TIME = "time"  # of day: "8pm", "half six", "mornings"
    DAY = "day"  # a weekday, date, month or season
    COLOUR = "colour"


_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)
_NAME_ASKED = re.compile(r"\b(?:name|names|named|called)\b", re.IGNORECASE)
_COLOUR_ASKED = re.compile(r"\bcolou?rs?\b", re.IGNORECASE)
_TIME_ASKED = re.compile(r"\bwhat time\b", re.IGNORECASE)
_NUMBER_ASKED = re.compile(r"\bhow (?:much|many|long|old|far)\b|\bwhat (?:age|size|price)\b|\bsalary\b", re.I)
_YEAR_ASKED = re.compile(r"\bwhat year\b", re.IGNORECASE)
_DAY_ASKED = re.compile(r"^\s*when\b|\b(?:what|which) (?:days?|nights?|date|month)\b", re.IGNORECASE)
# Two questions in one ("what's my cat called and what breed is she?"): a row may answer either part;
# not a relative "where" or "who" ("the name of the church where she sings").
_TWO_QUESTIONS = re.compile(r"(?:\band|[,;?])\s+(?:what|what's|whats|who|whose|where|when|which|how)\b", re.I)
_BIRTHDAY = re.compile(r"\bbirthdays?\b", re.IGNORECASE)
# "when did / was ...", "what year did ...": asked when an event was, which the hit's event time says;
# "used to" is a habit.
_EVENT_TENSE = re.compile(r"\b(?:did|was|were)\b(?!.*\bused? to\b)", re.IGNORECASE)
_NAME_CUE = re.compile(
    r"\b(?:called|named|name is|name's|names are)\s+[\"“]?([^\W_]+)|[\"“]([^\"”]{1,60})[\"”]", re.IGNORECASE
)
_DIGIT = re.compile(r"\d")
_I = re.compile(r"I['’]")  # I'm, I've, I'd, I'll
_POSSESSIVE = re.compile(r"['’]s$")
_DETERMINERS = frozenset("the a an my your his her its our their this that every each no".split())  # noqa: SIM905
_NUMBER_WORDS = frozenset(
    """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand
    million billion half quarter dozen couple few several both double twice once single pair
    first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth
    grand quid bucks
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_TIME_WORDS = frozenset(
    """
    noon midday midnight morning mornings afternoon afternoons evening evenings night nights lunchtime
    lunch early late am pm o'clock
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_DAY_WORDS = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays
    fridays saturdays sundays weekday weekdays weekend weekends today tomorrow tonight yesterday
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec spring summer autumn fall winter
    christmas easter halloween thanksgiving
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_COLOURS = frozenset(
    """
    red blue green yellow black white grey gray silver orange purple pink brown navy gold golden beige
    cream maroon burgundy teal turquoise violet lilac lavender magenta cyan khaki bronze copper tan
    ivory charcoal mint olive scarlet crimson indigo
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def asked_value(query: str) -> AskedValue | None:
    """The kind of value ``query`` asks for, or None (most questions: "where do I live?", "what car do I
    drive?" can be answered in any words), as for a question in two parts. Example: "what's my sister
    called?" -> NAME; "how much is my rent?" -> NUMBER; "when did we move?" -> None (the event time
    answers)."""
    if _TWO_QUESTIONS.search(query):
        return None
    if _NAME_ASKED.search(query):
        return AskedValue.NAME
    if _COLOUR_ASKED.search(query):
        return AskedValue.COLOUR
    if _BIRTHDAY.search(query):
        return AskedValue.DAY
    if _TIME_ASKED.search(query):
        return AskedValue.TIME
    if _NUMBER_ASKED.search(query):
        return AskedValue.NUMBER
    if _EVENT_TENSE.search(query):  # what is left asks when something happened
        return None
    if _YEAR_ASKED.search(query):
        return AskedValue.NUMBER
    if _DAY_ASKED.search(query):
        return AskedValue.DAY
    return None


def states_value(kind: AskedValue, text: str, query: str) -> bool:
    """Whether ``text`` could state a value of ``kind`` that ``query`` does not already hold: a name is a
    word new to the query that reads as one (``_names_someone``), or words after "called" or in quotes;
    a number any digit or number word; a time that or a time of day; a day any of those or a weekday,
    month or season. Example: NAME, "my sister Aoife is visiting", "what's my sister called?" -> True;
    NAME, "maeve's cat hates me", "what's maeve's cat called?" -> False."""
    asked = {_POSSESSIVE.sub("", w.lower()) for w in _WORD.findall(query)}  # "maeve's" asks of maeve
    words = [w for w in _WORD.findall(text) if _POSSESSIVE.sub("", w.lower()) not in asked]
    lowered = {w.lower().replace("’", "'") for w in words}
    if kind is AskedValue.NAME:
        cued = (m.group(1) or m.group(2) for m in _NAME_CUE.finditer(text))
        return any(_POSSESSIVE.sub("", c.lower()) not in asked for c in cued) or _names_someone(
            _WORD.findall(text), asked
        )
    if kind is AskedValue.COLOUR:
        return bool(lowered & _COLOURS)
    if _DIGIT.search(text) or lowered & _NUMBER_WORDS:
        return True
    if lowered & _TIME_WORDS:  # "at lunchtime" says when too
        return kind in (AskedValue.TIME, AskedValue.DAY)
    return kind is AskedValue.DAY and bool(lowered & _DAY_WORDS)


def missing_value(query: str, texts: dict[str, str]) -> dict[str, str]:
    """Id -> the kind of value ``query`` asks for, for each row of ``texts`` (id -> text) that does not
    state one (``states_value``); empty when the question asks for no particular kind."""
    kind = asked_value(query)
    if kind is None:
        return {}
    return {row_id: kind.value for row_id, text in texts.items() if not states_value(kind, text, query)}


def _names_someone(words: list[str], asked: set[str]) -> bool:
    """A word new to the query that reads as a name: capitalised (not "I'm", not the rest of a name
    the query holds), or, as chat is often typed in lower case, a possessive without a determiner
    ("hana's piano", not "my mum's") or the other in "me and maeve" / "maeve and I"."""
    for i, word in enumerate(words):
        bare, possessive = _POSSESSIVE.subn("", word)
        low = bare.lower()
        before = words[i - 1].lower() if i else ""
        if len(bare) < 2 or low in STOPWORDS or low in asked or _I.match(bare):
            continue
        if bare[0].isupper() and before in asked and words[i - 1][0].isupper():
            continue  # the rest of a name the query holds: "Arrowline Logistics" for "arrowline"
        after = " ".join(words[i + 1 : i + 3]).lower()
        if (
            bare[0].isupper()
            or (possessive and before not in _DETERMINERS)
            or (before == "and" and i > 1 and words[i - 2].lower() == "me")
            or after in ("and i", "and me")
        ):
            return True
    return False
