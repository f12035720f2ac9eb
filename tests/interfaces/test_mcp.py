"""MCP through the official client: streamable HTTP against the running server, and stdio."""

import json
import os
import sys

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {"recall_memory", "write_memory", "forget_memory"}


async def _exercise(session: ClientSession) -> dict:
    """List the tools and call each; return what a client would see."""
    await session.initialize()
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
    hits = recalled.structured_content["hits"]
    assert [h["memory"]["id"] for h in hits] == [new_id] and "explain" in hits[0]
    history = await session.call_tool(
        "recall_memory", {"query": "where does sarah live", "include_superseded": True}
    )
    assert old_id in {h["memory"]["id"] for h in history.structured_content["hits"]}
    bad = await session.call_tool("write_memory", {"text": ""})
    assert bad.is_error and "invalid_input" in bad.content[0].text
    again = await session.call_tool("write_memory", {"text": "x", "supersedes_id": old_id})
    assert again.is_error and "already superseded" in again.content[0].text
    forgotten = await session.call_tool("forget_memory", {"memory_id": new_id})
    assert forgotten.structured_content["forgotten"]["id"] == new_id
    missing = await session.call_tool("forget_memory", {"memory_id": new_id})
    assert missing.is_error and "not_found" in missing.content[0].text
    return {"old_id": old_id}


def test_streamable_http_with_bearer_key(service):
    async def main():
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {service.user_keys['sarah']}"}, timeout=60
            ) as http,
            streamable_http_client(f"{service.url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await _exercise(session)

    anyio.run(main)
    # the writes landed in sarah's memory, not bob's
    assert service.engram.for_user("sarah").list("semantic", include_superseded=True)
    assert service.engram.for_user("bob").list("semantic", include_superseded=True) == []


def test_user_path_must_match_the_key(service):
    async def call(path: str, key: str) -> int:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
            streamable_http_client(f"{service.url}{path}", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
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
            await _exercise(session)

    anyio.run(main)
    rows = service.engram.for_user("bob").list("semantic", include_superseded=True)
    assert [r.text for r in rows] == ["Sarah lives in Bristol"]  # the forgotten one is gone; bob's tenant
    assert json.dumps([r.user_id for r in rows]) == '["bob"]'
