"""Pure checks applied to the LLM's output before anything is written."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from engram.models import Vectors
from engram.text import STOPWORDS

_WORD = re.compile(r"[^\W_]+")


_SUFFIXES = ("ing", "ed", "es", "s")


def _norm(word: str) -> str:
    """A light stem, so chews ~ chewing ~ chew and cables ~ cable."""
    word = word.lower()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words(text: str) -> set[str]:
    return {_norm(w) for w in _WORD.findall(text)}


def distinctive_words(text: str) -> set[str]:
    """Content words of a fact: no stopwords, no one- or two-letter tokens."""
    return {w for w in words(text) if len(w) > 2 and w not in STOPWORDS}


def assistant_only_words(fact: str, user_texts: Iterable[str], assistant_texts: Iterable[str]) -> set[str]:
    """Distinctive words of ``fact`` that the assistant said and the user never did.

    A non-empty result means the fact came (at least partly) from the assistant's words, which are
    context, never a source of facts: such a fact is dropped.
    """
    user = set().union(*(words(t) for t in user_texts))
    assistant = set().union(*(words(t) for t in assistant_texts))
    return {w for w in distinctive_words(fact) if w in assistant and w not in user}


def cosine_to_neighbours(candidate: Vectors, neighbours: Vectors) -> Vectors:
    """Cosine similarity of one L2-normalised vector to each row of another (also normalised)."""
    if len(neighbours) == 0:
        return np.zeros(0, dtype=np.float32)
    similarities: Vectors = neighbours @ candidate
    return similarities


_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|nobody|neither|nor|anymore|former|ex)\b|n['’]t\b", re.I
)
_NUMBER = re.compile(r"\d+")


def differs_in_detail(new: str, old: str) -> bool:
    """Whether two facts close enough to be one differ in what they say: a number ("Mia is 8" / "Mia
    is 7", "E-4012" / "E-4021"), a negation ("Sam is not vegetarian any more"), or a content word
    ("prefers email contact" / "prefers phone contact", "lived in Edinburgh as a child"). Such a pair
    is a change or another fact, never a merge: the judge decides."""
    if set(_NUMBER.findall(new)) != set(_NUMBER.findall(old)):
        return True
    if bool(_NEGATION.search(new)) != bool(_NEGATION.search(old)):
        return True
    return distinctive_words(new) != distinctive_words(old)


def classify(similarity: float, duplicate_at: float, judge_from: float) -> str:
    """``duplicate`` at or above ``duplicate_at``; ``judge`` in [judge_from, duplicate_at); else ``new``."""
    if similarity >= duplicate_at:
        return "duplicate"
    if similarity >= judge_from:
        return "judge"
    return "new"


def cited(ids: Sequence[str], allowed: set[str]) -> list[str]:
    """The cited ids that are episodes of this batch (others are ignored, never trusted)."""
    return [i for i in dict.fromkeys(ids) if i in allowed]
