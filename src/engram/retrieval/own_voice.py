"""What the cross-encoder reads: the query and the user's memories in the user's own voice.

The user's turns say "I" and "my"; the facts consolidation writes name them ("Sarah's brother is called
Tom"); an agent asks either way ("what is my brother's name?", "What is Sarah's brother's name?"). The
cross-encoder weighs a name shared by query and passage above everything else: the same fact scored
0.60 for the first question and 1.00 for the second, and "Where does Sarah's brother live?" scored 0.98
against "Sarah's brother is called Tom", which says nothing of where he lives. Put in the first person
on both sides ("what is my brother's name?" / "my brother is called Tom"), the two questions score
alike (0.99) and the never-said one 0.05 (docs/benchmarks.md, "The user's own voice").

``own_voice`` rewrites the user's name (a word of their user id, written capitalised) with a few
English rules: "Sarah's" -> "my", "is Sarah" -> "am I", "Sarah is" -> "I am", "Sarah lives" -> "I
live", "with Sarah" -> "with me", any other "Sarah" -> "I". The rewrite is for the cross-encoder's
input only; nothing stored or shown changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from engram.text import user_id_words

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
# words after which the user is the object: "with Sarah" -> "with me"
_OBJECT_AFTER = "to with for at from about of by and tell told ask asked give gave call called meet met"
_ES_ENDINGS = ("sses", "shes", "ches", "xes", "zes", "oes")  # "watches" -> "watch", "goes" -> "go"


def own_voice(text: str, user_id: str) -> str:
    """``text`` with the user's name (capitalised words of ``user_id``, ``text.user_id_words``) in the
    first person. ``("What is Sarah's brother's name?", "sarah")`` -> "What is my brother's name?";
    ``("Sarah lives in Leith", "sarah")`` -> "I live in Leith"; ``("where do I live?", "sarah")`` and
    any text for a user id with no name in it are returned as they are."""
    names = sorted((w for w in user_id_words(user_id) if w != "user"), key=len, reverse=True)
    if not names or not any(n.capitalize() in text for n in names):
        return text
    one = "|".join(re.escape(n.capitalize()) for n in names)
    # "Alice Smith" is one mention; "Sarah Jones" is someone else when the user id says only "sarah"
    name = rf"(?<![\w'’-])(?:{one})(?:\s+(?:{one}))*(?![\w-])(?!\s+[A-Z][a-z])"
    rules: list[tuple[str, Callable[[re.Match[str]], str]]] = [
        (rf"{name}['’]s\b", lambda m: "my"),
        (rf"\b((?i:is|was|does|did|has))\s+{name}", lambda m: _ASKED[m.group(1).lower()]),
        (rf"{name}\s+(is|was|has|does|isn't|wasn't|hasn't|doesn't)\b", lambda m: _TOLD[m.group(1)]),
        (rf"{name}\s+([a-z]+s)\b", lambda m: "I " + _base_form(m.group(1))),
        (rf"\b((?i:{'|'.join(_OBJECT_AFTER.split())}))\s+{name}", lambda m: f"{m.group(1)} me"),
        (name, lambda m: "I"),
    ]
    for pattern, replace in rules:
        text = re.sub(pattern, replace, text)
    return text


def _base_form(verb: str) -> str:
    """A third-person verb's base form: "lives" -> "live", "studies" -> "study", "watches" -> "watch"."""
    if verb.endswith("ies") and len(verb) > 4:
        return verb[:-3] + "y"
    if verb.endswith(_ES_ENDINGS):
        return verb[:-2]
    return verb[:-1]
