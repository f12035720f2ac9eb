"""The kind of value a question asks for, and whether a row states one: a row without it cannot answer.

"what's maeve's cat called?" over "maeve's cat hates me btw" is a near-perfect match for every model
recall has (same words, same subject), yet the row holds no name, so it cannot be the answer. Questions
about something never said are mostly of this shape: a name, a number, a day, a colour or someone's
occupation asked about a subject that was mentioned. Recall lowers the confidence of such rows
(``Settings.missing_value_factor``) and, less, their score (``missing_value_rank``: an answer close
behind goes first; docs/benchmarks.md).

The checks are deliberately generous to the row, as a row wrongly judged to lack the value loses most
of its confidence: any capitalised word new to the query counts as a name, any number new to it as a
number or a day, and a row longer than ``LONG_ROW`` characters always counts. A question answered by
when the row was said ("when did we move?", "what year did I start?") asks for nothing in the text: the
hit's event time answers it; nor does a yes/no question, a "why", or a question in two parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from engram.retrieval.own_voice import names_nobody
from engram.retrieval.value_words import (
    COLOURS,
    DAY_WORDS,
    DURATION_WORDS,
    MONEY_SUFFIXES,
    MONEY_WORDS,
    NOT_A_SUM_NEXT,
    NOT_NAMES,
    NUMBER_WORDS,
    TIME_WORDS,
    words_of,
)
from engram.text import NAME_TITLES, STOPWORDS, user_id_words


class AskedValue(StrEnum):
    """What a question wants in its answer's text."""

    NAME = "name"
    NUMBER = "number"  # how much / many / far, a year
    AMOUNT = "amount"  # of money: a price paid, a fee, a rent, a salary
    DURATION = "duration"  # how long, how old: a number or "a decade", "in his thirties"
    TIME = "time"  # of day: "8pm", "half six", "mornings"
    DAY = "day"  # a weekday, date, month or season
    COLOUR = "colour"
    OCCUPATION = "occupation"  # what someone does for a living


LONG_ROW = 2_000  # characters: a row this long nearly always holds a value of any kind; not worth a scan


_I = re.IGNORECASE
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
_NUMBER = re.compile(r"\d+")
# A yes/no question ("is my cat called Biscuit?") or a "why" holds its value already, or asks none.
_NO_VALUE = re.compile(
    r"^\s*(?:is|are|am|was|were|do|does|did|has|have|had|can|could|will|would|should)\b|\bwhy\b", _I
)
# Two questions in one ("what's my cat called and what breed is she?"): a row may answer either part;
# not a relative "where" or "who" ("the name of the church where she sings").
_TWO_QUESTIONS = re.compile(r"(?:\band|[,;?])\s+(?:what|what's|whats|who|whose|where|when|which|how)\b", _I)
_NAME_ASKED = re.compile(r"\b(?:names?|named|nicknames?|surnames?|called)\b", _I)
_CALLED_SOMEONE = re.compile(r"\b(?:i|you|he|she|we|they|who|someone|somebody|anyone)\s+called\b", _I)
_COLOUR_ASKED = re.compile(r"\b(?:what|which) colou?rs?\b|\bcolou?rs? (?:is|are|was|were)\b", _I)
_TIME_ASKED = re.compile(r"\bwhat time\b(?! zones?\b| of (?:the )?year\b)", _I)
_DURATION_ASKED = re.compile(r"\bhow (?:long|old)\b(?! ago\b)|\bwhat age\b", _I)
_NUMBER_ASKED = re.compile(r"\bhow (?:much|many|far)\b", _I)
_YEAR_ASKED = re.compile(r"\bwhat year\b", _I)
# Money: "how much did I pay for the flat?", "how much is my rent?", "what was the adoption fee?", "what's
# my salary?"; not "how much time do I spend on it?", "how much leave do I earn?" (how much of something
# else), "what's my rent due date?", "when is my salary paid?" (a day), "how much do I weigh?" (a number).
# Bounded gaps: a 16,000-character query is read in linear time.
_AMOUNT_ASKED = re.compile(
    r"\bhow much\s+(?:(?:money|cash|rent|tax)\s+)?(?:do|does|did|is|was|are|were|will|would|should|have|has"
    r"|had|can|could|am|i|we|you|he|she|they|it)\b[^?.!]{0,80}?\b(?:pay|paid|pays|paying|cost|costs|costing|charged?"
    r"|charges|charging|spen[dt]|spending|earn|earns|earned|earning|make|makes|made|owe|owed|sell|sold|worth|rent"
    r"|fee|price|salary|wage)\b"
    r"|\bwhat(?:['’]s| is| was| are| were)\s+(?:[\w'’]+\s+){0,3}?(?:fee|price|cost|rent|salary|wage)s?"
    r"(?=\s*(?:[?.!,]|$)|\s+(?:now|then|for|of|in|at|on|per|with|these|this|each|every|a|again|currently|like)\b)"
    r"|\bwhat price\b",
    _I,
)
# ... is stated by a sum: a number with a currency ("£70k", "R4500", "120k cedi", "twelve pounds", "two
# grand", "free"), or a number standing alone ("I pay 1350 a month", "800-900"); not a time, date,
# ordinal, measure or part of a model's name ("6am", "17:30", "the 14th", "13 dec", "18.000 km", "CX-5")
_NUMBER_TOKEN = re.compile(
    r"(?<![\w.,:-])(?P<pre>[£$€¥₹]|(?:r|rs|usd|eur|gbp|aud|sgd|nzd|chf|nok|ghs|kr)\.?\s?(?=\d))?"
    r"(?P<num>\d[\d,.]*+)(?P<suf>[^\W\d_]*)(?:\s+(?P<next>[^\W\d_]+|%))?",
    _I,
)
# ... a year is not: "(bought September 2024)", "since 2019" ("paid 2000 for it" is a sum)
_A_YEAR = re.compile(
    r"\b(?:in|since|from|until|till|before|after|jan|feb|mar|apr|may|jun|jul|aug|sept?|oct|nov|dec|january"
    r"|february|march|april|june|july|august|september|october|november|december)\.?,?\s+(?:19|20)\d\d$",
    _I,
)
# "what does sean do for work?", "what did julien do for a living?", "what is her occupation?"; not "what's
# my job now?" (answered as often without the words below: "junior sister on AMU from january"), nor
# "where did I work as a waiter?" or "what did I say about the teaching profession?"
_OCCUPATION_ASKED = re.compile(
    r"\bdo (?:for (?:a )?(?:living|work|job|money)|as (?:a )?(?:job|work))\b"
    r"|\bwhat (?:does|do|did) [\w'’ ]{1,40}? work as\b"
    r"|\bwhat(?:['’]s| is| was| are)\s+(?:[\w'’]+\s+){0,2}?(?:occupation|profession|line of work)\b",
    _I,
)
# ... stated generously: "is / 's / became / and / as (a word or two) a <word>" ("she's a physio", "now a
# nurse", "and a nurse", "as a designer"), "runs / owns a ...", a title
# ("head of sales", "CTO"), "works as / at / for / in", "my job is", "I teach", "lectures", "in sales",
# "retired", "freelance"; not "sean's work is flexible", "he works remote", "is a 1 bed"
_OCCUPATION = re.compile(
    r"(?:\b(?:is|am|are|was|were|be|been|became|becomes|become|and|as)|['’](?:s|m|re))\s+(?:[^\W\d_]+\s+){0,2}?"
    r"(?:a|an)\s+(?!\d)[^\W\d_]"
    r"|\b(?:runs|owns|manages|founded|started)\s+(?:a|an|the|his|her|their|my|our)\b"
    r"|\b(?:head|chief|director|manager|lead|founder|owner|partner)\s+(?:of|at|for)\b"
    r"|\b(?:the\s+)?(?:cto|ceo|cfo|coo|vp|md)\b"
    r"|\b(?:works?|worked|working|employed|trained|qualified)\s+(?:as|at|for|in|with)\b|\bjobs?\s+(?:as|at|is|was)\b"
    r"|\b(?:teach(?:es|ing)?|lectures?|lecturing|retired|unemployed|student|freelanc\w*|self[- ]employed)\b"
    r"|\bin\s+(?:sales|marketing|it|tech|finance|hr|retail|hospitality|construction|healthcare|education"
    r"|law|banking|insurance|consulting|admin|accounts|logistics|engineering|software|nursing|medicine)\b",
    _I,
)
_DAY_ASKED = re.compile(
    r"^\s*when\b|\b(?:what|which) (?:days?|nights?|date|month)\b|\bwhat time of (?:the )?year\b", _I
)
_BIRTHDAY = re.compile(r"\bbirthdays?\b", _I)  # comes round again: asked of any tense
# "when did / was ...", "what year did ...": asked when an event was, which the hit's event time says;
# "used to" is a habit.
_EVENT = re.compile(r"\b(?:did|was|were|ago)\b", _I)
_HABIT = re.compile(r"\bused? to\b", _I)

# A question asking a person's or an animal's name ("what's my sous chef called?", "what's maeve's cat
# called?"), not a place's or a group's ("what's the vet practice called?", "what's my band called?").
_SOMEONE_ASKED = re.compile(
    r"\b(?:sister|brother|sibling|twin|mum|mam|mom|mother|dad|father|parent|son|daughter|kid|child|children"
    r"|baby|niece|nephew|cousin|aunt|auntie|uncle|grand(?:son|daughter|child|kid|ma|mother|pa|father|dad)"
    r"|nan|gran|wife|husband|partner|spouse|girlfriend|boyfriend|ex|fianc[eé]e?|friend|flatmate|roommate"
    r"|housemate|neighbou?r|boss|manager|supervisor|colleague|co-?worker|teacher|tutor|coach|trainer"
    r"|instructor|chef|owner|landlord|landlady|doctor|gp|vet|dentist|physio|therapist|midwife|nurse|agent"
    r"|lawyer|solicitor|accountant|mechanic|cat|dog|puppy|kitten|rabbit|bunny|hamster|horse|pony|pet"
    r"|chook|hen|chicken|bird|parrot|budgie|tortoise|labrador|retriever)s?(?:['’]s)?\b"
    r"(?!\s+(?:practice|clinic|surgery|school|team|band|club|shop|company|firm|agency|group)\b)",
    _I,
)
# ... which the place after "at", "in", "near" (a determiner between) is not, nor after "to" or "from"
# moved along ("goes to Gowrie Street kinder", "over from Belfast"; "a card to Magda", "a crush on Priya",
# "in Mia's car" name someone)
_AT_PLACE = words_of("at in near into outside inside around opposite behind")
_ALONG = words_of(
    """
    go goes going went gone come comes coming came move moves moving moved over back fly flew flying drive
    drove driving trip way down up out home off travel commute walk walked train flight bus ride
    """
)

_NAME_CUE = re.compile(
    r"\b(?:call|calls|called|calling|named|nicknamed|name is|name's|names are|name was)\s+"
    r"(?:(?:him|her|them|it)\s+)?[\"“‘']?([^\W\d_][\w'’-]*)",
    _I,
)
_QUOTED = re.compile(r"[\"“‘]([^\"”’]{1,60})[\"”’]|(?<!\w)'([^']{1,60})'(?!\w)")
_MAYBE_NAME = re.compile(r"[A-Z\"“‘']|call|nam|['’]s\b|\band\b|[^\x00-\x7f]|\b(?:dr|mrs?|ms|mx|prof)\b")
_NO_SUCH = re.compile(r"\bno\s+([^\W\d_]+)", _I)  # "no kids" answers "how many kids?"
_TITLES = NAME_TITLES - {"miss", "sir", "madam"}  # "I really miss london": no title
_I_AM = ("I'", "I’")  # I'm, I've, I'd, I'll: capitalised, no one's name
_DETERMINERS = words_of("the a an my your his her its our their this that every each no")
_ACCEPTS: dict[AskedValue, frozenset[str]] = {  # the words that state a value of each kind, digits aside
    AskedValue.NUMBER: NUMBER_WORDS,
    AskedValue.DURATION: NUMBER_WORDS | DURATION_WORDS,
    AskedValue.TIME: NUMBER_WORDS | TIME_WORDS,
    AskedValue.DAY: NUMBER_WORDS | TIME_WORDS | DAY_WORDS,
    AskedValue.COLOUR: COLOURS,
}


def asked_value(query: str) -> AskedValue | None:
    """The kind of value ``query`` asks for, or None (most questions: "where do I live?", "what car do I
    drive?" can be answered in any words; see the module docstring). Example: "what's my sister
    called?" -> NAME; "how much is my rent?" -> AMOUNT; "how many dogs?" -> NUMBER; "when did we move?"
    -> None."""
    if _NO_VALUE.search(query) or _TWO_QUESTIONS.search(query):
        return None
    if _NAME_ASKED.search(query) and not _CALLED_SOMEONE.search(query):
        return AskedValue.NAME
    if _AMOUNT_ASKED.search(query):
        return AskedValue.AMOUNT
    for pattern, kind in (
        (_COLOUR_ASKED, AskedValue.COLOUR),
        (_TIME_ASKED, AskedValue.TIME),
        (_DURATION_ASKED, AskedValue.DURATION),
        (_NUMBER_ASKED, AskedValue.NUMBER),
    ):
        if pattern.search(query):
            return kind
    if _OCCUPATION_ASKED.search(query):
        return AskedValue.OCCUPATION
    if _DAY_ASKED.search(query) and _BIRTHDAY.search(query):
        return AskedValue.DAY
    if _EVENT.search(query) and not _HABIT.search(query):
        return None
    if _YEAR_ASKED.search(query):
        return AskedValue.NUMBER
    return AskedValue.DAY if _DAY_ASKED.search(query) else None


# The user's own name is asked: "what's my surname?", "my nickname at work?"
_OWN_NAME_ASKED = re.compile(
    r"\bmy\s+(?:(?:first|last|full|middle|maiden|given|family|user|screen|pet)\s+)?(?:nick|sur)?names?\b", _I
)


@dataclass(frozen=True)
class _Query:
    words: frozenset[str]  # lower case, possessives stripped: "maeve's" asks of maeve
    numbers: frozenset[str]
    someone: bool = False  # a person's or an animal's name is asked (_SOMEONE_ASKED)
    user: frozenset[str] = frozenset()  # the user's own name, unless it is what is asked

    @classmethod
    def of(cls, query: str, user: frozenset[str] = frozenset()) -> _Query:
        """``user``: the words of the user's own name, which answer no name question but one asking
        theirs: a fact consolidation wrote, "Yusuf is head chef at Ffwrn", names no sous chef."""
        words = frozenset(_bare(w) for w in _WORD.findall(query))
        user = frozenset() if _OWN_NAME_ASKED.search(query) else user
        return cls(words, frozenset(_NUMBER.findall(query)), bool(_SOMEONE_ASKED.search(query)), user)


def states_value(kind: AskedValue, text: str, query: str, user_id: str = "") -> bool:
    """Whether ``text`` could state a value of ``kind`` that ``query`` does not already hold: a name is
    a word new to the query that reads as one (``_names_someone``), a word after "called" or in quotes;
    a number a number new to the query or a number word; a duration, a time of day or a day that or a
    word of its kind ("a decade", "at lunchtime", "next tues"). Example: NAME, "my sister Aoife is
    visiting", "what's my sister called?" -> True; NAME, "maeve's cat hates me", "what's maeve's cat
    called?" -> False. The user's own name (``user_id``'s words) names no one else, as in
    ``missing_value``."""
    return _states(kind, text, _Query.of(query, user_id_words(user_id)))


def missing_value(query: str, texts: dict[str, str], user_id: str = "") -> dict[str, str]:
    """Id -> the kind of value ``query`` asks for, for each row of ``texts`` (id -> text) that does not
    state one (``states_value``); empty when the question asks for no particular kind. The user's own
    name (the words of ``user_id``, ``text.user_id_words``) answers no one else's name. Every row, as
    ``about <name>``, when the question is about someone none of them mentions (``unknown_name``)."""
    if texts and (unknown := unknown_name(query, texts.values(), user_id)):
        return dict.fromkeys(texts, f"about {unknown}")  # none of them can answer
    kind = asked_value(query)
    if kind is None:
        return {}
    asked = _Query.of(query, user_id_words(user_id))
    return {row_id: kind.value for row_id, text in texts.items() if not _states(kind, text, asked)}


# Whom a question is about: "where does Sarah live?", "what is Sarah's job?" (not "hey Claude, ...",
# "Hi! Quick question", "what did I get Tom for Christmas?", "which Google phone?")
_ASKED_OF = re.compile(
    r"\b(?:does|did|do|is|was|has|had|will|would|can|could|should)\s+([A-Z][^\W\d_]+)\b(?!['’])"
    r"|\b([A-Z][^\W\d_]+)['’]s\b"
)


def unknown_name(query: str, texts: Iterable[str], user_id: str = "") -> str | None:
    """The person a question is about (``_ASKED_OF``: capitalised, the subject after an auxiliary or a
    possessive; not the user's own name, a title, a relation ("Auntie Jo") or a line label) when no
    text mentions them (``_mentioned``), if any: "where does Sarah live?" asked of a memory that never
    named Sarah (a newcomer's walk: "Alex lives in Edinburgh" came back at 0.15), whatever ranks first
    is about someone else. Only where the texts name the user by the words of ``user_id``: else the
    name may be the user's own, which their turns need not say ("Where does Aisha's brother live?" of
    "my brother moved to Dubai", user "u-8f3a"; "user_42" names no one, though facts say "User ...")."""
    user = user_id_words(user_id)
    names = [_bare(a or b) for a, b in _ASKED_OF.findall(query)]
    names = [
        n
        for n in names
        if n not in user
        and n not in STOPWORDS
        and n not in NOT_NAMES | NAME_TITLES
        and not _SOMEONE_ASKED.match(n)
    ]
    if not names or names_nobody(user_id):
        return None
    said = " ".join(texts).casefold()
    if not any(re.search(rf"\b{re.escape(word)}\b", said) for word in user):
        return None
    return next((name for name in names if not _mentioned(name, said)), None)


def _mentioned(name: str, said: str) -> bool:
    """Whether ``said`` (casefolded) has a word that starts ``name`` or that ``name`` starts, of three
    letters or more: "Sam from work" mentions Samantha, "Sarah's" Sarah."""
    found = re.findall(rf"\b{re.escape(name[:3])}\w*", said)
    return any(name.startswith(word) or word.startswith(name) for word in found)


def _states(kind: AskedValue, text: str, asked: _Query) -> bool:
    if len(text) > LONG_ROW:
        return True
    if kind is AskedValue.NAME:
        if not _MAYBE_NAME.search(text):  # most chat rows: no capital, quote, cue, possessive or "and"
            return False
        cued = [m.group(1) for m in _NAME_CUE.finditer(text)]
        cued += [w for m in _QUOTED.finditer(text) for w in _WORD.findall(m.group(1) or m.group(2))]
        # a name given outright ("my manager is also called Chris") may be the user's own too
        return any(_new(w, asked) for w in cued) or _names_someone(text, asked)
    if kind is AskedValue.OCCUPATION:
        return bool(_OCCUPATION.search(text))
    if kind is AskedValue.AMOUNT:
        return _states_sum(text, asked)
    if kind is not AskedValue.COLOUR and set(_NUMBER.findall(text)) - asked.numbers:
        return True
    said = {_bare(w) for w in _WORD.findall(text)} - asked.words
    said |= {w[:-3] for w in said if w.endswith("ish")}  # "reddish", "sevenish"
    if kind in (AskedValue.NUMBER, AskedValue.DURATION):
        said |= {"none" for m in _NO_SUCH.finditer(text) if _bare(m.group(1)) in asked.words}
    return bool(said & _ACCEPTS[kind])


def _states_sum(text: str, asked: _Query) -> bool:
    """Whether ``text`` states a sum of money the query does not hold (``_NUMBER_TOKEN``), or names one
    in words (``MONEY_WORDS``); a year is none ("bought September 2024", "in 2019": ``_A_YEAR``)."""
    for found in _NUMBER_TOKEN.finditer(text):
        number, suffix, after = found["num"].rstrip(",."), found["suf"].lower(), (found["next"] or "").lower()
        if number in asked.numbers or text[found.end("num") : found.end("num") + 1] == ":":  # "17:30"
            continue
        if not found["pre"] and not suffix and _A_YEAR.search(text, 0, found.end("num")):
            continue
        if found["pre"] or suffix in MONEY_SUFFIXES or (not suffix and after not in NOT_A_SUM_NEXT):
            return True
    return bool({_bare(w) for w in _WORD.findall(text)} & MONEY_WORDS)


def _names_someone(text: str, asked: _Query) -> bool:
    """A word new to the query that reads as a name: capitalised (not "I'm", not the rest of a name the
    query holds, as "Logistics" in "Arrowline Logistics" asked as "arrowline"), in a script without
    letter case, or, as chat is often typed in lower case, a possessive without a determiner ("hana's
    piano", not "my mum's"), a word after a title ("dr patel") or the other in "me and maeve" / "maeve
    and I"."""
    matches = list(_WORD.finditer(text))
    words = [m.group() for m in matches]
    bares = [_bare(w) for w in words]  # once per word: this runs on every candidate of a recall
    places: set[int] = set()
    for i, word in enumerate(words):
        low = bares[i]
        if asked.someone and word[0].isupper() and _names_a_place(i, text, matches, bares, places):
            places.add(i)
            continue
        if not _fresh(low, asked) or low in asked.user or low in NOT_NAMES or word[:2] in _I_AM:
            continue
        if word[0].isupper():
            before = i - 1
            held = before >= 0 and words[before][0].isupper() and bares[before] in asked.words
            if (
                held
                and bares[before] not in STOPWORDS
                and bares[before] not in NAME_TITLES  # "Dr Evans" is not "Dr Khan"
                and text[matches[before].end() : matches[i].start()].isspace()
            ):
                continue  # the rest of a name the query holds
            return True
        if not word[0].islower():  # a script without letter case
            return True
        previous = bares[i - 1] if i else ""
        possessive = word.lower().endswith(("'s", "’s"))
        if (
            (possessive and previous not in _DETERMINERS)
            or previous in _TITLES  # "dr patel"
            or (previous == "and" and i > 1 and bares[i - 2] == "me")
            or bares[i + 1 : i + 3] in (["and", "i"], ["and", "me"])
        ):
            return True
    return False


def _names_a_place(
    i: int, text: str, matches: list[re.Match[str]], bares: list[str], places: set[int]
) -> bool:
    """Whether the capitalised ``i``-th word of a row answering a person's or an animal's name is no
    one's: a place ("at the Brass Hare in Pontcanna", "goes to Gowrie Street kinder", with the rest of
    its name, never a possessive) or an acronym of three letters or more ("my VHI renewal"; "my son AJ"
    is a name)."""
    word = matches[i].group()
    if len(word) > 2 and word.isupper() and not text.isupper():  # a shouted row is no acronym's
        return True
    if word.lower().endswith(("'s", "’s")):
        return False
    if i - 1 in places and text[matches[i - 1].end() : matches[i].start()].isspace():
        return True  # the rest of a place's name
    before = i - 2 if i > 1 and bares[i - 1] in ("the", "a") else i - 1
    if before < 0:
        return False
    at = bares[before]
    return at in _AT_PLACE or (at in ("to", "from") and before > 0 and bares[before - 1] in _ALONG)


def _new(word: str, asked: _Query) -> bool:
    return _fresh(_bare(word), asked)


def _fresh(low: str, asked: _Query) -> bool:
    """A (bared) word that could be the value: not the query's, not a stopword, not a single letter."""
    return len(low) > 1 and low not in asked.words and low not in STOPWORDS


def _bare(word: str) -> str:
    """Lower case, without a possessive: "Maeve's" -> "maeve" (string operations: it runs per word)."""
    low = word.lower().replace("’", "'")
    return low[:-2] if low.endswith("'s") else low
