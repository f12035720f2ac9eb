"""What the cross-encoder reads: the query and the user's memories in the user's own voice.

The user's turns say "I" and "my"; the facts consolidation writes name them ("Sarah's brother is called
Tom"); an agent asks either way ("what is my brother's name?", "What is Sarah's brother's name?"). The
cross-encoder weighs a name shared by query and passage above everything else: the same fact scored
0.60 for the first question and 1.00 for the second, and "Where does Sarah's brother live?" scored 0.98
against "Sarah's brother is called Tom", which says nothing of where he lives. Put in the first person
on both sides ("what is my brother's name?" / "my brother is called Tom"), the two questions score
alike (0.99) and the never-said one 0.05 (docs/benchmarks.md, "The user's own voice").

``own_voice`` rewrites the user's name (a word of their user id, written capitalised), and in a fact
"User" or "The user" as its subject (how agents and other memory tools word facts: "User drives a
Tesla"), with a few English rules: "Sarah's" -> "my", "is Sarah" -> "am I", "Sarah is" -> "I am",
"Sarah lives" -> "I live", "with Sarah", "Tom loves Sarah" -> "me", any other "Sarah" -> "I". The
rewrite is for the cross-encoder's input only; nothing stored or shown changes.
"""

from __future__ import annotations

import re
from functools import lru_cache

from engram.text import STOPWORDS, user_id_words

# question inversions ("is Sarah vegetarian?") and a subject's auxiliary ("Sarah is a nurse")
_ASKED = {"is": "am I", "was": "was I", "does": "do I", "did": "did I", "has": "have I"}
_TOLD = {
    "is": "I am",
    "was": "I was",
    "has": "I have",
    "does": "I do",
    "isn't": "I'm not",
    "wasn't": "I wasn't",
    "hasn't": "I haven't",
    "doesn't": "I don't",
}
_ES_ENDINGS = ("sses", "shes", "ches", "xes", "zes", "oes")  # "watches" -> "watch", "goes" -> "go"
# A month is rarely the user ("in May", "3 June"); "user" names nobody ("user42").
_NOT_NAMES = frozenset(
    "user january february march april may june july august september october november december".split()  # noqa: SIM905
)
_CONJUNCTIONS = frozenset("and or but then so nor yet".split())  # noqa: SIM905 ("Tom and Sarah went": subject)
# Whoever the memory belongs to, as an agent's facts name them: "User prefers tea", "The user's dog is
# Rex": a fact's subject, at the start of a sentence, before a possessive, an auxiliary or a verb (not
# "User stories are due", "how do I reset the user password?", which are about other things).
_USER_SUBJECT = re.compile(
    r"(?:^|(?<=[.!?;]\s))(?:The\s+user|User)"
    r"(?P<after>['’]s\b|\s+(?:is|was|has|does|isn't|wasn't|hasn't|doesn't)\b|\s+[a-z]+s\b(?!\s+(?:are|were)\b))"
)
_FIRST_PERSON = re.compile(r"\b(?:I|[Ww]e)\b")  # as a subject: "my sister lives in Belfast" is hers
_TITLE = re.compile(r"(?:Mr|Mrs|Ms|Miss|Dr|Prof|Sir|Dame)\.?\s+$")
_WORD_BEFORE = re.compile(r"([\w'’-]+)\W*$")


def own_voice(text: str, user_id: str, fact: bool = False) -> str:
    """``text`` with the user's name (capitalised words of ``user_id``, ``text.user_id_words``) in the
    first person. ``("What is Sarah's brother's name?", "sarah")`` -> "What is my brother's name?";
    ``("Sarah lives in Leith", "sarah")`` -> "I live in Leith"; ``("Tom loves Sarah", "sarah")`` -> "Tom
    loves me". A ``fact`` also has "User" or "The user" as a sentence's subject rewritten
    (``_USER_SUBJECT``): ``("User drives a Tesla", "u1", fact=True)`` -> "I drive a Tesla". Left as
    written: a name after a title or another capitalised word ("Mrs Jones", "Amazing Grace") or before
    one ("Sarah Jones"); any text for no user id ("": read as written)."""
    if not user_id:
        return text
    if fact:
        text = _USER_SUBJECT.sub(_user_as_subject, text)
    names, mention = _voice_of(user_id)
    if mention is None or not any(n.capitalize() in text for n in names):
        return text
    return mention.sub(_first_person, text)


def _user_as_subject(m: re.Match[str]) -> str:
    after = m.group("after")
    if after.startswith(("'", "’")):
        return "my"
    return _TOLD.get(after.strip()) or "I " + _base_form(after.strip())


def of_user(fact: str, user_id: str | None) -> bool:
    """Whether a fact says something of the user themself, read in their voice (``own_voice``) with
    "I" or "we": ``("Jo lives in Bristol", "jo")`` and ``("User drives a Tesla", "u1")`` -> True;
    ``("Jo's sister lives in Belfast", "jo")``, ``("Maeve's parents live in Belfast", "ines")`` -> False."""
    return bool(user_id) and bool(_FIRST_PERSON.search(own_voice(fact, user_id or "", fact=True)))


def names_user_uncapitalised(text: str, user_id: str) -> bool:
    """Whether ``text`` writes a word of the user's name in lower case ("where does sarah live?"), which
    ``own_voice`` leaves alone: then nothing should be rewritten, or the facts would speak in a voice
    the query does not."""
    return any(re.search(rf"(?<![\w'’-]){re.escape(n)}(?![\w-])", text) for n in _voice_of(user_id)[0])


@lru_cache(maxsize=1024)
def _voice_of(user_id: str) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """The user's name words (longest first) and the pattern of a mention of them, made once per user
    id: a recall rewrites its query and up to a window of passages."""
    names = tuple(sorted((w for w in user_id_words(user_id) if w not in _NOT_NAMES), key=len, reverse=True))
    if not names:
        return names, None
    one = "|".join(re.escape(n.capitalize()) for n in names)
    mention = re.compile(
        rf"(?P<aux>\b(?i:is|was|does|did|has)\s+)?"
        rf"(?<![\w'’-])(?P<name>(?:{one})(?>(?:\s+(?:{one}))*))(?![\w-])(?!\s+[A-Z][a-z])"
        rf"(?P<after>['’]s\b|\s+(?:is|was|has|does|isn't|wasn't|hasn't|doesn't)\b|\s+[a-z]+s\b)?"
    )
    return names, mention


def _first_person(m: re.Match[str]) -> str:
    before = m.string[max(0, m.start("name") - 16) : m.start("name")]  # a bounded look back: linear
    word = _WORD_BEFORE.search(m.string[max(0, m.start() - 48) : m.start()])
    host = re.sub(r"['’]\w*$", "", word.group(1)).lower() if word else ""  # "What's" -> "what"
    if _TITLE.search(before) or (word and word.group(1)[0].isupper() and host not in STOPWORDS):
        return m.group(0)  # "Mrs Jones", "Amazing Grace", "Mark Jones": someone or something else
    aux, after = m.group("aux"), (m.group("after") or "")
    if after.startswith(("'", "’")):
        return (aux or "") + "my"
    if aux:
        return _ASKED[aux.strip().lower()] + after
    if after.strip() in _TOLD:
        return _TOLD[after.strip()]
    if after:
        return "I " + _base_form(after.strip())
    if word and word.group(1).islower() and word.group(1) not in _CONJUNCTIONS:
        return "me"  # "Tom loves Sarah", "with Sarah", "my mum calls Sarah"
    return "I"


def _base_form(verb: str) -> str:
    """A third-person verb's base form: "lives" -> "live", "studies" -> "study", "watches" -> "watch"."""
    if verb.endswith("ies") and len(verb) > 4:
        return verb[:-3] + "y"
    if verb.endswith(_ES_ENDINGS):
        return verb[:-2]
    return verb[:-1]


_HEX = frozenset("abcdef")  # "abcd" in a UUID is no name
_LEADING_NAME = re.compile(r"([A-Z][a-z]+(?:-[A-Z][a-z]+)?)(?=['’]s\b|\s)")


def names_nobody(user_id: str) -> bool:
    """A user id with no word that could be a name: "u-8f3a", "user_123", a UUID (not "sarah",
    "sam.smith@example.com")."""
    return not any(
        w.isalpha() and len(w) > 2 and w not in _NOT_NAMES and not set(w) <= _HEX
        for w in user_id_words(user_id)
    )


def in_own_words(fact: str) -> str:
    """A fact read as the user's own words when its first word is a name, taken to be the user's:
    ``"Sam's surname is Smith"`` -> "my surname is Smith". For a fact that superseded facts link to the
    user's own turn (``pipeline.stored_late_scores``), when the user id is no name to find in it."""
    lead = _LEADING_NAME.match(fact)
    if lead is None or lead.group(1).lower() in STOPWORDS or lead.group(1).lower() in _NOT_NAMES:
        return fact
    return own_voice(fact, lead.group(1).lower(), fact=True)
