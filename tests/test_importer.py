"""Bulk import: whole documents in, clear errors naming the record, nothing partial."""

import json
from datetime import UTC, datetime

import pytest

from engram import Conflict, ImportFileError, InvalidInput


def counts(eng, user):
    mem = eng.for_user(user)
    return {
        t: len(mem.list(t, include_superseded=True, limit=1000))
        for t in ("episodic", "semantic", "procedural")
    }


DOC = {
    "user_id": "sarah",
    "episodic": [
        {"key": "e1", "text": "we moved to Edinburgh", "days_ago": 30, "session_id": "s9"},
        {"text": "hello there", "timestamp": "2024-05-01T10:00:00Z", "metadata": {"lang": "en"}},
    ],
    "semantic": [
        {"key": "bristol", "text": "Sarah lives in Bristol", "fact_type": "identity", "days_ago": 400},
        {
            "key": "edi",
            "text": "Sarah lives in Edinburgh",
            "confidence": 0.9,
            "supersedes": "bristol",
            "contradiction": "harsh",
            "supporting_episodes": ["e1"],
        },
    ],
    "procedural": [
        {
            "name": "Re-pair a sensor",
            "trigger_text": "sensor offline",
            "description": "reset, then add",
            "steps": [{"order": 1, "instruction": "hold reset", "tool": "ask_user"}],
            "success_count": 3,
        },
    ],
}


def test_user_document_imports_everything(eng):
    result = eng.import_json(DOC)
    assert (result["episodic"], result["semantic"], result["procedural"]) == (2, 2, 1)
    mem = eng.for_user("sarah")
    old, new = mem.get(result["ids"]["bristol"]), mem.get(result["ids"]["edi"])
    assert old.superseded_by == new.id and old.retracted and new.supersedes == old.id
    assert new.confidence == pytest.approx(0.8)
    assert new.supporting_episode_ids == [result["ids"]["e1"]]
    episodes = {e.text: e for e in mem.list("episodic")}
    assert episodes["hello there"].timestamp.isoformat() == "2024-05-01T10:00:00+00:00"
    assert episodes["hello there"].metadata == {"lang": "en"}
    assert (
        29.9
        < (episodes["we moved to Edinburgh"].created_at - episodes["we moved to Edinburgh"].timestamp).days
        + 1
        <= 31
    )
    assert mem.list("procedural")[0].success_count == 3
    assert [h.memory.id for h in mem.recall("where does sarah live", memory_types=["semantic"])] == [new.id]
    # a fact without a time of its own holds from the turn it stands on, as a written one does
    assert new.valid_from == episodes["we moved to Edinburgh"].timestamp and old.valid_from is None


def test_a_backdated_fact_is_replaced_when_its_successor_was_said(eng):
    """The demo's Bristol fact (400 days old) read "replaced today by" a fact dated last month: an
    import marked each supersession with the time of the import, not of the record that replaced it."""
    doc = {
        "user_id": "ana",
        "semantic": [
            {"key": "old", "text": "Ana lives in Porto", "days_ago": 400},
            {"key": "new", "text": "Ana lives in Braga", "days_ago": 30, "supersedes": "old"},
            {"key": "now", "text": "Ana lives in Faro", "supersedes": "new"},  # no time: the import's
            {"key": "a", "text": "Ana drives a van", "days_ago": 5},
            {"key": "b", "text": "Ana drives a bike", "days_ago": 50, "supersedes": "a"},  # dated earlier
        ],
    }
    ids = eng.import_json(doc)["ids"]
    mem = eng.for_user("ana")
    old, new, now, a, b = (mem.get(ids[k]) for k in ("old", "new", "now", "a", "b"))
    assert old.superseded_at == new.created_at and new.superseded_at == now.created_at
    assert 29 <= (now.created_at - new.created_at).days <= 30  # the undated one is the import's time
    assert a.superseded_at == a.created_at and a.superseded_by == b.id  # never before a was stored


def test_catalog_file_imports(eng):
    result = eng.import_json(
        [{"title": "Hub", "text": "Hub v2 speaks Zigbee", "key": "hub"}, {"text": "Thread is a mesh"}]
    )
    assert result["catalog"] == 2
    assert eng.for_user("anyone").get(result["ids"]["hub"]).title == "Hub"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["episodic"].append({"text": ""}), r"episodic\[2\]\.text"),
        (lambda d: d["episodic"].append({"txt": "typo"}), r"episodic\[2\]"),
        (lambda d: d["semantic"].append({"text": "x", "confidence": 3}), r"semantic\[2\]\.confidence"),
        (lambda d: d["semantic"].append({"text": "x", "fact_type": "gossip"}), r"semantic\[2\]\.fact_type"),
        (lambda d: d["semantic"].append({"text": "x", "supersedes": "nope"}), r"semantic\[2\]\.supersedes"),
        (
            lambda d: d["semantic"].append({"text": "x", "supersedes": "bristol"}),
            r"semantic\[2\]\.supersedes.*already",
        ),
        (lambda d: d["semantic"].append({"text": "x", "supersedes": "e1"}), r"semantic\[2\]\.supersedes"),
        (
            lambda d: d["semantic"].append({"text": "x", "contradiction": "harsh"}),
            r"semantic\[2\]\.contradiction",
        ),
        (
            lambda d: d["semantic"].append({"text": "x", "supporting_episodes": ["zzz"]}),
            r"semantic\[2\]\.supporting",
        ),
        (lambda d: d["procedural"].append({"name": "", "steps": []}), r"procedural\[1\]\.name"),
        (
            lambda d: d["procedural"].append({"name": "p", "steps": [{"order": "first"}]}),
            r"procedural\[1\]\.steps\[0\]",
        ),
        (
            lambda d: d["episodic"].append({"text": "x", "days_ago": 3, "timestamp": "2024-01-01T00:00:00Z"}),
            r"episodic\[2\]",
        ),
        (lambda d: d["episodic"].append({"text": "x", "key": "e1"}), r"episodic\[2\]\.key"),
        (
            lambda d: d["episodic"].append({"text": "x", "metadata": {"speaker": 7}}),
            r"episodic\[2\]\.metadata\.speaker",
        ),
        (lambda d: d.update(user_id="bad user!"), r"user_id"),
        (lambda d: d.update(extra_section=[]), r"extra_section"),
    ],
)
def test_bad_documents_name_the_record_and_import_nothing(eng, mutate, message):
    doc = json.loads(json.dumps(DOC))
    mutate(doc)
    with pytest.raises(InvalidInput, match=message):  # ImportFileError, or the user id's own error
        eng.import_json(doc)
    assert counts(eng, "sarah") == {"episodic": 0, "semantic": 0, "procedural": 0}


def test_user_must_be_known_and_consistent(eng):
    doc = dict(DOC, user_id=None)
    with pytest.raises(ImportFileError, match="no user"):
        eng.import_json(doc)
    with pytest.raises(ImportFileError, match="not 'bob'"):
        eng.import_json(DOC, user_id="bob")
    eng.import_json(doc, user_id="bob")
    assert counts(eng, "bob")["semantic"] == 2 and counts(eng, "sarah")["semantic"] == 0
    # A list is a catalog import: naming a user is a mistake, not a catalog write.
    with pytest.raises(ImportFileError, match="takes no user"):
        eng.import_json([{"title": "t", "text": "meant for sarah"}], user_id="sarah")
    assert eng.catalog.list() == []


def test_bad_catalog_rows_import_nothing(eng):
    with pytest.raises(ImportFileError, match=r"catalog\[1\]\.text"):
        eng.import_json([{"title": "ok", "text": "fine"}, {"title": "missing text"}])
    assert eng.catalog.list() == []


def test_a_large_import_commits_in_chunks_with_its_references_intact(make_engram):
    """A bulk import must not hold the write lock for its whole length (issue 12.4): other
    connections see it land chunk by chunk, and chunks never break a supersession or a context."""
    import threading

    import apsw

    eng = make_engram(import_chunk=4)
    turns = [
        {"key": f"t{i}", "text": f"turn {i} about sensor {i}", "session_id": "s", "days_ago": 40 - i}
        for i in range(30)
    ]
    doc = {
        "user_id": "sarah",
        "episodic": turns[::-1],  # file order is not time order: contexts still point backwards in time
        "semantic": [
            {"key": "old", "text": "Sarah lives in Bristol"},
            {"key": "new", "text": "Sarah lives in Edinburgh", "supersedes": "old"},
        ],
    }
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        reader = apsw.Connection(str(eng.store.path))
        while not done.is_set():
            seen.add(reader.execute("SELECT count(*) FROM memories").fetchone()[0])
        reader.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        ids = eng.import_json(doc)["ids"]
    finally:
        done.set()
        watcher.join()
    assert {n for n in seen if 0 < n < 32}, seen  # committed in parts, visible while it ran
    mem = eng.for_user("sarah")
    assert mem.get(ids["old"]).superseded_by == ids["new"]
    contexts = {ep.text: ep.context for ep in mem.list("episodic", limit=100)}
    assert contexts["turn 7 about sensor 7"] == "turn 6 about sensor 6"
    assert contexts["turn 0 about sensor 0"] is None


def test_timestamps_are_stored_in_utc(eng):
    """An offset in the file is normalised like every other timestamp (issue 12, item 16)."""
    eng.import_json(
        {
            "user_id": "sarah",
            "episodic": [{"text": "said in Paris", "timestamp": "2024-05-01T10:00:00+02:00"}],
            "semantic": [{"text": "a fact from Delhi", "timestamp": "2024-05-01T10:00:00+05:30"}],
        }
    )
    mem = eng.for_user("sarah")
    (turn,) = mem.list("episodic")
    (fact,) = mem.list("semantic")
    assert turn.timestamp.isoformat() == "2024-05-01T08:00:00+00:00"
    assert fact.created_at.isoformat() == "2024-05-01T04:30:00+00:00"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "x", "days_ago": 800_000}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "days_ago": 1e9}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "days_ago": 1e308}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "days_ago": float("inf")}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "days_ago": True}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "days_ago": "3"}, r"episodic\[0\]\.days_ago"),
        ({"text": "x", "timestamp": "0001-01-01T00:00:00+01:00"}, r"episodic\[0\]\.timestamp.*range"),
        ({"text": "x", "timestamp": 845}, r"episodic\[0\]\.timestamp"),
        ({"text": "x", "timestamp": "845"}, r"episodic\[0\]\.timestamp"),
        ({"text": "\u200b\u200b"}, r"episodic\[0\]\.text has no visible character"),
    ],
)
def test_times_and_text_that_cannot_be_stored_are_refused(eng, record, message):
    """Huge ``days_ago`` and out-of-range timestamps are a clear error naming the record, not an
    overflow (issue 12, item 10); numbers are numbers and times are ISO 8601 strings (item 16)."""
    with pytest.raises(ImportFileError, match=message):
        eng.import_json({"user_id": "sarah", "episodic": [record]})
    assert counts(eng, "sarah") == {"episodic": 0, "semantic": 0, "procedural": 0}


@pytest.mark.parametrize(
    ("playbook", "message"),
    [
        ({"description": "x" * 900_000}, r"procedural\[0\]\.description is 900000 characters"),
        ({"trigger_text": "x" * 2_001}, r"procedural\[0\]\.trigger_text"),
        ({"name": "n" * 201}, r"procedural\[0\]\.name"),
        ({"name": "\ufeff"}, r"procedural\[0\]\.name"),
        ({"text": "\u200b"}, r"procedural\[0\]\.text"),
        ({"steps": [{"order": 1, "instruction": "x" * 2_001}]}, r"procedural\[0\]\.steps\[0\]\.instruction"),
        ({"steps": [{"order": i, "instruction": "a"} for i in range(1, 102)]}, r"procedural\[0\]\.steps"),
        ({"steps": [{"order": "1", "instruction": "a"}]}, r"procedural\[0\]\.steps\[0\]\.order"),
        ({"success_count": True}, r"procedural\[0\]\.success_count"),
    ],
)
def test_playbooks_have_limits(eng, playbook, message):
    """Issue 12, item 14: the text limit covers every field of a playbook."""
    with pytest.raises(ImportFileError, match=message):
        eng.import_json({"user_id": "sarah", "procedural": [{"name": "p", **playbook}]})
    assert counts(eng, "sarah") == {"episodic": 0, "semantic": 0, "procedural": 0}


def test_an_import_run_again_writes_only_what_is_missing(make_engram):
    """Ids derive from each record, so an interrupted import is finished by running it again, a
    finished one writes nothing twice, and a row forgotten since stays forgotten."""
    eng = make_engram(import_chunk=2)
    first = eng.import_json(DOC)
    assert first["skipped"] == 0 and first["written"] == 5
    mem = eng.for_user("sarah")
    mem.forget(first["ids"]["e1"])
    again = eng.import_json(DOC)
    assert again["ids"] == first["ids"] and again["skipped"] == 5  # 4 there, 1 forgotten
    assert again["written"] == 0 and (again["episodic"], again["semantic"], again["procedural"]) == (0, 0, 0)
    assert counts(eng, "sarah") == {"episodic": 1, "semantic": 2, "procedural": 1}
    # another user importing the same file gets rows of their own
    bob = eng.import_json({**DOC, "user_id": "bob"})
    assert bob["skipped"] == 0 and set(bob["ids"].values()).isdisjoint(first["ids"].values())


def test_a_link_to_a_fact_forgotten_or_replaced_since_is_refused_before_anything_is_written(make_engram):
    """An outside review: a grown document whose new fact supersedes one forgotten since the first
    import wrote its first chunk, then stopped at the link with a StorageError on every retry."""
    eng = make_engram(import_chunk=2)
    first = eng.import_json({"user_id": "u", "semantic": [{"key": "a", "text": "U lives in Bristol"}]})
    mem = eng.for_user("u")
    mem.forget(first["ids"]["a"])
    grown = {
        "user_id": "u",
        "episodic": [{"text": f"turn {i}", "days_ago": 1} for i in range(5)],
        "semantic": [
            {"key": "a", "text": "U lives in Bristol"},
            {"text": "U lives in Leeds", "supersedes": "a", "contradiction": "natural"},
        ],
    }
    with pytest.raises(ImportFileError, match=r"semantic\[1\]\.supersedes \('a'\): .*forgotten"):
        eng.import_json(grown)
    assert counts(eng, "u") == {"episodic": 0, "semantic": 0, "procedural": 0}
    # replaced by another write since: a Conflict naming the record, nothing written
    second = eng.import_json({"user_id": "v", "semantic": [{"key": "a", "text": "V lives in Bristol"}]})
    eng.for_user("v").write("V lives in Paris", supersedes_id=second["ids"]["a"])
    with pytest.raises(Conflict, match=r"semantic\[1\]\.supersedes \('a'\): .*superseded since"):
        eng.import_json({**grown, "user_id": "v"})
    assert counts(eng, "v") == {"episodic": 0, "semantic": 2, "procedural": 0}
    # the same document run to the end once, then again: its link is its own, nothing to refuse
    done = eng.import_json({**grown, "user_id": "w"})
    assert eng.import_json({**grown, "user_id": "w"})["skipped"] == done["written"] == 7


def test_a_growing_document_imported_three_times_stores_each_record_once(make_engram):
    """Issue 26, item 10: ids derived from the whole document stored every earlier record again
    once one turn was appended (two "Sarah lives in Edinburgh" facts, both recalled)."""
    eng = make_engram(import_chunk=3)
    doc: dict = {"user_id": "sarah", "episodic": [], "semantic": []}
    reports = []
    for run in range(3):
        doc["episodic"].append({"text": f"turn {run}: we talked about the hub", "days_ago": 10 - run})
        doc["episodic"].append(
            {"text": "yes", "days_ago": 5, "session_id": "s"}
        )  # equal records: each counts
        doc["semantic"].append({"text": f"fact {run}", "key": f"f{run}"})
        if run == 0:
            doc["semantic"].append({"text": "Sarah lives in Edinburgh", "metadata": {"a": 1, "b": [1, 2]}})
        reports.append(eng.import_json(json.loads(json.dumps(doc))))
    assert [(r["written"], r["skipped"]) for r in reports] == [(4, 0), (3, 4), (3, 7)]
    assert [(r["episodic"], r["semantic"]) for r in reports] == [(2, 2), (2, 1), (2, 1)]
    mem = eng.for_user("sarah")
    texts = sorted(m.text for t in ("episodic", "semantic") for m in mem.list(t, limit=100))
    assert texts == sorted(
        [f"turn {i}: we talked about the hub" for i in range(3)]
        + ["yes"] * 3
        + [f"fact {i}" for i in range(3)]
        + ["Sarah lives in Edinburgh"]
    )
    hits = mem.recall("where does sarah live", memory_types=["semantic"])
    assert [h.memory.text for h in hits].count("Sarah lives in Edinburgh") == 1
    # the same record with its metadata written in another key order is the same record
    again = {
        "user_id": "sarah",
        "semantic": [{"text": "Sarah lives in Edinburgh", "metadata": {"b": [1, 2], "a": 1}}],
    }
    assert eng.import_json(again)["skipped"] == 1
    # a key is the record's identity: an edited record under its key is not written twice
    edited = {"user_id": "sarah", "semantic": [{"text": "fact zero, reworded", "key": "f0"}]}
    assert eng.import_json(edited)["skipped"] == 1
    assert counts(eng, "sarah") == {"episodic": 6, "semantic": 4, "procedural": 0}


def test_two_runs_of_one_import_at_once_write_each_row_once(make_engram):
    """Issue 26, item 11: a client that gave up waiting and sent the import again raced the first
    run (503 on a row it had just written); both finish, each row is written once."""
    import threading

    eng = make_engram(import_chunk=2)
    doc = {
        "user_id": "sarah",
        "episodic": [{"text": f"turn {i} about the hub", "days_ago": 1} for i in range(40)],
    }
    results: list[dict] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(eng.import_json(doc))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r["written"] for r in results) == 40 and all(
        r["written"] + r["skipped"] == 40 for r in results
    )
    assert counts(eng, "sarah")["episodic"] == 40


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"tags": {"a", "b"}}, r"metadata\.tags is a set"),
        ({"score": float("nan")}, r"metadata\.score is nan"),
        ({"score": float("inf")}, r"metadata\.score is inf"),
        ({"pair": (1, 2)}, r"metadata\.pair is a tuple"),
        ({1: "x"}, r"metadata has the key 1"),
        ({"who": "\ud800"}, r"metadata\.who is not valid Unicode"),
        ({"deep": [[{"x": ["\udfff"]}]]}, r"metadata\.deep\[0\]\[0\]\.x\[0\] is not valid Unicode"),
        ({"when": datetime(2024, 1, 1, tzinfo=UTC)}, r"metadata\.when is a datetime"),
        ("not a dict", r"metadata must be a JSON object"),
    ],
)
def test_metadata_json_cannot_hold_is_refused_before_any_work(make_engram, metadata, message):
    """Issue 26, item 16: raw pydantic or UnicodeEncodeError after the row was embedded, and sets
    and NaN read back different from what was stored. Refused first, as InvalidInput, everywhere."""
    eng = make_engram()
    embedded: list[int] = []
    encode = eng.encode_rows
    eng.encode_rows = lambda rows: embedded.append(len(rows)) or encode(rows)  # counts the work done
    mem = eng.for_user("sarah")
    calls = [
        lambda: mem.remember_turn("hello", metadata=metadata),
        lambda: mem.write("Sarah likes tea", metadata=metadata),
        lambda: mem.write("", memory_type="procedural", name="p", metadata=metadata),
        lambda: eng.catalog.add("Hub v2", metadata=metadata),
    ]
    for call in calls:
        with pytest.raises(InvalidInput, match=message):
            call()
    if isinstance(metadata, dict) and not any(isinstance(k, int) for k in metadata):
        try:  # JSON itself cannot carry these into an import document, Python can
            doc = {"user_id": "sarah", "semantic": [{"text": "x", "metadata": metadata}]}
            with pytest.raises(ImportFileError, match=r"semantic\[0\]\." + message):
                eng.import_json(doc)
        except TypeError:
            pass
    assert embedded == [] and counts(eng, "sarah") == {"episodic": 0, "semantic": 0, "procedural": 0}
    assert eng.catalog.list() == []


def test_metadata_json_holds_is_stored_exactly(eng):
    meta = {"n": 1, "x": 0.5, "ok": True, "none": None, "list": [1, "a", {"b": [None]}], "ü": "ß"}
    mem = eng.for_user("sarah")
    turn = mem.remember_turn("hello", metadata=meta)
    assert mem.get(turn.id).metadata == meta
    too_deep: dict = {}
    node = too_deep
    for _ in range(40):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InvalidInput, match="nested deeper"):
        mem.remember_turn("hello", metadata=too_deep)
