"""Word handling shared by the BM25 query builders (storage) and consolidation's dedup guard."""

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
