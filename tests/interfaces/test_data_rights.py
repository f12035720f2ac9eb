"""Data rights and key scopes over a real server: an admin exports and deletes one user over REST
(nothing of theirs left in the file, read raw; their keys and sessions stop at once), a read-only key
reads but never writes (REST, MCP, imports), an expired key opens nothing ("key expired"; the
inspector's session of it ends too)."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import secrets
import time
from datetime import timedelta

import anyio
import httpx

from engram.auth import hash_key
from engram.models import utcnow
from engram.storage.base import ApiKeyRecord
from engram.transfer import import_store
from tests.interfaces.conftest import mcp_session
from tests.interfaces.test_inspector import sign_in
from tests.storage.leftovers import sqlite_leftovers

MARK = "Xylophant"  # a word only in sarah's memories


def add_key(service, user: str, *, expires_in: timedelta) -> str:
    """A key that expires ``expires_in`` from now (negative: expired already), stored as the store
    stores any key: what `keys create --expires-in` makes once that time has passed."""
    key = "egk_" + secrets.token_urlsafe(32)
    record = ApiKeyRecord(
        id="key_" + secrets.token_urlsafe(9),
        user_id=user,
        label="",
        created_at=utcnow() - timedelta(days=1),
        expires_at=utcnow() + expires_in,
    )
    service.engram.store.add_key(record, hash_key(key))
    return key


def test_a_read_only_key_reads_and_is_refused_every_write(service):
    admin = service.client()
    made = admin.post("/v1/keys", json={"user_id": "sarah", "scope": "read", "expires_in_s": 30 * 86400})
    assert made.status_code == 201, made.text
    assert made.json()["scope"] == "read" and made.json()["expires_at"] is not None
    service.client("sarah").post("/v1/memories", json={"text": f"Sarah's hub is a {MARK}"}).raise_for_status()
    reader = service.client(key=made.json()["key"])
    assert reader.get("/v1/me").json() == {"user_id": "sarah", "scope": "read"}
    hits = reader.post("/v1/recall", json={"query": "what hub does sarah have"}).json()["hits"]
    assert hits and MARK in hits[0]["memory"]["text"]
    fact_id = hits[0]["memory"]["id"]
    refused = [
        reader.post("/v1/turns", json={"text": "my hub blinks"}),
        reader.post("/v1/memories", json={"text": "Sarah moved"}),
        reader.delete(f"/v1/memories/{fact_id}"),
        reader.post("/v1/import", json={"episodic": [{"text": "imported"}]}),
        reader.post(f"/v1/playbooks/{fact_id}/outcome", json={"success": True}),
        reader.post("/v1/consolidate"),
    ]
    for response in refused:
        assert response.status_code == 403, response.text
        assert "read-only" in response.json()["message"]
    mem = service.engram.for_user("sarah")
    assert [m.id for m in mem.list("semantic")] == [fact_id] and mem.list("episodic") == []
    # Use counts rank: a read-only key's recall records none, even when it asks.
    reader.post("/v1/recall", json={"query": "what hub does sarah have", "record_use": True})
    assert mem.get(fact_id).use_count == 0
    # The same key over MCP: recall works, every writing tool is refused and writes nothing.

    async def main() -> None:
        async with mcp_session(service.url, made.json()["key"]) as session:
            recalled = await session.call_tool("recall_memory", {"query": "hub"})
            assert not recalled.is_error and MARK in json.dumps(recalled.structured_content)
            for tool, args in [
                ("remember_turn", {"text": "my hub blinks"}),
                ("write_memory", {"text": "Sarah moved"}),
                ("forget_memory", {"memory_id": fact_id}),
                ("record_outcome", {"playbook_id": fact_id, "success": True}),
                ("consolidate_memory", {}),
            ]:
                result = await session.call_tool(tool, args)
                assert result.is_error and "permission_denied" in result.content[0].text, tool
                assert "read-only" in result.content[0].text

    anyio.run(main)
    assert [m.id for m in mem.list("semantic")] == [fact_id] and mem.list("episodic") == []
    assert mem.get(fact_id).use_count == 0  # MCP's recall counted no use either
    # A bad scope or lifetime is refused and makes no key.
    before = len(service.keys.list("sarah"))
    for body in ({"scope": "admin"}, {"scope": "owner"}, {"expires_in_s": 5}):
        assert admin.post("/v1/keys", json={"user_id": "sarah", **body}).status_code == 422, body
    assert len(service.keys.list("sarah")) == before


def test_an_expired_key_opens_nothing_and_says_so(service):
    expired = add_key(service, "sarah", expires_in=timedelta(seconds=-1))
    response = service.client(key=expired).get("/v1/me")
    assert response.status_code == 401 and response.json()["message"] == "key expired"
    mcp = httpx.post(
        f"{service.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {expired}", "Accept": "application/json, text/event-stream"},
    )
    assert mcp.status_code == 401 and "key expired" in mcp.text
    anon = httpx.Client(base_url=service.url, timeout=30)
    service.clients.append(anon)
    signed = anon.post("/inspector/sign-in", data={"key": expired})
    assert signed.status_code == 401 and "expired" in signed.text
    # A session made while the key was live ends when the key expires.
    soon = add_key(service, "sarah", expires_in=timedelta(seconds=2))
    browser = sign_in(service, soon)
    assert browser.get("/inspector/semantic").status_code == 200
    time.sleep(2.2)
    assert browser.get("/inspector/semantic").headers["location"] == "/inspector/sign-in?ended=expired"


def test_admin_exports_then_deletes_a_user_and_nothing_of_theirs_remains(service, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="engram.audit")
    sarah, admin = service.client("sarah"), service.client()
    turn = sarah.post("/v1/turns", json={"text": f"my {MARK} hub blinks red"}).json()
    old = sarah.post("/v1/memories", json={"text": f"Sarah owns a {MARK} v1"}).json()
    sarah.post("/v1/memories", json={"text": f"Sarah owns a {MARK} v2", "supersedes_id": old["id"]})
    doomed = sarah.post("/v1/memories", json={"text": f"Sarah's {MARK} PIN is 1234"}).json()
    sarah.delete(f"/v1/memories/{doomed['id']}").raise_for_status()
    sarah.post("/v1/recall", json={"query": f"which {MARK} does sarah own"}).raise_for_status()  # use counts
    service.client("bob").post("/v1/memories", json={"text": "Bob owns a kettle"}).raise_for_status()
    browser = sign_in(service, service.user_keys["sarah"])

    # Export: the user's rows, tombstones and keys in the export format; another store imports it.
    assert sarah.get("/v1/admin/users/sarah/export").status_code == 403  # admin only
    exported = admin.get("/v1/admin/users/sarah/export")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/x-ndjson"
    records = [json.loads(line) for line in exported.text.splitlines()]
    trailer = records[-1]["engram_export_end"]
    assert trailer["counts"] == {"episodic": 1, "semantic": 2, "tombstones": 1, "keys": 1}
    assert "bob" not in exported.text and "kettle" not in exported.text
    assert {r["memory"]["id"] for r in records if "memory" in r} >= {turn["id"], old["id"]}
    from engram import Engram

    copy = Engram.open(f"sqlite:///{tmp_path / 'copy.db'}", rerank=False, late_interaction=False)
    try:
        assert import_store(copy, io.StringIO(exported.text))["semantic"] == 2
    finally:
        copy.close()

    # Delete: guarded by ?confirm=, admin only; then nothing of theirs is left in the file.
    assert admin.delete("/v1/admin/users/sarah").status_code == 422
    mistyped = admin.delete("/v1/admin/users/sarah", params={"confirm": "sara"})
    assert mistyped.status_code == 409 and "confirm must repeat" in mistyped.json()["message"]
    assert sarah.delete("/v1/admin/users/sarah", params={"confirm": "sarah"}).status_code == 403
    assert sarah.get("/v1/me").status_code == 200  # nothing was deleted by the refused calls
    deleted = admin.delete("/v1/admin/users/sarah", params={"confirm": "sarah"})
    assert deleted.status_code == 200, deleted.text
    counts = deleted.json()["deleted"]
    assert counts["memories"] == 3 and counts["tombstones"] == 1 and counts["keys"] == 1
    assert counts["sessions"] == 1
    assert sarah.get("/v1/me").status_code == 401  # the key stops at once
    assert browser.get("/inspector/semantic").headers["location"] == "/inspector/sign-in?ended=ended"
    needles = ["sarah", MARK, turn["id"], old["id"], doomed["id"]]
    assert sqlite_leftovers(service.engram.store.path, needles, "sarah", words=[MARK]) == {}
    assert [m.text for m in service.engram.for_user("bob").list("semantic")] == ["Bob owns a kettle"]
    # Idempotent: again, nothing is deleted; the export now finds no such user.
    again = admin.delete("/v1/admin/users/sarah", params={"confirm": "sarah"})
    assert again.status_code == 200 and again.json()["deleted"] == {}
    assert admin.get("/v1/admin/users/sarah/export").status_code == 404
    # One audit record per deletion: who asked and how many, no content.
    audits = [r.getMessage() for r in caplog.records if r.name == "engram.audit"]
    assert len(audits) == 2 and "deleted user 'sarah'" in audits[0] and "admin key key_" in audits[0]
    assert not any(MARK in a for a in audits)


def test_stdio_mcp_honours_a_read_only_key_and_refuses_an_expired_one(tmp_path, service):
    import os
    import subprocess
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    db = service.engram.store.path
    read_key, _ = service.keys.create("bob", scope="read")
    service.engram.for_user("bob").write(f"Bob keeps a {MARK}")

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "engram", "mcp", "--store", f"sqlite:///{db}"],
            env={**os.environ, "ENGRAM_API_KEY": read_key, "ENGRAM_HOME": str(tmp_path)},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            recalled = await session.call_tool("recall_memory", {"query": "what does bob keep"})
            assert not recalled.is_error and MARK in json.dumps(recalled.structured_content)
            refused = await session.call_tool("write_memory", {"text": "Bob moved"})
            assert refused.is_error and "read-only" in refused.content[0].text

    anyio.run(main)
    assert [m.text for m in service.engram.for_user("bob").list("semantic")] == [f"Bob keeps a {MARK}"]
    expired = add_key(service, "bob", expires_in=timedelta(seconds=-1))
    env = {**os.environ, "ENGRAM_API_KEY": expired, "ENGRAM_HOME": str(tmp_path)}
    ran = subprocess.run(
        [sys.executable, "-m", "engram", "mcp", "--store", f"sqlite:///{db}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 1 and "ENGRAM_API_KEY: key expired" in ran.stderr


def test_the_inspector_lets_a_read_only_key_look_and_its_forms_refuse_it(service):
    fact = service.engram.for_user("sarah").write(f"Sarah keeps a {MARK}")
    read_key, _ = service.keys.create("sarah", scope="read")
    browser = sign_in(service, read_key)
    page = browser.get(f"/inspector/memory/{fact.id}")
    assert page.status_code == 200 and MARK in page.text
    assert f"/memory/{fact.id}/forget" not in page.text  # no form is offered to it
    session = browser.cookies["engram_inspector"].encode()  # the form's token, as its page would carry it
    token = hmac.new(session, b"engram-inspector-form", hashlib.sha256).hexdigest()
    asked = browser.get(f"/inspector/memory/{fact.id}/forget")
    posted = browser.post(f"/inspector/memory/{fact.id}/forget", data={"token": token})
    corrected = browser.post(
        f"/inspector/memory/{fact.id}/correct",
        data={"text": "Sarah keeps nothing", "contradiction": "natural", "confirm": "yes", "token": token},
    )
    for refused in (asked, posted, corrected):  # the same rule as REST and MCP
        assert refused.status_code == 403 and "read-only" in refused.text
    assert service.engram.for_user("sarah").get(fact.id).superseded_by is None


def test_an_erasure_stops_the_users_running_import_and_forgets_their_session(make_service):
    """Work that started before the erasure writes nothing after it: the user's import job stops at
    its next chunk and what it wrote meanwhile goes too; a new key for the same id gets no context
    from the erased session's last turn."""
    with make_service(name="erase_busy.db", import_chunk=4) as svc:
        sarah, admin = svc.client("sarah"), svc.client()
        said = sarah.post("/v1/turns", json={"text": f"my {MARK} rash is back", "session_id": "s1"})
        assert said.status_code == 201
        document = {"semantic": [{"text": f"Sarah's fact {i} about her {MARK}"} for i in range(400)]}
        started = sarah.post(
            "/v1/import", json=document, params={"wait": 0}, headers={"Idempotency-Key": "big-import"}
        )
        assert started.status_code == 202, started.text  # still running when the erasure comes
        deleted = admin.delete("/v1/admin/users/sarah", params={"confirm": "sarah"})
        assert deleted.status_code == 200, deleted.text
        mem = svc.engram.for_user("sarah")
        assert mem.list("semantic", limit=1000) == [] and mem.list("episodic") == []
        time.sleep(0.5)  # a chunk the job had in hand lands or not: either way nothing stays
        assert mem.list("semantic", limit=1000) == []
        again = svc.client(key=svc.keys.create("sarah")[0])
        turn = again.post("/v1/turns", json={"text": "hello again", "session_id": "s1"})
        assert turn.status_code == 201 and turn.json()["context"] is None
        assert again.get("/v1/import/big-import").status_code == 404  # its report went with them
