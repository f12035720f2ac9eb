"""Word handling shared by the BM25 query builders (storage), consolidation's dedup guard and recall's
speaker match."""

from __future__ import annotations

import re

# Query words too common to help BM25 but costly to match (they hit most rows of a tenant).
STOPWORDS = frozenset(
    """
    a about above after again all am an and any are as at be been before being below between both
    but by can could did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours out over own same she should so some
    such than that the their theirs them then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your yours
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_WORD = re.compile(r"\w+(?:[.\-']\w+)*")  # keeps v15.3, E-214, don't together as one query term
MAX_QUERY_TERMS = 32


def fts_words(text: str) -> list[str]:
    """The query's distinct words, lowercased, stopwords dropped (unless nothing else is left)."""
    words = [w.lower() for w in _WORD.findall(text)]
    terms = [w for w in words if w not in STOPWORDS] or words
    return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]


# "Caroline: ..." / "Dr. Ann Lee: ..." at the start of a transcript line: one to three words before ": ".
_TRANSCRIPT_SPEAKER = re.compile(r"(\w[\w'.-]*(?: \w[\w'.-]*){0,2}): ")
_NAME_WORD = re.compile(r"\w+")


def transcript_speaker(text: str) -> str | None:
    """The name a transcript line opens with, else None: one to three words before ``": "``, each
    capitalized and not all capitals (``"RACE DAY: Bath half"`` is a heading, ``"E-214: ..."`` a code).

    Examples: ``"Caroline: I went to the support group"`` -> ``"Caroline"``; ``"Dr. Ann Lee: take two"``
    -> ``"Dr. Ann Lee"``; ``"note to self: buy milk"`` -> None.
    """
    found = _TRANSCRIPT_SPEAKER.match(text)
    if found is None:
        return None
    words = found.group(1).split()
    capitalized = all(w[0].isupper() and not (len(w) > 1 and w.isupper()) for w in words)
    return found.group(1) if capitalized else None


def name_words(text: str) -> frozenset[str]:
    """The words a name can be recognised by in a query: lowercased, possessives and punctuation split
    off, stopwords and single letters dropped. ``"What might John's degree be?"`` -> {"might", "john",
    "degree"}; ``"Dr. Ann Lee"`` -> {"dr", "ann", "lee"}."""
    return frozenset(w for w in _NAME_WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS)
