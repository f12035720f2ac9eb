"""LangMem's own memory tools (create_manage_memory_tool, create_search_memory_tool) on EngramStore: what
an agent built with LangMem does to its long-term memory lands in Engram, per user."""

from __future__ import annotations

import json
import warnings

from engram import Engram
from engram.adapters.langgraph_store import EngramStore

with warnings.catch_warnings():  # langmem 0.0.30's trustcall imports Send from where LangGraph 1.x moved it
    warnings.simplefilter("ignore", DeprecationWarning)
    from langmem import create_manage_memory_tool, create_search_memory_tool

NAMESPACE = ("users", "{langgraph_user_id}", "facts")


def test_langmem_tools_keep_memories_in_engram(eng: Engram):
    store = EngramStore(eng)
    manage = create_manage_memory_tool(namespace=NAMESPACE, store=store)
    search = create_search_memory_tool(namespace=NAMESPACE, store=store)
    sarah = {"configurable": {"langgraph_user_id": "sarah"}}
    bob = {"configurable": {"langgraph_user_id": "bob"}}

    created = manage.invoke({"content": "Sarah prefers morning meetings", "action": "create"}, config=sarah)
    memory_id = created.split()[-1]
    manage.invoke({"content": "Bob works night shifts", "action": "create"}, config=bob)
    manage.invoke(
        {"content": "Sarah prefers afternoon meetings", "action": "update", "id": memory_id}, config=sarah
    )

    found = json.loads(search.invoke({"query": "when does she like to meet?"}, config=sarah))
    assert [(m["key"], m["value"]) for m in found] == [
        (memory_id, {"content": "Sarah prefers afternoon meetings"})
    ]
    # in Engram: one live fact of Sarah's, superseding the first; Bob's apart
    facts = eng.for_user("sarah").list("semantic", include_superseded=True)
    assert [m.text for m in facts] == ["Sarah prefers afternoon meetings", "Sarah prefers morning meetings"]
    assert [m.text for m in eng.for_user("bob").list("semantic")] == ["Bob works night shifts"]

    manage.invoke({"action": "delete", "id": memory_id}, config=sarah)
    assert json.loads(search.invoke({"query": "meetings"}, config=sarah)) == []
    assert eng.for_user("sarah").list("semantic", include_superseded=True) == []
