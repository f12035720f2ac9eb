"""A whole store exported and imported into the other backend: nothing lost, nothing changed."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from engram import Engram, ImportFileError
from engram.auth import hash_key
from engram.models import utcnow
from engram.storage.base import ApiKeyRecord, ConsolidationWrite
from engram.storage.sqlite import SQLiteStore
from engram.transfer import export_store, import_store


def rich_store(eng: Engram) -> dict[str, str]:
    """A store using every feature the export must keep; returns the ids a test looks at."""
    sarah = eng.for_user("sarah")
    first = sarah.remember_turn("Did the Zigbee door sensor ever pair?", session_id="s1")
    reply = sarah.remember_turn("yes, on the third try", session_id="s1")
    skipped = sarah.remember_turn("}{ unreadable", session_id="s2")
    old = sarah.write("Sarah lives in Bristol", fact_type="identity")
    new = sarah.write("Sarah lives in Edinburgh", supersedes_id=old.id, contradiction="harsh")
    sarah.recall("where does sarah live")  # use counts
    gone = sarah.write("Sarah's PIN hint is the dog's name")
    sarah.forget(gone.id)
    eng.import_json(
        {
            "user_id": "bob",
            "procedural": [
                {
                    "name": "Re-pair a sensor",
                    "steps": [{"order": 1, "instruction": "hold reset"}],
                    "success_count": 3,
                    "failure_count": 1,
                }
            ],
        }
    )
    eng.catalog.add("Hub v2 speaks Zigbee and Thread", title="Hub v2")
    zeros = eng.embedder.embed_documents(["x"])[:0]
    for ids, skip in (([first.id], False), ([skipped.id], True)):
        eng.store.apply_consolidation(  # type: ignore[attr-defined]
            "sarah",
            ConsolidationWrite(
                rows=[],
                vectors=zeros,
                supersede={},
                merges=[],
                feedback=[],
                episode_ids=ids,
                at=utcnow(),
                skipped=skip,
            ),
        )
    now = utcnow()
    eng.store.add_key(ApiKeyRecord("key_live", "sarah", "laptop", now), hash_key("egk_live_secret"))  # type: ignore[attr-defined]
    eng.store.add_key(ApiKeyRecord("key_old", "bob", "", now - timedelta(days=1)), hash_key("egk_old_secret"))  # type: ignore[attr-defined]
    eng.store.revoke_key("key_old", now)  # type: ignore[attr-defined]
    return {"reply": reply.id, "old": old.id, "new": new.id, "gone": gone.id}


def body(export: str) -> list[str]:
    """The export without its header (which holds the time of the export)."""
    return export.splitlines()[1:]


@pytest.mark.parametrize(("source", "target"), [("sqlite", "postgres"), ("postgres", "sqlite")])
def test_round_trip_between_backends_is_lossless(source, target, tmp_path, request, embedder, token_encoder):
    from tests.conftest import make_store

    def engram(kind: str, folder: str) -> Engram:
        (tmp_path / folder).mkdir()
        store = make_store(kind, tmp_path / folder, request)
        return Engram(store, embedder, None, token_encoder=token_encoder)

    with engram(source, "a") as a, engram(target, "b") as b:
        ids = rich_store(a)
        first = io.StringIO()
        counts = export_store(a, first, keys=True)
        assert counts == {
            "catalog": 1,
            "episodic": 3,
            "semantic": 2,
            "procedural": 1,
            "tombstones": 1,
            "keys": 2,
        }
        assert import_store(b, io.StringIO(first.getvalue())) == counts
        second = io.StringIO()
        export_store(b, second, keys=True)
        assert body(second.getvalue()) == body(first.getvalue())  # every field of every record
        # and the imported store works like the original
        sarah = b.for_user("sarah")
        assert sarah.get(ids["old"]).superseded_by == ids["new"] and sarah.get(ids["old"]).retracted
        assert [m.id for m in sarah.history(ids["new"])] == [ids["old"], ids["new"]]
        assert sarah.get(ids["reply"]).context == "Did the Zigbee door sensor ever pair?"
        assert [e.id for e in b.store.waiting_episodes("sarah", 10)] == [ids["reply"]]  # type: ignore[attr-defined]
        assert b.store.find_key(hash_key("egk_live_secret")).user_id == "sarah"  # type: ignore[attr-defined]
        assert b.store.find_key(hash_key("egk_old_secret")).revoked_at is not None  # type: ignore[attr-defined]
        assert sarah.recall("which city is sarah in", k=1)[0].memory.id == ids["new"]
        assert b.for_user("bob").recall("hub protocols", k=3)[0].memory.memory_type == "catalog"


def test_a_bad_export_names_its_line_and_an_existing_id_is_a_conflict(tmp_path, embedder):
    from engram import Conflict

    with Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as eng:
        with pytest.raises(ImportFileError, match="not an Engram export"):
            import_store(eng, io.StringIO('{"user_id": "sarah"}\n'))
        header = json.dumps({"engram_export": 1})
        with pytest.raises(ImportFileError, match="line 2 is not JSON"):
            import_store(eng, io.StringIO(header + "\n{nope\n"))
        with pytest.raises(ImportFileError, match="line 2"):
            import_store(eng, io.StringIO(header + '\n{"memory": {"memory_type": "semantic"}}\n'))
        eng.for_user("sarah").write("Sarah likes tea")
        export = io.StringIO()
        export_store(eng, export)
        with pytest.raises(Conflict):
            import_store(eng, io.StringIO(export.getvalue()))


def test_a_turn_written_before_the_turn_it_quotes_keeps_its_context(tmp_path, embedder):
    """Rows go in write order; a context written after its turn (an old bulk import) must wait."""
    from engram.models import EpisodicMemory, new_id
    from engram.settings import EngramSettings

    at = utcnow()
    question = EpisodicMemory(
        id=new_id("episodic"), text="Which hub?", user_id="sarah", created_at=at, timestamp=at
    )
    answer = EpisodicMemory(
        id=new_id("episodic"),
        text="the Lumio one",
        user_id="sarah",
        created_at=at,
        timestamp=at + timedelta(seconds=1),
        context="Which hub?",
        context_id=question.id,
    )
    one_at_a_time = EngramSettings(import_chunk=1)
    with (
        Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as a,
        Engram(SQLiteStore(tmp_path / "b.db"), embedder, None, settings=one_at_a_time) as b,
    ):
        rows = [answer, question]  # the answer gets the smaller rowid
        a.store.insert("sarah", rows, embedder.embed_documents([r.text for r in rows]))
        export = io.StringIO()
        export_store(a, export)
        assert import_store(b, io.StringIO(export.getvalue())) == {"episodic": 2}
        assert b.for_user("sarah").get(answer.id).context_id == question.id


def test_engram_export_and_import_all_on_the_command_line(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))

    def engram(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engram", *args], env=env, capture_output=True, text=True
        )

    doc = tmp_path / "sarah.json"
    doc.write_text(json.dumps({"user_id": "sarah", "semantic": [{"text": "Sarah lives in Leith"}]}))
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    assert engram("import", str(doc), "--store", a).returncode == 0
    exported = engram("export", str(tmp_path / "all.jsonl"), "--store", a)
    assert exported.returncode == 0 and "exported 1 semantic" in exported.stderr
    loaded = engram("import", "--all", str(tmp_path / "all.jsonl"), "--store", b)
    assert loaded.returncode == 0 and "imported 1 semantic" in loaded.stdout
    again = engram("export", "-", "--store", b)
    assert body(again.stdout) == body((tmp_path / "all.jsonl").read_text())
    refused = engram("import", "--all", str(doc), "--store", b)  # a user document is no export
    assert refused.returncode == 1 and "not an Engram export" in refused.stdout
