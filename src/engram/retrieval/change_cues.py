"""What a text's words say about time and change (``currency`` ranks by them): whether a question asks
about the past or an earlier state, or presupposes a change ("now", "still"); whether a turn announces
a change ("we moved", "switched", "sorry, I got it wrong"), calls new what an older turn called the
speaker's ("new number: ..."), or calls it old or denies it ("the old astra", "my gp isn't Dr Brennan").

Word lists and patterns, each with the examples that decided it; measured on bench/updates.py and
LoCoMo dev (docs/benchmarks.md, "Current truth").
"""

from __future__ import annotations

import re
from collections.abc import Collection

from engram.text import content_stems, is_content_word, light_stem, query_words

# A question with one of these asks about an earlier state ("where did I live before?", "my old phone")...
EARLIER_STATE_WORDS = frozenset(
    "before previous previously prior former formerly old older originally original earlier used ago "  # noqa: SIM905
    "ex".split()
)
# ... and these say so whatever the tense: "what's my ex called again?", "my former address" (not "old":
# "where is his old man's birthday party?")
EARLIER_IN_ANY_TENSE = frozenset("previous previously former formerly ex".split())  # noqa: SIM905
# ... as does past tense ("where did I live?"), but that also asks about events ("when did I go to Rome?").
PAST_TENSE = frozenset("did was were had used".split())  # noqa: SIM905
PAST_WORDS = EARLIER_STATE_WORDS | PAST_TENSE | frozenset(("first", "ever"))
# ... unless it also says it wants the present ("what did I say my new address was?").
PRESENT_WORDS = frozenset("now current currently new these still latest today anymore instead".split())  # noqa: SIM905
# A turn with one of these announces a change ("we moved...", "switched to", "no more nights"), as does
# one owning a mistake (``_MISTAKE_TOLD``: "sorry, I got it wrong"; not a bare "wrong" or "actually":
# "i told you our wedding is 13 dec. wrong, thats her cousin's" changed no football night). Without
# this test, any newer turn that matched as well replaced the top one, and the "unchanged" questions of
# bench/updates.py lost most of their R@1 to newer chatter (docs/benchmarks.md).
CHANGE_WORDS = frozenset(
    "moved moving switched switching swapped changed replaced traded upgraded quit promoted adopted sold "  # noqa: SIM905
    "anymore longer instead dropped stopped gave broke cancelled canceled dropping "
    "stopping relocated relocating".split()
)
# ... as do these phrases ("I'm not vegetarian any more", "oops, it's tulip24", "Biscuit passed away",
# "down to 88 kg now!", "putting the rent up to £790", "she's upped the amlodipine to 10mg", a job taken or
# left: "handed my notice in", "I accepted the volta agro offer", "resigned" (not "handed her notice in",
# "Tom accepted the job", "resigned to the fact": an outside review); not "no more": "works a
# treat, no more blinding light" tells what a change did, not what replaced it).
# "any more" only where a clause ends ("not vegetarian any more,"), not "have you any more recipes?".
_CHANGE_PHRASE = re.compile(
    r"\b(?:any\s*more(?=\s*(?:[,.;:!?)]|$))|no\s+longer|from\s+now\s+on|oops|passed\s+away"
    r"|handed\s+(?:in\s+)?my\s+notice|signed\s+(?:the|my)\s+(?:\w+\s+)?contract|resigned\b(?!\s+(?:to|myself)\b)"
    r"|(?:^|[.!?]\s*|\b(?:i|we)(?:'ve|’ve|\s+have)?\s+(?:just\s+|finally\s+)?)accepted\s+"
    r"(?:(?:an|the|their|a)\s+)?(?:[\w&-]+\s+){0,2}?(?:offer|job|position|role|post)\b"
    r"|(?:up|down)\s+to\s+(?:[£$€]?\d|(?:one|two|three|four|five|six|seven|eight|nine|ten)\b(?!\s+of\b))"
    r"|(?:upped|raised|increased|lowered|reduced)(?:\s+[\w'’£$€]+){0,4}?\s+to\s+[£$€]?\d)"
)
# ... and an age reached ("Leo turned 8 yesterday", "she's just turned forty"), not "turned one of the
# bedrooms into an office", "turned one down", "turned 180 degrees", nor an age at some past event
# ("I got my first car when I turned 17").
_AGES = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
_AGES += " seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety"
_TURNED = re.compile(
    rf"(?<!when )(?<!since )\bturned\s+(?:\d{{1,3}}|{'|'.join(_AGES.split())})\b"
    r"(?!\s+(?:of|down|up|into|over|around|degrees|pages|percent|per|times|%)\b|-)"
)
# A query with one of these presupposes that the answer may have changed ("what phone do I use now?",
# "am I still vegetarian?", "what's my current job?") ...
CHANGE_EXPECTED = frozenset("now nowadays currently current still anymore latest".split())  # noqa: SIM905
# ... or one of these phrases ("these days", "at the moment"; not "which of these recipes", "the
# funniest moment": an outside review), or asks of the period under way ("which team am I in this season?",
# "what year group am I teaching this session?")
_CHANGE_EXPECTED_PHRASE = re.compile(
    r"\bthese\s+days\b|\bat\s+(?:the\s+)?(?:moment|present)\b|\bthis\s+(?:year|term|semester|season|session)\b",
    re.I,
)
# The speaker says they changed something: "we moved", "I've just switched", "I quit" (not "the church
# hall moved us", "he's moving here", "the coffee machine broke"): a first-person subject within two
# words before a change word.
_FIRST_PERSON = r"i|we|i've|we've|i'm|we're|ive|im"  # a speaker's own subject, casefolded
_OWN_CHANGE = re.compile(
    rf"\b(?:{_FIRST_PERSON}|i'd|we'd)\b(?:\W+\w+){{0,2}}?\W+(?:" + "|".join(sorted(CHANGE_WORDS)) + r")\b"
)
_OWN = re.compile(rf"\b(?:{_FIRST_PERSON}|i'd|we'd|i'll|we'll|me|us|our)\b")
_KIN = """husband wife partner boyfriend girlfriend fiance fiancee son daughter kid mum mom dad mother father
    brother sister boss friend flatmate dog cat""".split()  # noqa: SIM905 - a word list reads better as text
# ... as the subject: opening a clause ("my husband switched jobs", "so my mum got a new number"), not
# "just moved to Leeds with my boyfriend!" nor "switched to Vodafone because my dad recommended it"
_ANOTHER = re.compile(
    r"(?:^|[,.;:!?(]\s*)(?:(?:so|and|oh|but|well|also|btw|anyway)\s+)?my\s+(?:" + "|".join(_KIN) + r")s?\b"
)
# ... and "I've started ..." with the speaker as its subject, not in a clause of time ("when I started
# school", "since we started"): "I've started eating fish again" after "I've been veggie since uni".
# Anyone's "started" ("she started a pottery class") cost LoCoMo dev R@1 0.004.
_OWN_START = re.compile(
    r"(?<!\bwhen )(?<!\bsince )(?<!\buntil )(?<!\bbefore )(?<!\bafter )"
    r"\b(?:i|we)(?:'ve|’ve| have)?\s+(?:just\s+|finally\s+|now\s+)?started\b"
)
# The speaker's own new thing: "I've got a new dentist", "my new phone", "the new salary is 175k", "got a
# new bike" (a sentence that drops its "I"), "new number: ..." (a label), past one of a few adjectives
# ("we've got a new permanent manager" after "my interim manager"); not "my sister found a new dentist",
# "happy new year", "our new neighbours moved in" after "my brother moved in".
_CALLED_NEW = re.compile(
    rf"(?:\b(?:{_FIRST_PERSON})\b(?:\W+\w+){{0,2}}?\W+|\b(?:my|our|the)\s+"
    r"|(?:^|[.!?]\s*)(?:got|bought|found|getting)\s+)(?:an?\s+)?new\s+"
    r"(?:(?:permanent|interim|temporary|regular|main|full-time|part-time|local|second-hand)\s+)?(\w+)"
    r"|(?:^|[.!?]\s*)new\s+(\w+)\s*:"
)
# ... or a sentence that opens with it, the noun standing alone: "new helper from indonesia arriving 2
# sep"; not "new phone case arrived", "new dentist appointment booked" (an outside review)
_OPENS_NEW = re.compile(r"(?:^|[.!?]\s*)new\s+(\w+)(?:\s*(?:[,.!?;:)]|$)|\s+(\w+))")
# What the speaker calls theirs: up to three words after "my"/"our" ("my phone number is ...").
_OWNED = re.compile(r"\b(?:my|our)\s+(\w+)(?:\s+(\w+))?(?:\s+(\w+))?")
# A turn that calls old, denies, or compares with what an older one said: "the old astra was lucky to get
# 45" after "2016 vauxhall astra estate", "my gp isn't Dr Brennan" after "my gp is Dr Brennan", "no more
# eggs or cheese" after "I do eat eggs and dairy", "6:50 now, so much better than 8:30" after "our games
# are at 8:30 now" (a comparative's "than"; a time as a whole); a contrast of values is ``_CONTRAST``.
# "old" counts after the speaker's own or a definite determiner only ("a 5 year old cat" is an age, "my
# sister's old astra" hers); "isn't" not at a sentence's start ("isn't 98k miles a lot?" asks); the words
# after the cue are checked against the older turn's.
_SAID_OTHERWISE = re.compile(
    r"\b(?:the|my|our)\s+(?:old|former|previous)\s+(\w+)(?:\s+(\w+))?"
    r"|(?<=\w)[ \t,]+(?:isn['’]?t|aren['’]?t)\s+(\w+)(?:\s+(\w+))?"
    r"|\bno\s+(?:more|longer)\s+(\w+)(?:\s+(\w+))?"
    r"|\b(?:better|worse|earlier|later|cheaper|dearer|bigger|smaller|faster|slower|longer|shorter|higher"
    r"|lower|nicer|closer|further|(?:more|less)\s+\w+)\s+than\s+(\d{1,2}[:.]\d\d|\w+)"
)
# A correction that sets a value against the old one: "the 16th, not the 14th", "a Honda Accord - not a
# Civic", "it's the 16th. Not the 14th": a number or a capitalised name on both sides (not "loving the
# new job, but not the commute", "Leo loves football, but not rugby", which say what is liked).
_DAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"  # typed in lower case: "sundays, not saturdays"
_VALUE = rf"(?:\d{{1,2}}[:.]\d\d\b|[A-Z][\w-]*|\w*\d\w*|{_DAY}\b)"
_CONTRAST = re.compile(rf"\b{_VALUE}\s*[,;.–—-]?\s+(?:but\s+)?[Nn]ot\s+(?:(?:the|a|an)\s+)?({_VALUE})\b")
# "same flat though", "still the same job", "still my gp": what a partial update says it kept
_KEPT = re.compile(
    r"(?<!not )(?<!not the )(?<!n't the )\b(?:same|still\s+(?:the\s+same\s+|the\s+|my\s+|our\s+)?)\s*(\w+)"
    r"(?!\s+as\b)"  # "the same gym as my sister" compares
)
_TIME = re.compile(r"\b\d{1,2}[:.]\d\d\b")  # "8:30", compared whole: "later than 9:30" is not 8:30
# "which bike got stolen?": a passive past (got + participle) asks about an event, as "did" does; not
# "what have I got planned?", "have I got ten minutes?" (have ... got is the present).
_GOT_PARTICIPLE = re.compile(r"\bgot\s+(?!(?:ten|seven|eleven|often|golden|garden)\b)\w+(?:ed|en)\b", re.I)
_HAVE_GOT = re.compile(r"(?:\b(?:have|has)|'ve)\s+(?:\w+\s+)?got\b", re.I)
# "my old number", "Dan's old laptop" ask about an earlier state; "how old is my son?", "what old picture
# did he find?" do not: "old" counts after a possessive only.
_OWNED_OLD = re.compile(r"(?:\b(?:my|our|your|his|her|their)|\w['’]s)\s+old\b", re.IGNORECASE)
# "before my current job", "before the new one": the present word names what came after the answer
_BEFORE_PRESENT = re.compile(r"\bbefore\s+(?:the\s+|my\s+|our\s+|this\s+)?(current|new|latest)\b", re.I)
# "used" tells the past only as "used to" ("where did I used to work?", "what car I used to have"), or
# as "did <someone> use to" ("what night did Dan use to play?"; not "what do we use to manage it?", "did
# she have to use to add the camera?")
_USED_TO = re.compile(
    r"\bused\s+to\b|\bdid\s+(?:(?:my|our|his|her|their|the)\s+)?[\w'’-]+\s+use\s+to\b", re.IGNORECASE
)


def asks_about_past(query: str) -> bool:
    """Whether the query asks about an earlier state or past events rather than the present.

    Examples: "where did I live before?" -> True; "where do I live now?" -> False; "what did I say
    my new address was?" -> False (it wants the present); "how old is my son?" -> False.
    """
    words = _past_words(query)
    return bool(words & PAST_WORDS) and not words & PRESENT_WORDS


def asks_about_earlier_state(query: str) -> bool:
    """Whether the query asks what something was before it changed: a word that says so, in the past
    tense (past tense alone also asks about events; "before" alone is also a preposition of time), or
    one that says so in any tense (``EARLIER_IN_ANY_TENSE``). Examples: "which phone did I have before
    this one?", "what was my old number?", "what night did Dan use to play?", "what's my ex called?"
    -> True; "when did I go to Rome?", "how do I carb load before a race?", "where do I live?" -> False."""
    words = _past_words(query)
    earlier = bool(words & EARLIER_IN_ANY_TENSE) or bool(words & EARLIER_STATE_WORDS and words & PAST_TENSE)
    return earlier and not words & PRESENT_WORDS


def _past_words(query: str) -> frozenset[str]:
    words = query_words(query) - {found.group(1).lower() for found in _BEFORE_PRESENT.finditer(query)}
    if _USED_TO.search(query):
        words |= {"used"}
    else:  # "which account is used for my salary?" is the present passive
        words -= {"used"}
    if _GOT_PARTICIPLE.search(query) and not _HAVE_GOT.search(query):
        words |= {"did"}
    return words if _OWNED_OLD.search(query) else words - {"old"}


def expects_change(query: str) -> bool:
    """Whether the query presupposes a change. Example: "what phone do I use now?" -> True."""
    return bool(query_words(query) & CHANGE_EXPECTED) or bool(_CHANGE_EXPECTED_PHRASE.search(query))


def announces_change(text: str) -> bool:
    """Whether a turn says that something changed (``CHANGE_WORDS``, ``_CHANGE_PHRASE``) or owns a mistake
    (``_MISTAKE_TOLD``). Examples: "we moved to Edinburgh last week!", "I'm not vegetarian any more",
    "sorry I got it wrong, it's thursdays" -> True; "we live in Bristol" -> False."""
    folded = text.casefold()
    if _TURNED.search(folded) and not re.search(r"\bwhen\s+\w+\s+turned\b", folded):
        return True
    return bool(
        query_words(text) & CHANGE_WORDS or _CHANGE_PHRASE.search(folded) or _MISTAKE_TOLD.search(folded)
    )


def tells_of_another(text: str, older: str) -> bool:
    """Whether a turn tells of someone close (``_ANOTHER``: "my husband", "my dog's" ...) whom the older
    turn does not name, with nothing said of the speaker (no ``_FIRST_PERSON`` subject, "us" or "our"):
    "my husband switched jobs, he's at Lloyds now" is no successor to "I work at Barclays" (an outside
    review's repro); "Ola got the job, so we're moving to Manchester" and "she's upped the amlodipine to
    10mg" (the doctor changed the speaker's dose) may be."""
    folded, before = text.casefold(), older.casefold()
    return bool(_ANOTHER.search(folded)) and not _ANOTHER.search(before) and not _OWN.search(folded)


def says_own_change(text: str) -> bool:
    """Whether the speaker says they changed something (``_OWN_CHANGE``, ``_OWN_START``). Examples: "we
    moved to Edinburgh last week!", "I've just switched to Vodafone", "I've started eating fish again" ->
    True; "the church hall moved us", "when I started school" -> False."""
    folded = text.casefold()
    return bool(_OWN_CHANGE.search(folded) or _OWN_START.search(folded))


def calls_new(text: str, older: str) -> bool:
    """Whether a turn calls new, as the speaker's own (``_CALLED_NEW``), what the older turn called the
    speaker's: the word after "new" (past "permanent", "interim" ...) is one of the three after
    "my"/"our" there (by light stem).
    Examples: ("new number: 0131 555 9876", "my phone number is 0117 555 1234") -> True; ("checking out
    a new trail", "found some more amazing trails in my town") -> False: one more trail, not a replaced
    one; ("my sister found a new dentist", "my dentist is Dr Patel") -> False: hers."""
    owned = {light_stem(w) for found in _OWNED.finditer(older.casefold()) for w in found.groups() if w}
    folded = text.casefold()
    called = [w for found in _CALLED_NEW.finditer(folded) for w in found.groups() if w]
    called += [m[1] for m in _OPENS_NEW.finditer(folded) if not (m[2] and is_content_word(m[2]))]
    return any(light_stem(w) in owned for w in called if is_content_word(w))


def says_otherwise(text: str, older: str) -> bool:
    """Whether a turn calls old, denies, or compares with a content word of the older turn
    (``_SAID_OTHERWISE``, by a light stem). Examples: ("the corolla's doing 62mpg, the old astra was
    lucky to get 45", "2016 vauxhall astra estate, 98k miles") -> True; ("my gp isn't Dr Brennan,
    she's Dr Brannigan", "my gp is Dr Brennan") -> True; ("6:50 now, so much better than 8:30", "our
    games are at 8:30") -> True; ("a second cat with a 5 year old cat?", "my cat is called Moss") ->
    False."""
    named = [w for found in _SAID_OTHERWISE.finditer(text.casefold()) for w in found.groups() if w]
    named += [w.casefold() for w in _CONTRAST.findall(text)]
    return _said_in([w for w in named if is_content_word(w) or _TIME.fullmatch(w)], older)


def _said_in(words: Collection[str], older: str) -> bool:
    """Whether one of ``words`` is a content word of ``older`` (by ``word_stems``) or a time it says."""
    told = word_stems(older) | set(_TIME.findall(older))
    return any((w if _TIME.fullmatch(w) else light_stem(w)) in told for w in words)


# The speaker owning a mistake: "sorry, I got that wrong", "correction:", "I meant", "oops", "my bad"
_MISTAKE = (
    r"correction|oops|my\s+(?:bad|mistake)|i\s+meant|mixed\s+(?:it|that|them)\s+up|got\s+(?:it|that)\s+wrong"
    r"|i\s+was\s+wrong|scratch\s+that|actually\s+no"
)
_OWNED_MISTAKE = re.compile(rf"\b(?:sorry|{_MISTAKE})\b")
# ... as a change, not an apology ("sorry to hear about your dog", "sorry I missed the gym friday": an
# outside review): "sorry" only a few words before "wrong", "meant", "mistake" or "it's"
_MISTAKE_TOLD = re.compile(rf"\b(?:sorry\W+(?:\w+\W+){{0,3}}?(?:wrong|meant|mistake|it['’]?s)|{_MISTAKE})\b")
# ... naming what was wrong: "I gave you the wrong date", "wrong password earlier"; not "they sent the
# wrong size", "got on the wrong train"
_WRONG = re.compile(
    r"\b(?:gave|told)\s+you\s+(?:the\s+)?wrong\s+(\w+)|\bwrong\s+(\w+)\s+(?:earlier|before|last\s+time)\b"
)


def corrects(text: str, older: str) -> bool:
    """Whether a turn corrects a value the older one said: the speaker owns a mistake
    (``_OWNED_MISTAKE``) and sets a value against the older one's (``_CONTRAST``: "sorry, it's the 16th
    of March, not the 14th"), or names the thing the older turn said as given wrong (``_WRONG``:
    "oops, wrong password earlier, it's bluefalcon23"). A correction leaves out what the value was of,
    so it can match the question less well than the statement it corrects, yet it names that
    statement's value. Examples: ("sorry, it's the 16th not the 14th", "her birthday is on the 14th")
    -> True; ("moving my dentist to Friday, not Monday", "my gym class is on Monday") -> False: no
    mistake owned; ("they sent the wrong size again", "my shoe size is 9") -> False."""
    folded = text.casefold()
    contrasted = [w.casefold() for w in _CONTRAST.findall(text)] if _OWNED_MISTAKE.search(folded) else []
    if contrasted and all(re.fullmatch(_DAY, w) for w in contrasted):  # a day names no subject: say one too
        said = [w for w in re.findall(r"\w+", folded) if is_content_word(w) and not re.fullmatch(_DAY, w)]
        contrasted = contrasted if _said_in(said, older) else []
    wrong = [w for found in _WRONG.findall(folded) for w in found if w and is_content_word(w)]
    return _said_in(contrasted + wrong, older)


# "sold the Fiesta", "traded in the corolla", "cancelled Netflix": what the speaker ended, as the clause's
# first words or after "I" / "we" ("finally sold ..."); not "still haven't sold the Fiesta", "Mum quit
# Vodafone"
_ENDED = re.compile(
    r"(?:^|[.!?,;:]\s*|\b(?:i|we|i've|we've|i’ve|we’ve|i'd|we'd)\s+)(?:(?:just|finally|have|had)\s+)?"
    r"(?:sold|traded(?:\s+in)?|swapped|replaced|ditched|scrapped|quit|cancell?ed|got\s+rid\s+of"
    r"|moved\s+out\s+of)\s+((?:[\w'’-]+\s+){0,2}[\w'’-]+)"
)


def ends_value(text: str, older: str) -> bool:
    """Whether the speaker ends a value the older turn named (``_ENDED``, then a name or a number of the
    older turn): "sold the Fiesta and bought a Yaris" after "I drive a blue Ford Fiesta". Examples:
    ("left work early", "I work at Acme") -> False: no name ended; ("still haven't sold the Fiesta",
    "I drive a Ford Fiesta") -> False; ("Mum quit Vodafone", "I'm with Vodafone") -> False; a
    question ("should I have sold the Fiesta?") ends nothing."""
    named = _names_and_numbers(older)
    told = [part for part in re.split(r"(?<=[.!?])\s+", text.casefold()) if not part.rstrip().endswith("?")]
    return any(
        light_stem(w) in named for part in told for found in _ENDED.findall(part) for w in found.split()
    )


def repeats(text: str, fact: str, query: str, names: Collection[str] = ()) -> bool:
    """Whether a turn says again what a fact says: every name and number of the fact past its first word
    (else every content word the query does not hold), the user's ``names`` aside, is in the turn (by
    light stem), none within a few words after "from", "out of" or a negation (``_LEFT_OR_DENIED``),
    nothing called old or denied (``says_otherwise``), and no name or number the fact lacks ("switched
    to Initech", "Tesla Model 3": a new value). "we moved to Edinburgh last week!" repeats "Sarah lives
    in Edinburgh" (a newcomer's walk: it was taken for the fact's successor); "we moved from Bristol to
    Edinburgh" does not repeat "Jo lives in Bristol", nor "I'm not vegetarian any more" "Eve is
    vegetarian", nor "sold the Ford Focus, got a Tesla" "Sam drives a Ford Focus"."""
    own = {light_stem(n) for n in names}
    named = _names_and_numbers(fact)
    told = (named or content_stems(fact) - content_stems(query)) - own  # its names and numbers, if any
    said = {light_stem(w) for w in re.findall(r"[\w'’-]+", text.casefold())}
    left = {light_stem(w) for found in _LEFT_OR_DENIED.findall(text.casefold()) for w in found.split()}
    new = _names_and_numbers(text) - named - own
    return bool(told) and told <= said and not told & left and not new and not says_otherwise(text, fact)


def _names_and_numbers(text: str) -> set[str]:
    """Light stems of a text's words with a digit, and of its capitalised words but a sentence's first
    (a fact's subject, "As I said") and "I'm", "I've"...: what names a value."""
    found = set()
    for sentence in re.split(r"[.!?\n]+", text):
        words = re.findall(r"[\w'’-]+", sentence)
        found |= {
            light_stem(w.casefold())
            for at, w in enumerate(words)
            if any(c.isdigit() for c in w) or (at and w[0].isupper() and not re.match(r"I(?:$|['’])", w))
        }
    return found


# what a turn moved away from or denies, the next few words: "from Bristol", "moved out of Edinburgh",
# "left Acme", "not vegetarian", "I don't work at Acme" (an outside review: "at" was taken, not "Acme")
_LEFT_OR_DENIED = re.compile(
    r"(?:\b(?:from|left|leaving|leave|quit|not|never|no|out\s+of)|n['’]t)((?:\s+[\w'’-]+){1,4})"
)


def keeps_what_is_asked(text: str, query: str) -> bool:
    """Whether a turn says that what the query asks about stayed as it was (``_KEPT``: "same" or
    "still" before a content word of the query, by light stem). A partial update changes one thing
    and keeps another: "landlord raised the rent to £1350, same flat though" replaces the rent, not
    where the flat is. Every content word of the query must be kept: "switched to Vodafone, same phone
    though" says nothing kept of "which phone provider am I with?". Examples: ("..., same flat
    though", "where is my flat?") -> True; ("still at Acme but now 4 days a week", "where do I
    work?") -> False: "at" names nothing; ("we moved out, not the same flat any more", "where is my
    flat?") -> False."""
    asked = content_stems(query)
    kept = {light_stem(w) for w in _KEPT.findall(text.casefold()) if is_content_word(w)}
    return bool(asked) and asked <= kept  # "same phone though" keeps the phone, not its provider


def asks_of_the_rest(query: str, said: str, facts: str) -> bool:
    """Whether the query asks about something that ``said`` (an old turn) says and ``facts`` (the
    facts of its chain) do not: a content word (``is_content_word``) of the query and of the turn,
    a plural "s" aside or by its first five letters, that the facts lack. Examples: ("am I still
    allergic to peanuts?", "we live in Bristol, I'm allergic to peanuts", "Sarah lives in Bristol")
    -> True; ("do I still live in Bristol?", "we live in Bristol btw", "Sarah lives in Bristol") ->
    False; ("what's my job now?", "I'm a staff nurse in A&E", "Aisha is a staff nurse") -> False."""
    asked, told, known = (word_stems(text) for text in (query, said, facts))
    return bool((asked & told) - known)


def word_stems(text: str) -> set[str]:
    """A text's content words by a light stem (``light_stem``), and by their first five letters too."""
    words = content_stems(text)
    return words | {w[:5] + "…" for w in words if len(w) >= 5}
