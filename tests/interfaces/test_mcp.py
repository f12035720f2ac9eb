"""MCP through the official client: streamable HTTP against the running server, and stdio."""

import json
import os
import subprocess
import sys

import anyio
import apsw
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.interfaces.conftest import mcp_session

TOOLS = {"remember_turn", "recall_memory", "write_memory", "forget_memory"}


async def _exercise(session: ClientSession) -> dict:
    """List the tools and call each (on an initialized session); return what a client would see."""
    listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) >= TOOLS
    assert (
        "supersedes_id" in tools["write_memory"].description and "harsh" in tools["write_memory"].description
    )
    old = await session.call_tool("write_memory", {"text": "Sarah lives in Bristol"})
    assert not old.is_error, old
    old_id = old.structured_content["memory"]["id"]
    new = await session.call_tool(
        "write_memory",
        {"text": "Sarah lives in Edinburgh", "supersedes_id": old_id, "contradiction": "natural"},
    )
    new_id = new.structured_content["memory"]["id"]
    recalled = await session.call_tool(
        "recall_memory", {"query": "where does sarah live", "memory_types": ["semantic"]}
    )
    hits = recalled.structured_content["hits"]  # the compact view by default: no row, no explain
    assert [h["id"] for h in hits] == [new_id] and "explain" not in hits[0]
    assert set(hits[0]) >= {"id", "type", "text", "event_time", "confidence"}
    full = await session.call_tool(
        "recall_memory", {"query": "where does sarah live", "memory_types": ["semantic"], "view": "full"}
    )
    assert [h["memory"]["id"] for h in full.structured_content["hits"]] == [new_id]
    assert "explain" in full.structured_content["hits"][0]
    history = await session.call_tool(
        "recall_memory", {"query": "where does sarah live", "include_superseded": True}
    )
    assert old_id in {h["id"] for h in history.structured_content["hits"]}
    bad = await session.call_tool("write_memory", {"text": ""})
    assert bad.is_error and "invalid_input" in bad.content[0].text
    blank = await session.call_tool("recall_memory", {"query": "   "})  # refused by the engine
    assert blank.is_error and blank.content[0].text.startswith("invalid_input: "), blank.content[0].text
    again = await session.call_tool("write_memory", {"text": "x", "supersedes_id": old_id})
    assert again.is_error and "already superseded" in again.content[0].text
    forgotten = await session.call_tool("forget_memory", {"memory_id": new_id})
    assert forgotten.structured_content["forgotten"]["id"] == new_id
    missing = await session.call_tool("forget_memory", {"memory_id": new_id})
    assert missing.is_error and "not_found" in missing.content[0].text
    return {"old_id": old_id}


def test_streamable_http_with_bearer_key(service):
    async def main():
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            await _exercise(session)

    anyio.run(main)
    # the writes landed in sarah's memory, not bob's
    assert service.engram.for_user("sarah").list("semantic", include_superseded=True)
    assert service.engram.for_user("bob").list("semantic", include_superseded=True) == []


def test_a_fact_written_over_mcp_cites_its_turns_and_outdates_them(service):
    # write_memory took no supporting_episode_ids: nothing tied the Bristol turn to the superseded fact,
    # and "where do I live?" kept answering Bristol over MCP (an outside review's repro).
    carol_key = service.keys.create("carol")[0]

    async def main():
        async with mcp_session(service.url, carol_key) as session:

            async def call(tool: str, arguments: dict) -> dict:
                result = await session.call_tool(tool, arguments)
                assert not result.is_error, result
                return result.structured_content

            bristol = (await call("remember_turn", {"text": "we live in Bristol btw"}))["memory"]["id"]
            moved = (await call("remember_turn", {"text": "we moved to Leith last week!"}))["memory"]["id"]
            old = await call(
                "write_memory", {"text": "Carol lives in Bristol", "supporting_episode_ids": [bristol]}
            )
            new = await call(
                "write_memory",
                {
                    "text": "Carol lives in Leith, Edinburgh",
                    "supersedes_id": old["memory"]["id"],
                    "contradiction": "natural",
                    "supporting_episode_ids": [moved],
                },
            )
            assert new["memory"]["supporting_episode_ids"] == [moved]
            hits = (await call("recall_memory", {"query": "where do I live?"}))["hits"]
            ranked = [h["id"] for h in hits]
            assert ranked.index(new["memory"]["id"]) < ranked.index(bristol)
            assert {h["id"]: h.get("outdated_by") for h in hits}[bristol] == new["memory"]["id"]
            refused = await session.call_tool(
                "write_memory", {"text": "x", "supporting_episode_ids": ["epi_nope"] * 101}
            )
            assert refused.is_error

    anyio.run(main)


def test_user_path_must_match_the_key(service):
    async def call(path: str, key: str) -> int:
        async with mcp_session(service.url, key, path) as session:
            result = await session.call_tool("write_memory", {"text": "via user path"})
            return result.structured_content["memory"]["user_id"]

    assert anyio.run(call, "/mcp/sarah", service.user_keys["sarah"]) == "sarah"
    for path, key in [("/mcp/bob", service.user_keys["sarah"]), ("/mcp/sarah", service.admin_key)]:
        r = httpx2.post(
            f"{service.url}{path}",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"},
        )
        assert r.status_code == 403, (path, r.text)
    assert service.engram.for_user("bob").list("semantic") == []


def test_stdio_with_user_key(tmp_path, service):
    db = service.engram.store.path

    async def main():
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "engram", "mcp", "--store", f"sqlite:///{db}"],
            env={**os.environ, "ENGRAM_API_KEY": service.user_keys["bob"], "ENGRAM_HOME": str(tmp_path)},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await _exercise(session)

    anyio.run(main)
    rows = service.engram.for_user("bob").list("semantic", include_superseded=True)
    assert [r.text for r in rows] == ["Sarah lives in Bristol"]  # the forgotten one is gone; bob's tenant
    assert json.dumps([r.user_id for r in rows]) == '["bob"]'
    # a key and a user that disagree: refused, not the key's memory opened under the other name
    env = {**os.environ, "ENGRAM_API_KEY": service.user_keys["bob"], "ENGRAM_USER": "sarah"}
    mismatch = subprocess.run(
        [sys.executable, "-m", "engram", "mcp", "--store", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        env={**env, "ENGRAM_HOME": str(tmp_path)},
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert mismatch.returncode == 1 and "ENGRAM_USER says sarah" in mismatch.stderr


def _tools_list(url: str, key: str, host: str) -> httpx2.Response:
    return httpx2.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
            "Host": host,
        },
    )


def test_configured_hosts_reach_mcp_and_others_are_refused(make_service):
    """Behind a reverse proxy the Host header is the proxy's name: ENGRAM_MCP_ALLOWED_HOSTS lets it in
    (issue 12, item 23); the DNS-rebinding guard still refuses every other name."""
    with make_service("proxied.db", mcp_allowed_hosts=["mem.example.com", "alt.example.com:*"]) as svc:
        key = svc.user_keys["sarah"]
        for host in ("mem.example.com", "alt.example.com:8443", f"127.0.0.1:{svc.url.rsplit(':', 1)[1]}"):
            r = _tools_list(svc.url, key, host)
            assert r.status_code == 200, (host, r.text)
            assert {t["name"] for t in r.json()["result"]["tools"]} >= TOOLS
        for host in ("evil.example.com", "mem.example.com:8443", "mem.example.com.evil.net"):
            assert _tools_list(svc.url, key, host).status_code == 421, host
    with make_service("direct.db") as svc:  # not configured: loopback only, as before
        assert _tools_list(svc.url, svc.user_keys["sarah"], "mem.example.com").status_code == 421


def test_mcp_tools_refuse_loose_types_and_invisible_text(service, caplog):
    async def main():
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            refused = [
                ("recall_memory", {"query": "q", "k": True}),
                ("recall_memory", {"query": "q", "k": "5"}),
                ("recall_memory", {"query": "q", "k": 101}),
                ("recall_memory", {"query": "\ufeff"}),
                ("write_memory", {"text": "\u200b\u200b"}),
                ("write_memory", {"text": "f", "valid_to": 845}),
                ("write_memory", {"text": "f", "confidence": "0.5"}),
                (
                    "write_memory",
                    {"text": "f", "valid_from": "2024-02-01T00:00:00Z", "valid_to": "2024-01-01"},
                ),
                (
                    "write_memory",
                    {"text": "", "memory_type": "procedural", "name": "p", "description": "x" * 20_000},
                ),
                (
                    "write_memory",
                    {
                        "text": "",
                        "memory_type": "procedural",
                        "name": "p",
                        "steps": [{"order": "1", "instruction": "a"}],
                    },
                ),
            ]
            for tool, arguments in refused:
                result = await session.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments, result)
            ok = await session.call_tool(
                "write_memory", {"text": "f", "valid_to": "2030-01-01T00:00:00+02:00"}
            )
            assert ok.structured_content["memory"]["valid_to"] == "2029-12-31T22:00:00Z"
            # a failure of the store reaches the client without its path or the driver's words
            with apsw.Connection(str(service.engram.store.path)) as conn:
                conn.execute("ALTER TABLE tombstones RENAME TO tombstones_gone")
            failed = await session.call_tool(
                "forget_memory", {"memory_id": ok.structured_content["memory"]["id"]}
            )
            assert failed.is_error
            message = failed.content[0].text
            assert message.endswith("storage_error: the store failed; the server log has the details")
            assert str(service.engram.store.path.parent) not in message and "tombstones" not in message

    anyio.run(main)
    assert "no such table: tombstones" in caplog.text
    assert [m.text for m in service.engram.for_user("sarah").list("semantic")] == ["f"]


def test_remember_turn_stores_the_turn_with_the_rest_routes_checks(service):
    """remember_turn is POST /v1/turns as a tool: the same fields, the same refusals, the same row."""

    async def main() -> dict:
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert "verbatim" in tools["remember_turn"].description
            first = await session.call_tool(
                "remember_turn",
                {
                    "text": "my hub shows E-4021 since the update",
                    "session_id": "chat-7",
                    "at": "2025-03-01T10:00:00+01:00",
                    "metadata": {"assistant_context": "What does the hub's display show?"},
                },
            )
            assert not first.is_error, first
            reply = await session.call_tool("remember_turn", {"text": "yes, twice", "session_id": "chat-7"})
            refused = [
                {"text": ""},
                {"text": "\u200b\u200b"},
                {"text": "x" * 16_001},
                {"text": 5},
                {"text": "hi", "session_id": "s" * 201},
                {"text": "hi", "at": 845},
                {"text": "hi", "at": "yesterday"},
                {"text": "hi", "metadata": "not an object"},
            ]
            for arguments in refused:
                result = await session.call_tool("remember_turn", arguments)
                assert result.is_error, (arguments, result)
            assert (
                "invalid_input" in (await session.call_tool("remember_turn", {"text": " "})).content[0].text
            )
            recalled = await session.call_tool(
                "recall_memory",
                {"query": "which error code does the hub show?", "memory_types": ["episodic"]},
            )
            return {
                "first": first.structured_content["memory"],
                "reply": reply.structured_content["memory"],
                "hits": recalled.structured_content["hits"],
            }

    got = anyio.run(main)
    first = got["first"]
    assert first["memory_type"] == "episodic" and first["user_id"] == "sarah"
    assert first["session_id"] == "chat-7" and first["timestamp"] == "2025-03-01T09:00:00Z"
    assert first["metadata"] == {"assistant_context": "What does the hub's display show?"}
    assert got["reply"]["context_id"] == first["id"]  # searched with the previous turn of its session
    assert got["hits"][0]["id"] == first["id"]
    episodes = service.engram.for_user("sarah").list("episodic")
    assert [m.text for m in episodes] == ["yes, twice", "my hub shows E-4021 since the update"]
    assert service.engram.for_user("bob").list("episodic") == []
    # the same turn over REST gives the same kind of row: one shape on both surfaces
    rest = service.client("sarah").post("/v1/turns", json={"text": "hi", "session_id": "chat-7"}).json()
    assert set(rest) == set(first)


def test_recall_is_compact_by_default_and_says_when_nothing_is_confident(service):
    """Five one-line memories recalled with k=5 cost a client at most 1,500 characters; a question
    about nothing stored comes back empty, with a note the model can act on."""
    sarah = service.engram.for_user("sarah")
    for text in (
        "Sarah owns a Lumio Hub v2",
        "Sarah lives in Leith, Edinburgh",
        "Sarah's dog Rex chews sensor cables",
        "Sarah prefers email to phone calls",
        "Sarah's router is a Fritzbox 7590",
    ):
        sarah.write(text)

    async def main():
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            everything = await session.call_tool(
                "recall_memory",
                {"query": "what do you know about Sarah's home?", "k": 5, "min_confidence": 0},
            )
            nothing = await session.call_tool("recall_memory", {"query": "how many moons does Jupiter have?"})
            return everything, nothing

    everything, nothing = anyio.run(main)
    assert len(everything.structured_content["hits"]) == 5
    assert len(everything.content[0].text) <= 1500, everything.content[0].text
    # the text a model reads is the structured result as JSON on one line (the SDK indents it)
    assert json.loads(everything.content[0].text) == everything.structured_content
    assert "\n" not in everything.content[0].text
    assert nothing.structured_content == {
        "hits": [],
        "note": "no stored memory matches with confidence >= 0.1: nothing relevant is known; "
        "answer without memory or ask the user (for a broad question, such as what is known about the "
        "user, recall again with min_confidence 0 to see the closest memories)",
    }


def test_argument_errors_are_in_our_words(service):
    """Issue 24: an argument a tool does not take was dropped without a word (a misspelt `querry`, an
    `as_of` on recall changed nothing), and a refused value read "Value error, ...", pydantic's words.
    Each refusal names the argument, says what is wrong, and writes nothing."""

    async def main() -> dict[str, str]:
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            calls = {
                "unknown": ("recall_memory", {"query": "hub", "as_of": "2024-01-01T00:00:00Z"}),
                "misspelt": ("write_memory", {"text": "Sarah has a cat", "metadata": {"a": 1}}),
                "value": ("recall_memory", {"query": "hub", "k": "5"}),
                "tool": ("recall_memories", {"query": "hub"}),
            }
            answers = {}
            for what, (tool, arguments) in calls.items():
                result = await session.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments, result)
                answers[what] = result.content[0].text
            return answers

    answers = anyio.run(main)
    assert answers["unknown"].startswith("invalid_input: as_of: not an argument of recall_memory (it takes ")
    assert answers["misspelt"].startswith("invalid_input: metadata: not an argument of write_memory")
    assert answers["value"] == "invalid_input: k: expected a number"
    assert answers["tool"].startswith("invalid_input: no tool named 'recall_memories' (tools: ")
    assert not any("Value error" in a or "validation error" in a for a in answers.values())
    assert service.engram.for_user("sarah").list("semantic") == []


def test_tool_schemas_are_small_and_the_server_still_refuses_invisible_text(service):
    """An outside bug hunt: write_memory's schema was 28 KB (~9k tokens a call), nearly all of it the
    visible-text rule's character class, twice (a playbook step's instruction and tool). The schemas a
    model reads leave the rule out; the server still applies it."""
    from engram.agent.tools import tool_schemas

    async def main() -> tuple[dict[str, int], str]:
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            sizes = {t.name: len(json.dumps(t.input_schema)) for t in (await session.list_tools()).tools}
            steps = [{"order": 1, "instruction": "\u200b"}]
            playbook = {"memory_type": "procedural", "name": "reset", "text": "a playbook", "steps": steps}
            refused = await session.call_tool("write_memory", playbook)
            return sizes, refused.content[0].text if refused.is_error else ""

    sizes, refused = anyio.run(main)
    assert max(sizes.values()) < 4000, sizes
    assert "invalid_input" in refused and "instruction" in refused
    assert all(len(json.dumps(tool)) < 4000 for tool in tool_schemas())  # the agent's tools too
