"""Word handling shared by the BM25 query builders (storage), consolidation's dedup guard and recall's
speaker match; stored text made safe for a terminal."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

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
# Words that frame a question rather than say what it is about ("what's my brother's name?" is about a
# brother; an agent's "the user's phone model" about a phone): left out when recall checks that a hit
# covers what the query asks (query_coverage).
QUESTION_WORDS = frozenset("whats name named called tell remind know use using got user users".split())  # noqa: SIM905
_WORD = re.compile(r"\w+(?:[.\-'’]\w+)*")  # keeps v15.3, E-214, don't together as one query term
MAX_QUERY_TERMS = 32
# C0 and C1 control characters but newline and tab: terminal escapes start with ESC (or CSI, U+009B).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without control characters (but newlines and tabs): stored text printed to a terminal
    could otherwise clear the screen, or retitle and recolour it."""
    return _CONTROL.sub("", text)


def fts_words(text: str) -> list[str]:
    """The query's distinct words, lowercased, a possessive ``'s`` cut off ("jamie's" finds "Jamie" as
    well as "Jamie's"), stopwords dropped (unless nothing else is left)."""
    words = [_POSSESSIVE.sub("", w.lower()) for w in _WORD.findall(text)]
    terms = [w for w in words if w not in STOPWORDS] or words
    return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]


# "Caroline: ..." / "Dr. Ann Lee: ..." at the start of a transcript line: one to three words before ": ".
_TRANSCRIPT_SPEAKER = re.compile(r"(\w[\w'.-]*(?: \w[\w'.-]*){0,2}): ")
# Capitalized words that open a line as a label, not as a person's name ("Update: the courier says...",
# "Correction: my dentist is Dr. Lee", "Btw: ..."); months that are also first names (April, June,
# August, May) are left out.
LINE_LABELS = frozenset(
    """
    re fwd fw update updates edit note notes ps todo reminder summary question answer q a error warning
    info subject tip step status result fix issue problem solution idea goal plan correction
    corrections sorry actually btw fyi nb psa ok okay oh oops also anyway news change changes heads
    monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday
    january february march september october november december
    """.split()  # noqa: SIM905 - a word list reads better as text
)
# Titles say nothing about which person is meant: "Dr. Lee" and "Dr. Park" share only "dr".
NAME_TITLES = frozenset("mr mrs ms miss mx dr prof sir madam".split())  # noqa: SIM905
_POSSESSIVE = re.compile(r"['’]s$")
_CLITIC = re.compile(r"['’](?:s|t|ll|re|ve|d|m)$")  # we've, she'll, sister's -> its host
_CLITIC_AFTER = re.compile(r"['’](?:s|t|ll|re|ve|d|m)\b", re.IGNORECASE)
_NEGATED = re.compile(r"n['’]t$")  # didn't, won't, can't: an auxiliary, whatever its host
_LETTERS = re.compile(r"[^\W\d_]+")  # a run of letters: "alice.smith_42" -> alice, smith


def transcript_speaker(text: str) -> str | None:
    """The name a transcript line opens with, else None: one to three words before ``": "``, each
    capitalized and not all capitals (``"RACE DAY: Bath half"`` is a heading, ``"E-214: ..."`` a code),
    the first not a line label (``"Update: ..."``, ``"Monday: gym"``; ``LINE_LABELS``).

    Examples: ``"Caroline: I went to the support group"`` -> ``"Caroline"``; ``"Dr. Ann Lee: take two"``
    -> ``"Dr. Ann Lee"``; ``"note to self: buy milk"`` -> None; ``"Re: invoice 442"`` -> None.
    """
    found = _TRANSCRIPT_SPEAKER.match(unicodedata.normalize("NFC", text[:200]))  # a name is short
    if found is None:
        return None
    words = found.group(1).split()
    capitalized = all(w[0].isupper() and not (len(w) > 1 and w.isupper()) for w in words)
    label = words[0].rstrip(".").casefold() in LINE_LABELS
    return found.group(1) if capitalized and not label else None


def _words(text: str) -> list[str]:
    """Words as the BM25 query builder splits them (``don't`` stays whole), NFC-normalised and
    casefolded, a possessive ``'s`` cut off."""
    return [_POSSESSIVE.sub("", w) for w in _WORD.findall(unicodedata.normalize("NFC", text).casefold())]


def query_words(text: str) -> frozenset[str]:
    """The words of a query a speaker's name is looked for among, hyphenated words also by their
    parts: ``"What might Mary-Jane's degree be?"`` -> {"what", "might", "mary-jane", "mary", "jane",
    "degree", "be"}."""
    words = _words(text)
    return frozenset(words + [part for w in words if "-" in w for part in w.split("-")])


def name_words(name: str) -> frozenset[str]:
    """The words a person is recognised by: the name's words without titles, single letters and
    stopwords (a speaker called Will cannot be told from the verb). ``"Dr. Ann Lee"`` -> {"ann", "lee"};
    ``"Caroline"`` -> {"caroline"}."""
    words = [w.strip(".") for part in _words(name) for w in part.split("-")]
    return frozenset(w for w in words if len(w) > 1 and w not in STOPWORDS and w not in NAME_TITLES)


def user_id_words(user_id: str) -> frozenset[str]:
    """The words of a user id that can be the user's name: its runs of letters, an email's domain left
    out (``name_words`` of them). ``"alice.smith@example.com"``, ``"alice_smith"`` -> {"alice",
    "smith"}; ``"alice42"`` -> {"alice"}."""
    return name_words(" ".join(_LETTERS.findall(user_id.split("@", 1)[0])))


def user_named_in(query: str, user_id: str) -> str | None:
    """The user's own name as ``query`` writes it, when it names them (a word of ``user_id_words``,
    capitalised: a user called May or Mark is not named by "may I ..." or "mark it done"), else None.
    ``("Where does Aisha's brother live?", "aisha")`` -> "Aisha"; ``("where do I live?", "aisha")``,
    ``("what may I eat?", "may")`` -> None."""
    for word in sorted(user_id_words(user_id)):
        for found in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", query, re.IGNORECASE):
            if found.group(0)[0].isupper():
                return found.group(0)
    return None


def with_clitic(text: str, end: int) -> int:
    """Where the word ending at ``end`` ends with the clitic that follows it, if any: a tokenizer that
    splits at apostrophes leaves "didn" of "didn't", which is no content word (``is_content_word``)."""
    found = _CLITIC_AFTER.match(text, end)
    return found.end() if found else end


def is_content_word(word: str, ignore: frozenset[str] = frozenset()) -> bool:
    """Whether a query word says what the query is about: not a stopword, a question word
    (``QUESTION_WORDS``), a negated auxiliary ("didn't", "won't"), a single character, punctuation, or
    one of ``ignore`` (casefolded: the user's own name, which people rarely say of themselves); a
    clitic ("'s", "'ve" ...) is judged by its host. ``"brother's"`` -> True; ``"what"``, ``"we've"``
    -> False."""
    folded = unicodedata.normalize("NFC", word).casefold()
    if _NEGATED.search(folded):
        return False
    folded = _CLITIC.sub("", folded).lstrip("'’")  # "'ve" (a clitic alone) -> ""
    return (
        len(folded) > 1
        and any(ch.isalnum() for ch in folded)
        and folded not in STOPWORDS
        and folded not in QUESTION_WORDS
        and folded not in ignore
    )


def word_of_pieces(
    text: str, offsets: Sequence[tuple[int, int]], word_ids: Sequence[int | None], word: int
) -> str:
    """The text of word ``word`` of a tokenizer's encoding of ``text``: from its first piece's start to
    its last piece's end, with a contraction's clitic ("didn" with its "'t", "ve" as "'ve")."""
    spans = [offsets[i] for i, w in enumerate(word_ids) if w == word]
    start = spans[0][0] - (spans[0][0] > 0 and text[spans[0][0] - 1] in "'’")  # "ve" of "we've": "'ve"
    return text[start : with_clitic(text, spans[-1][1])]


def light_stem(word: str) -> str:
    """One inflection cut, then a final "e": "living", "lives", "lived", "live" -> "liv"; "works",
    "working" -> "work"; "glasses" -> "glass"; "bristol" -> "bristol". Enough to tell one word from
    another, not a lemma (the word comes casefolded)."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def content_stems(text: str) -> set[str]:
    """The light stems (``light_stem``) of a text's content words (``is_content_word``), all of them
    (``fts_words`` keeps a query's first 32)."""
    return {light_stem(w) for w in _words(text) if is_content_word(w)}
