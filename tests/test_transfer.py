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
    """The export without its header (which holds the time of the export) and its trailer (which
    checksums the header)."""
    lines = export.splitlines()
    assert json.loads(lines[-1])["engram_export_end"]["lines"] == len(lines) - 1
    return lines[1:-1]


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


def test_a_bad_export_names_its_line_and_an_existing_id_that_differs_is_a_conflict(tmp_path, embedder):
    from engram import Conflict

    with Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as eng:
        with pytest.raises(ImportFileError, match="not an Engram export"):
            import_store(eng, io.StringIO('{"user_id": "sarah"}\n'))
        header = json.dumps({"engram_export": 2})
        with pytest.raises(ImportFileError, match="line 2 is not JSON"):
            import_store(eng, io.StringIO(header + "\n{nope\n"))
        with pytest.raises(ImportFileError, match="line 2"):
            import_store(eng, io.StringIO(header + '\n{"memory": {"memory_type": "semantic"}}\n'))
        fact = eng.for_user("sarah").write("Sarah likes tea")
        export = io.StringIO()
        export_store(eng, export)
        # the same rows again: already there, identical, skipped (a resumed import)
        assert import_store(eng, io.StringIO(export.getvalue())) == {"skipped": 1}
        with Engram(SQLiteStore(tmp_path / "b.db"), embedder, None) as other:
            changed = fact.model_copy(update={"text": "Sarah likes coffee"})
            other.store.insert("sarah", [changed], embedder.embed_documents([changed.text]))
            with pytest.raises(Conflict, match=fact.id):
                import_store(other, io.StringIO(export.getvalue()))


def cuts(export: str) -> list[tuple[str, str]]:
    """(what, text) for the export cut on every line boundary and in the middle of every line."""
    ends = [i + 1 for i, ch in enumerate(export) if ch == "\n"]
    starts = [0, *ends[:-1]]
    out = [(f"after line {n}", export[:end]) for n, end in enumerate(ends[:-1], start=1)]
    out += [
        (f"inside line {n}", export[: (s + e) // 2])
        for n, (s, e) in enumerate(zip(starts, ends, strict=True), 1)
    ]
    out.append(("before the last line break", export[:-1]))  # complete: nothing lost
    return out


def test_an_export_cut_anywhere_is_refused_and_writes_nothing(tmp_path, embedder):
    """Issue 26, item 13: an export cut on a line boundary imported as a success, losing every user
    after the cut. Every cut is refused before anything is written (the last line break alone is no
    loss); so are a changed line and anything after the trailer."""
    from engram.settings import EngramSettings

    one_at_a_time = EngramSettings(import_chunk=1)  # a write per row: none may come before the refusal
    with (
        Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as a,
        Engram(SQLiteStore(tmp_path / "b.db"), embedder, None, settings=one_at_a_time) as b,
    ):
        rich_store(a)
        out = io.StringIO()
        counts = export_store(a, out, keys=True)
        export = out.getvalue()
        for what, cut in cuts(export):
            if what == "before the last line break":
                continue
            with pytest.raises(ImportFileError, match=r"trailer|not JSON"):
                import_store(b, io.StringIO(cut))
            assert b.store.tenants() == [] and b.store.scan(None, 0, 10) == [], what
            assert b.store.export_keys() == [], what
        changed = export.replace("Sarah lives in Bristol", "Sarah lives in Bath")
        with pytest.raises(ImportFileError, match="checksum"):
            import_store(b, io.StringIO(changed))
        lines = export.splitlines(keepends=True)
        with pytest.raises(ImportFileError, match="does not match its trailer"):
            import_store(b, io.StringIO("".join(lines[:3] + lines[4:])))  # one record left out
        with pytest.raises(ImportFileError, match="after its trailer"):
            import_store(b, io.StringIO(export + lines[3]))
        assert b.store.tenants() == [] and b.store.export_keys() == []
        assert import_store(b, io.StringIO(export[:-1])) == counts  # only the last line break lost


def test_an_export_without_trailer_needs_the_flag(tmp_path, embedder):
    """An older Engram's export (format 1, no trailer) imports only when asked for: it cannot be told
    apart from one cut on a line boundary. A cut mid-line is still refused, before any write."""
    with (
        Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as a,
        Engram(SQLiteStore(tmp_path / "b.db"), embedder, None) as b,
    ):
        a.for_user("sarah").write("Sarah lives in Leith")
        a.for_user("bob").write("Bob likes tea")
        out = io.StringIO()
        export_store(a, out)
        lines = out.getvalue().splitlines(keepends=True)
        old = "".join([lines[0].replace('"engram_export": 2', '"engram_export": 1'), *lines[1:-1]])
        with pytest.raises(ImportFileError, match=r"no trailer.*allow-no-trailer"):
            import_store(b, io.StringIO(old))
        with pytest.raises(ImportFileError, match="line 3 is not JSON"):
            import_store(b, io.StringIO(old[:-5]), allow_no_trailer=True)
        assert b.store.tenants() == []
        assert import_store(b, io.StringIO(old), allow_no_trailer=True) == {"semantic": 2}


def test_an_import_that_stopped_midway_says_how_far_and_resumes(tmp_path, embedder):
    """Issue 26, item 12: `import --all` committed chunks, then failed with an error documented as
    "nothing was changed", and the complete file run again failed with Conflict: the target was lost.
    Now a failure after a write says how far the import got, and running it again finishes it."""
    from engram import Conflict
    from engram.settings import EngramSettings

    small = EngramSettings(import_chunk=2)
    with (
        Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as a,
        Engram(SQLiteStore(tmp_path / "b.db"), embedder, None, settings=small) as b,
    ):
        ids = rich_store(a)
        out = io.StringIO()
        counts = export_store(a, out, keys=True)
        export = out.getvalue()
        # the target holds one of the export's ids with other content: the import stops there
        row = a.for_user("sarah").get(ids["reply"])
        other = row.model_copy(update={"text": "no, never"})
        b.store.insert("sarah", [other], embedder.embed_documents([other.text]))
        with pytest.raises(Conflict, match=r"stopped at line \d+, after writing \d+ records .*Run it again"):
            import_store(b, io.StringIO(export))
        assert b.store.scan(None, 0, 10) != []  # the catalog came first and is written
        b.store.forget("sarah", ids["reply"], utcnow())  # the operator clears the way
        resumed = import_store(b, io.StringIO(export))
        assert resumed["skipped"] > 0
        again = io.StringIO()
        export_store(b, again, keys=True)
        forgotten = [line for line in body(again.getvalue()) if ids["reply"] in line and "tombstone" in line]
        assert [line for line in body(again.getvalue()) if line not in forgotten] == body(export)
        assert {k: v for k, v in resumed.items() if k != "skipped"} != counts  # part was there already
        # run once more: everything is there, nothing is written
        assert set(import_store(b, io.StringIO(export))) == {"skipped"}


def test_a_resumed_import_marks_turns_a_stopped_one_wrote_but_did_not_mark(tmp_path, embedder):
    """Rows and their consolidation marks are two transactions: rows a stopped import wrote without
    their marks get them when it is run again, so no turn is consolidated twice."""
    with (
        Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as a,
        Engram(SQLiteStore(tmp_path / "b.db"), embedder, None) as b,
    ):
        rich_store(a)
        out = io.StringIO()
        export_store(a, out)
        sarah_rows = [m for _, m, _ in a.store.scan("sarah", 0, 100)]
        b.store.insert("sarah", sarah_rows, embedder.embed_documents([m.text for m in sarah_rows]))
        assert len(b.store.waiting_episodes("sarah", 10)) == 3  # written, not marked
        import_store(b, io.StringIO(out.getvalue()))
        waiting = [e.id for e in a.store.waiting_episodes("sarah", 10)]
        assert [e.id for e in b.store.waiting_episodes("sarah", 10)] == waiting


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


def test_an_import_that_brings_a_second_admin_key_says_so(tmp_path):
    """An operator's walk: `engram serve` made the new store's admin key, then `import --all` of an
    export with --keys brought the old store's: two live admin keys, silently."""
    from typer.testing import CliRunner

    from engram.auth import ApiKeys
    from engram.interfaces.cli import app
    from engram.storage.sqlite import SQLiteStore

    old, new = tmp_path / "old.db", tmp_path / "new.db"
    for path in (old, new):
        store = SQLiteStore(path)
        try:
            ApiKeys(store).create(None, "created on first start")
        finally:
            store.close()
    runner, env = CliRunner(), {"ENGRAM_HOME": str(tmp_path)}
    exported = runner.invoke(
        app, ["export", str(tmp_path / "all.jsonl"), "--keys", "--store", str(old)], env=env
    )
    assert exported.exit_code == 0, exported.output
    loaded = runner.invoke(
        app, ["import", "--all", str(tmp_path / "all.jsonl"), "--store", str(new)], env=env
    )
    assert loaded.exit_code == 0 and "imported 1 keys" in loaded.stdout, loaded.output
    assert "warning: this store now has 2 live admin keys" in loaded.stderr
    assert "engram keys revoke" in loaded.stderr


def test_an_export_replaces_the_file_only_once_complete(tmp_path):
    """An outside review: a nightly `engram export backup.jsonl` killed midway left the last good
    backup empty (the file was truncated at the start). Now the earlier file stays whole until the new
    one is complete, and a path that cannot be written is one line, not a traceback."""
    import os
    import subprocess
    import sys

    import typer

    from engram.interfaces.cli.common import written_whole

    backup = tmp_path / "backup.jsonl"
    backup.write_text("the last good export\n")
    with pytest.raises(RuntimeError), written_whole(str(backup)) as out:
        out.write("half of a new one")
        assert backup.read_text() == "the last good export\n"  # what a kill here would leave
        raise RuntimeError("killed")
    assert backup.read_text() == "the last good export\n" and os.listdir(tmp_path) == ["backup.jsonl"]
    with written_whole(str(backup)) as out:
        out.write("a new one\n")
    assert backup.read_text() == "a new one\n" and os.listdir(tmp_path) == ["backup.jsonl"]
    with pytest.raises(typer.Exit), written_whole(str(tmp_path)) as out:
        out.write("x")
    with pytest.raises(typer.Exit), written_whole(str(tmp_path / "newdir") + "/") as out:
        out.write("x")  # a folder meant, not a file named newdir
    # a link is written through (a "latest" link stays one), and a file named like ours is not touched
    (tmp_path / "latest.jsonl").symlink_to(backup)
    (tmp_path / "latest.jsonl.partial").write_text("someone's")
    with written_whole(str(tmp_path / "latest.jsonl")) as out:
        out.write("the newest\n")
    assert (tmp_path / "latest.jsonl").is_symlink() and backup.read_text() == "the newest\n"
    assert (tmp_path / "latest.jsonl.partial").read_text() == "someone's"
    assert sorted(os.listdir(tmp_path)) == ["backup.jsonl", "latest.jsonl", "latest.jsonl.partial"]
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))
    store = f"sqlite:///{tmp_path}/a.db"
    subprocess.run(
        [sys.executable, "-m", "engram", "remember-turn", "hi", "-u", "sam", "--store", store], env=env
    )
    for args in (["export", str(tmp_path / "nowhere" / "all.jsonl")], ["users", "export", "sam", "-f", "/"]):
        done = subprocess.run(
            [sys.executable, "-m", "engram", *args, "--store", store], env=env, capture_output=True, text=True
        )
        assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
        assert done.stdout.startswith("error: cannot write ") and len(done.stdout.splitlines()) == 1


def test_engram_export_and_import_all_on_the_command_line(tmp_path):
    import os
    import subprocess
    import sys

    from engram.interfaces.cli.common import written_whole

    env = dict(os.environ, ENGRAM_HOME=str(tmp_path))

    def engram(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engram", *args], env=env, capture_output=True, text=True
        )

    doc = tmp_path / "sarah.json"
    doc.write_text(json.dumps({"user_id": "sarah", "semantic": [{"text": "Sarah lives in Leith"}]}))
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    assert engram("import", str(doc), "--store", a).returncode == 0
    (tmp_path / "all.jsonl").write_text("")
    (tmp_path / "all.jsonl").chmod(0o644)  # an existing file is made private too
    exported = engram("export", str(tmp_path / "all.jsonl"), "--store", a)
    assert exported.returncode == 0 and "exported 1 semantic" in exported.stderr
    # as private as the store: only its owner reads an export (every memory, key hashes with --keys)
    assert (tmp_path / "all.jsonl").stat().st_mode & 0o777 == 0o600
    mine = engram("users", "export", "sarah", "-f", str(tmp_path / "sarah.jsonl"), "--store", a)
    assert mine.returncode == 0 and (tmp_path / "sarah.jsonl").stat().st_mode & 0o777 == 0o600
    # what is not a file of ours keeps its mode (a diff review: as root, /dev/null became 0600)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with written_whole(str(fifo)) as out:
            out.write("x")
    finally:
        os.close(reader)
    assert fifo.stat().st_mode & 0o777 == 0o644
    loaded = engram("import", "--all", str(tmp_path / "all.jsonl"), "--store", b)
    assert loaded.returncode == 0 and "imported 1 semantic" in loaded.stdout
    again = engram("export", "-", "--store", b)
    assert body(again.stdout) == body((tmp_path / "all.jsonl").read_text())
    refused = engram("import", "--all", str(doc), "--store", b)  # a user document is no export
    assert refused.returncode == 1 and "not an Engram export" in refused.stdout
    assert "import it without --all" in refused.stdout  # which command it wants (a newcomer's walk)
    missed = engram("import", str(tmp_path / "all.jsonl"), "--store", b)  # an export without --all
    assert missed.returncode == 1 and "it is an export" in missed.stdout and "add --all" in missed.stdout
    # a cut export writes nothing and says why; resumed or complete, it goes in once
    whole = (tmp_path / "all.jsonl").read_text()
    (tmp_path / "cut.jsonl").write_text(whole[: whole.rindex("\n", 0, -1) + 1])  # the trailer lost
    c = f"sqlite:///{tmp_path}/c.db"
    refused = engram("import", "--all", str(tmp_path / "cut.jsonl"), "--store", c)
    assert refused.returncode == 1 and "no trailer" in refused.stdout
    assert "--allow-no-trailer" in refused.stdout
    assert not (tmp_path / "c.db").exists()  # checked before the store is made: no empty store left
    listed = engram("list", "-u", "sarah", "--store", c)
    assert "Leith" not in listed.stdout
    loaded = engram("import", "--all", str(tmp_path / "cut.jsonl"), "--allow-no-trailer", "--store", c)
    assert loaded.returncode == 0 and "imported 1 semantic" in loaded.stdout
    again = engram("import", "--all", str(tmp_path / "all.jsonl"), "--store", c)
    assert again.returncode == 0 and "imported nothing; skipped 1 already there" in again.stdout


def test_a_session_id_stored_before_it_was_checked_does_not_stop_an_export(tmp_path, embedder):
    """A lone surrogate in a session id (accepted before 2026-12-03) made `engram export` fail for the
    whole store: the line is now written escaped, the export completes, and an import names the line
    and refuses it, writing nothing."""
    from engram.models import EpisodicMemory, new_id, utcnow

    with Engram(SQLiteStore(tmp_path / "a.db"), embedder, None) as eng:
        eng.for_user("sarah").remember_turn("we live in Bristol btw")
        old = EpisodicMemory(
            id=new_id("episodic"),
            text="hello there",
            user_id="zed",
            created_at=utcnow(),
            timestamp=utcnow(),
            session_id="chat\ud800",
        )
        eng.store.insert("zed", [old], embedder.embed_documents([old.text]))
        out = io.StringIO()
        assert export_store(eng, out) == {"episodic": 2}
        assert '"session_id": "chat\\ud800"' in out.getvalue()
        out.getvalue().encode("utf-8")  # the file is UTF-8
    with Engram(SQLiteStore(tmp_path / "b.db"), embedder, None) as target:
        with pytest.raises(ImportFileError, match=r"line \d: .*session_id is not valid Unicode"):
            import_store(target, io.StringIO(out.getvalue()))
        assert target.store.tenants() == []
