"""What the engine refuses through the Python API, whatever the interface: text that shows nothing,
playbooks past their limits, a validity period that ends before it starts. Nothing is written."""

from datetime import UTC, datetime

import pytest

from engram import InvalidInput, NotFound

INVISIBLE = ["\u0000", "\u200b\u200b", "\ufeff", " \u2060\u00ad ", "\ufe0f", "\u3164", "\u202e\u200d"]


def written(eng, user="sarah"):
    mem = eng.for_user(user)
    return [
        m.text for t in ("episodic", "semantic", "procedural") for m in mem.list(t, include_superseded=True)
    ]


@pytest.mark.parametrize("text", INVISIBLE)
def test_text_that_shows_nothing_is_refused_everywhere(eng, text):
    """Issue 12, item 15: such text was stored, embedded, and outranked real memories."""
    mem = eng.for_user("sarah")
    attempts = [
        lambda: mem.remember_turn(text),
        lambda: mem.remember_turn("hi", metadata={"speaker": text}),
        lambda: mem.write(text),
        lambda: mem.write("", memory_type="procedural", name=text),
        lambda: mem.write("", memory_type="procedural", name="p", trigger_text=text),
        lambda: mem.write("", memory_type="procedural", name="p", description=text),
        lambda: mem.write("", memory_type="procedural", name="p", steps=[{"order": 1, "instruction": text}]),
        lambda: mem.recall(text),
        lambda: eng.catalog.add(text),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInput, match=r"no visible character|non-empty|NUL character"):
            attempt()
    assert written(eng) == [] and eng.catalog.list() == []


def test_text_that_shows_something_is_kept_verbatim(eng):
    mem = eng.for_user("sarah")
    for text in ["👍", "東京に住んでいます", "\u200bhi\u200b", "é"]:
        assert mem.remember_turn(text).text == text
    assert [h.memory.text for h in mem.recall("東京", k=1)] == ["東京に住んでいます"]
    assert mem.remember_turn("hi", metadata={"speaker": None}).metadata == {"speaker": None}  # no speaker


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"description": "x" * 900_000}, "description is 900000 characters; the limit is 16000"),
        ({"name": "n" * 201}, "name is 201 characters; the limit is 200"),
        ({"trigger_text": "t" * 2_001}, "trigger_text is 2001 characters; the limit is 2000"),
        ({"steps": [{"order": 1, "instruction": "i" * 2_001}]}, r"steps\[0\]\.instruction is 2001"),
        ({"steps": [{"order": 1, "instruction": "i", "tool": "t" * 201}]}, r"steps\[0\]\.tool is 201"),
        ({"steps": [{"order": i, "instruction": "i"} for i in range(1, 102)]}, "steps has 101 entries"),
    ],
)
def test_playbooks_have_limits(eng, fields, message):
    """Issue 12, item 14: a 900,000-character description was stored."""
    with pytest.raises(InvalidInput, match=message):
        eng.for_user("sarah").write("", memory_type="procedural", **{"name": "p", **fields})
    assert written(eng) == []


def test_a_playbook_at_its_limits_is_stored(eng):
    row = eng.for_user("sarah").write(
        "",
        memory_type="procedural",
        name="n" * 200,
        trigger_text="t" * 2_000,
        description="d" * 16_000,
        steps=[{"order": i, "instruction": "i" * 2_000, "tool": "t" * 200} for i in range(1, 101)],
    )
    assert len(row.steps) == 100 and written(eng) == [""]


@pytest.mark.parametrize("confidence", [True, False, float("nan"), 1.5, "0.9"])
def test_a_facts_confidence_is_a_number_in_0_1(eng, confidence):
    """``confidence=True`` was stored as 1.0, where REST and MCP refuse ``true`` (an outside review)."""
    with pytest.raises(InvalidInput, match="confidence must be a number in"):
        eng.for_user("sarah").write("Sarah lives in Leith", confidence=confidence)
    assert written(eng) == []


def test_a_validity_period_must_not_end_before_it_starts(eng):
    """Issue 12, item 16."""
    mem = eng.for_user("sarah")
    start, end = datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="valid_from is after valid_to"):
        mem.write("Sarah rents in Leith", valid_from=start, valid_to=end)
    assert written(eng) == []
    assert mem.write("Sarah rents in Leith", valid_from=end, valid_to=start).valid_to == start


# -- engram.validation: the checks the facade, auth, the importer and the client share ---------------
def test_shared_checks():
    from engram.models import SemanticMemory
    from engram.validation import aware, build_row, check_types, validate_user_id

    assert aware(datetime(2024, 1, 1)) == datetime(2024, 1, 1, tzinfo=UTC)  # naive is UTC
    with pytest.raises(InvalidInput, match="out of the representable range"):
        aware(datetime.fromisoformat("0001-01-01T00:00:00+01:00"))
    assert check_types("semantic") == ["semantic"]
    with pytest.raises(InvalidInput, match="unknown memory_type"):
        check_types(["facts"])
    assert validate_user_id("sarah@home") == "sarah@home"
    for bad in ("-sarah", "mallory\n", "mallory\r\n"):  # "$" alone let a final newline through
        with pytest.raises(InvalidInput, match="user_id"):
            validate_user_id(bad)
    from engram.models import is_well_formed_id

    assert is_well_formed_id("epi_" + "a" * 22) and not is_well_formed_id("epi_" + "a" * 22 + "\n")
    with pytest.raises(InvalidInput, match="confidence"):
        build_row(SemanticMemory, id="x", text="t", user_id="u", created_at=datetime.now(UTC), confidence=[])


@pytest.mark.parametrize("session_id", ["chat\ud800", "chat\x00", "a\nb", "\u200b", ""])
def test_a_session_id_that_no_export_or_engine_could_hold_is_refused(eng, session_id):
    """An outside review: a lone surrogate in a session id was stored, and then every `engram export`
    of the store failed (UTF-8), and that user's listing and recall answered 500; a NUL stopped the move
    to PostgreSQL. Refused on every write: the Python API, a user's import."""
    mem = eng.for_user("sarah")
    with pytest.raises(InvalidInput, match="session_id"):
        mem.remember_turn("hello there", session_id=session_id)
    with pytest.raises(InvalidInput, match=r"episodic\[0\]\.session_id"):
        mem.import_json({"episodic": [{"text": "hello there", "session_id": session_id}]})
    assert written(eng) == []


@pytest.mark.parametrize(
    ("title", "message"),
    [
        ("Hub\ud800", "lone surrogate"),
        ("Hub\x00", "NUL"),
        ("x" * 1_001, "the limit is 1000"),
        ("\u200b", "visible"),
    ],
)
def test_a_catalog_title_is_checked_like_text(eng, title, message):
    """A lone surrogate in a title was a bare TypeError from the tokenizer (500 over REST), a NUL and
    100,000 characters were stored (an outside review)."""
    with pytest.raises(InvalidInput, match=message):
        eng.catalog.add("The hub pairs over Zigbee", title=title)
    with pytest.raises(InvalidInput, match=rf"catalog\[0\]\.title|{message}"):
        eng.catalog.import_json([{"title": title, "text": "The hub pairs over Zigbee"}])
    assert eng.catalog.list() == []
    assert eng.catalog.add("The hub pairs over Zigbee", title="Hub · Zigbee").title == "Hub · Zigbee"


def test_a_turn_said_in_the_future_is_refused(eng):
    """A turn dated 9999 (or milliseconds read as seconds) was stored and ranked first on every recall (an
    outside review). A day ahead of the server's clock is allowed: clocks and time zones drift."""
    from datetime import timedelta

    mem = eng.for_user("sarah")
    far = datetime(9999, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="is in the future"):
        mem.remember_turn("we live in Bristol btw", at=far)
    with pytest.raises(InvalidInput, match=r"episodic\[0\]\.timestamp .* is in the future"):
        mem.import_json({"episodic": [{"text": "we live in Bristol btw", "timestamp": far.isoformat()}]})
    assert written(eng) == []
    soon = datetime.now(UTC) + timedelta(hours=3)
    assert mem.remember_turn("we live in Bristol btw", at=soon).timestamp == soon
    # a fact or playbook's created_at too: the fact dated 2999 was never replaced by any later turn
    with pytest.raises(InvalidInput, match=r"created_at .* is in the future"):
        mem.write("Sarah lives in Bristol", created_at=far)
    with pytest.raises(InvalidInput, match=r"created_at .* is in the future"):
        mem.write("", memory_type="procedural", name="p", created_at=far)
    for kind, record in (("semantic", {"text": "x"}), ("procedural", {"name": "p"})):  # and on import
        with pytest.raises(InvalidInput, match=rf"{kind}\[0\]\.timestamp .* is in the future"):
            mem.import_json({kind: [{**record, "timestamp": far.isoformat()}]})
    assert [m.text for m in mem.list("semantic")] == []
    assert mem.write("Sarah lives in Bristol", created_at=soon).created_at == soon


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"steps": ["hold reset"]}, r"steps\.0: Input should be a valid dictionary"),
        ({"steps": [None]}, r"steps\.0: Input should be a valid dictionary"),
        ({"steps": [1]}, r"steps\.0: Input should be a valid dictionary"),
        ({"steps": "hold reset"}, "steps must be a list, not str"),
        ({"steps": {"order": 1, "instruction": "a"}}, "steps must be a list, not dict"),
    ],
)
def test_a_playbooks_steps_of_the_wrong_shape_are_invalid_input(eng, fields, message):
    """An outside review: these raised a bare ValueError or TypeError from the Python API and the Client,
    where REST and MCP answer invalid_input."""
    with pytest.raises(InvalidInput, match=message):
        eng.for_user("sarah").write("", memory_type="procedural", name="p", **fields)
    assert written(eng) == []


def test_one_supporting_id_given_as_a_string_is_one_id(eng):
    """Iterated, "epi_x" was looked up as "e" and answered NotFound("e") (an outside review); the Client
    sends one string as one id."""
    mem = eng.for_user("sarah")
    with pytest.raises(NotFound, match="epi_x"):
        mem.write("Sarah lives in Leith", supporting_episode_ids="epi_x")
    turn = mem.remember_turn("we moved to Leith")
    assert mem.write("Sarah lives in Leith", supporting_episode_ids=turn.id).supporting_episode_ids == [
        turn.id
    ]
    with pytest.raises(InvalidInput, match="supporting_episode_ids must be a list, not dict"):
        mem.write("Sarah lives in Leith", supporting_episode_ids={turn.id: 1})
