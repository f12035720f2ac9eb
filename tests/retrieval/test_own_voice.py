"""The cross-encoder's input in the user's own voice (engram.retrieval.own_voice): the rewrite rules,
and what it does to the confidence of one question asked in the first and the third person."""

import pytest

from engram.retrieval.own_voice import own_voice


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is Sarah's brother's name?", "What is my brother's name?"),
        ("Where does Sarah live?", "Where do I live?"),
        ("Is Sarah vegetarian?", "am I vegetarian?"),
        ("Sarah lives in Leith, Edinburgh", "I live in Leith, Edinburgh"),
        ("Sarah is allergic to penicillin", "I am allergic to penicillin"),
        ("Sarah has two dogs", "I have two dogs"),
        ("Sarah watches birds and studies law", "I watch birds and studies law"),
        ("Sarah studies law", "I study law"),
        ("Tom went to Rome with Sarah", "Tom went to Rome with me"),
        ("Sarah doesn't eat meat", "I don't eat meat"),
        ("where do I live?", "where do I live?"),  # nothing to rewrite
        ("Sarah Jones moved to Leeds", "Sarah Jones moved to Leeds"),  # another Sarah
        ("sarah's dog", "sarah's dog"),  # a name is written capitalised
    ],
)
def test_the_users_name_is_put_in_the_first_person(text, expected):
    assert own_voice(text, "sarah") == expected


def test_only_the_users_own_name_words_count():
    assert own_voice("What did Alice Smith say?", "alice.smith@example.com") == "What did I say?"
    assert own_voice("remind me to mark the essays", "mark") == "remind me to mark the essays"
    assert own_voice("User prefers tea", "user42") == "User prefers tea"  # "user" names nobody
    assert own_voice("Sarah lives in Leith", "u_123") == "Sarah lives in Leith"


def test_a_question_in_either_person_gets_the_same_confidence(eng):
    """The same fact scored 0.60 for "what is my brother's name?" and 1.00 for "What is Sarah's
    brother's name?" by the cross-encoder (an outside review's probe); "Where does Sarah's brother
    live?", which nothing answers, scored 0.98 on the shared name."""
    mem = eng.for_user("sarah")
    mem.write("Sarah's brother is called Tom")
    mem.write("Sarah lives in Leith, Edinburgh")
    first, third = (
        mem.recall(q, k=1, record_use=False)[0].confidence
        for q in ("what is my brother's name?", "What is Sarah's brother's name?")
    )
    assert abs(first - third) < 0.1 and min(first, third) > 0.5
    never = mem.recall("Where does Sarah's brother live?", k=2, record_use=False)
    brother = next(h for h in never if "brother" in h.memory.text)
    assert brother.explain["rerank"] < 0.5
