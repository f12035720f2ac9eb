"""The value a question asks for (engram.retrieval.asked_value): which questions ask for one, which rows
state one, and what recall does with a hit that does not."""

import pytest

from engram.retrieval.asked_value import AskedValue, asked_value, missing_value, states_value

QUESTION = "what's maeve's cat called?"


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("what's my sister called?", AskedValue.NAME),
        ("What is the name of Fiona's vet practice?", AskedValue.NAME),
        ("what colour is my car?", AskedValue.COLOUR),
        ("how much is my rent?", AskedValue.NUMBER),
        ("How long has Dan been teaching?", AskedValue.NUMBER),
        ("what time is capoeira?", AskedValue.TIME),
        ("when is Ola's birthday?", AskedValue.DAY),
        ("when was her birthday party?", AskedValue.DAY),  # a birthday comes round again
        ("what night is five-a-side these days?", AskedValue.DAY),
        ("What night did Dan use to play five-a-side?", AskedValue.DAY),  # a habit, not an event
        # an event: the hit's event time answers
        ("when did we move to Leeds?", None),
        ("what year did I move to ireland?", None),
        # any words can answer
        ("where do I live?", None),
        ("what car do I drive?", None),
        # two questions in one: a row may answer either part
        ("what's my cat called and what breed is she?", None),
        ("when and where is my welsh class?", None),
        ("What's the name of the church where she sings?", AskedValue.NAME),  # a relative "where"
        ("how much did the new phone cost me?", AskedValue.NUMBER),  # a past price: not its event time
    ],
)
def test_the_kind_of_value_a_question_asks_for(query: str, kind: AskedValue | None) -> None:
    assert asked_value(query) == kind


@pytest.mark.parametrize(
    ("kind", "text", "query", "states"),
    [
        (AskedValue.NAME, "my sister Aoife is visiting", "what's my sister called?", True),
        (AskedValue.NAME, "my sister's called aoife", "what's my sister called?", True),
        (AskedValue.NAME, 'grouped them as "kitchen spots"', "what is the group called?", True),
        # names typed in lower case: a possessive without a determiner, "me and ..."
        (AskedValue.NAME, "sorry, hana's piano is sundays", "what's my daughter's name?", True),
        (AskedValue.NAME, "me and lowri are off to tenby", "what's my girlfriend called?", True),
        (AskedValue.NAME, "lowri and I went to tenby", "what's my girlfriend called?", True),
        # the only name is the one asked about; "my mum's" is not a name
        (AskedValue.NAME, "maeve's cat hates me btw", "what's maeve's cat called?", False),
        (AskedValue.NAME, "my mum's coming to babysit", "what's my mum's name?", False),
        (AskedValue.NAME, "The cat is sick again", "what's the cat called?", False),
        (AskedValue.NUMBER, "we're down to two now", "how many chickens have I got?", True),
        (AskedValue.NUMBER, "rent is £1,650 a month", "how much is my rent?", True),
        (AskedValue.NUMBER, "I got the job at Sawtooth!", "what's my salary at Sawtooth?", False),
        (AskedValue.TIME, "capoeira's moved to 8pm", "what time is capoeira?", True),
        (AskedValue.TIME, "we play in the mornings", "what time are my games?", True),
        (AskedValue.TIME, "capoeira is fun", "what time is capoeira?", False),
        (AskedValue.DAY, "footy's switched to thursdays", "what night is five-a-side?", True),
        (AskedValue.DAY, "she runs at lunchtime now", "when does she run?", True),
        (AskedValue.DAY, "Ola got the pharmacist job!", "when is Ola's birthday?", False),
        (AskedValue.COLOUR, "picked up a blue 2019 mt-07", "what colour is my bike?", True),
        (AskedValue.COLOUR, "the corolla's doing 62mpg", "what colour is the corolla?", False),
    ],
)
def test_which_rows_state_a_value_of_the_kind_asked(
    kind: AskedValue, text: str, query: str, states: bool
) -> None:
    assert states_value(kind, text, query) is states


def test_missing_value_names_the_rows_without_it() -> None:
    texts = {"a": "maeve's cat is called Biscuit", "b": "maeve's cat hates me btw"}
    assert missing_value("what's maeve's cat called?", texts) == {"b": "name"}
    assert missing_value("what does maeve's cat eat?", texts) == {}


def test_recall_lowers_the_confidence_of_a_hit_without_the_name_asked_for(eng) -> None:
    """The turn matches the question word for word but holds no name: its confidence is the factor's
    share of what it would be, its rank and score are untouched, and its explain says why."""
    mem = eng.for_user("ines")
    mem.remember_turn("maeve's cat hates me btw")
    mem.remember_turn("the boiler is making a knocking noise again")
    lowered = mem.recall(QUESTION, record_use=False)[0]
    plain = mem.recall(QUESTION, config=eng.config.but(missing_value_factor=1.0), record_use=False)[0]
    assert lowered.memory.id == plain.memory.id and lowered.score == pytest.approx(plain.score)
    assert lowered.explain["missing_value"] == "name" and "missing_value" not in plain.explain
    assert lowered.confidence == pytest.approx(eng.config.missing_value_factor * plain.confidence)


def test_recall_leaves_the_confidence_of_a_hit_with_the_name_asked_for(eng) -> None:
    mem = eng.for_user("ines")
    mem.remember_turn("maeve's cat is called Biscuit, she hates me btw")
    hit = mem.recall(QUESTION, record_use=False)[0]
    plain = mem.recall(QUESTION, config=eng.config.but(missing_value_factor=1.0), record_use=False)[0]
    assert "missing_value" not in hit.explain and hit.confidence == pytest.approx(plain.confidence)
