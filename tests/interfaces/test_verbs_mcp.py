"""The recall filters and playbook outcomes through the official MCP client, against a real server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio

from tests.interfaces.conftest import mcp_session


def test_recall_memory_filters_and_record_outcome(service):
    sarah = service.engram.for_user("sarah")
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    web = sarah.remember_turn("the hub lost wifi", at=t0, session_id="s1", metadata={"ch": "web"})
    app = sarah.remember_turn("the hub lost wifi again", at=t0 + timedelta(days=2), session_id="s2")
    playbook = sarah.write("", memory_type="procedural", name="Restart the hub", trigger_text="hub offline")
    bobs = service.engram.for_user("bob").write("", memory_type="procedural", name="Restart the hub")

    async def main():
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:

            async def recall(**filters):
                args = {"query": "the hub lost wifi", "min_confidence": 0.0, **filters}
                result = await session.call_tool("recall_memory", args)
                assert not result.is_error, result.content[0].text
                return [h["id"] for h in result.structured_content["hits"]]

            found = {
                "session": await recall(session_id="s1"),
                "metadata": await recall(metadata={"ch": "web"}),
                "time": await recall(
                    time_from=(t0 + timedelta(days=1)).isoformat(),
                    time_to=(t0 + timedelta(days=30)).isoformat(),
                ),
            }
            bad = await session.call_tool("recall_memory", {"query": "wifi", "metadata": {"ch": ["web"]}})
            worked = await session.call_tool("record_outcome", {"playbook_id": playbook.id, "success": True})
            foreign = await session.call_tool("record_outcome", {"playbook_id": bobs.id, "success": True})
            not_bool = await session.call_tool(
                "record_outcome", {"playbook_id": playbook.id, "success": "yes"}
            )
            return found, bad, worked, foreign, not_bool

    found, bad, worked, foreign, not_bool = anyio.run(main)
    assert found == {"session": [web.id], "metadata": [web.id], "time": [app.id]}
    assert bad.is_error and "invalid_input" in bad.content[0].text
    assert worked.structured_content["memory"]["success_count"] == 1
    assert foreign.is_error and "not_found" in foreign.content[0].text
    assert not_bool.is_error and "invalid_input" in not_bool.content[0].text
    assert sarah.get(playbook.id).success_count == 1
    assert service.engram.for_user("bob").get(bobs.id).success_count == 0
