"""A LangGraph graph whose long-term memory is Engram: ``EngramStore`` is handed to the graph at compile
time, and its node reads and writes memories through ``runtime.store`` as with any LangGraph store.

Run it: ``pip install -e '.[langgraph]' && python examples/langgraph_store.py``
(no LLM needed: the node answers with the best memory recall finds).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from engram import Engram
from engram.adapters.langgraph_store import EngramStore


class Chat(TypedDict):
    user_id: str
    message: str
    answer: str


def assistant(state: Chat, runtime: Runtime[None]) -> dict[str, str]:
    """``remember <key>: <fact>`` stores (or replaces) a fact; anything else is answered from memory."""
    assert runtime.store is not None
    facts = ("users", state["user_id"], "facts")
    message = state["message"]
    if message.startswith("remember "):
        key, _, fact = message.removeprefix("remember ").partition(": ")
        runtime.store.put(facts, key, {"text": fact})
        return {"answer": f"noted ({key})"}
    hits = runtime.store.search(facts, query=message, limit=1)
    return {"answer": hits[0].value["text"] if hits else "I don't know yet"}


def main() -> None:
    with tempfile.TemporaryDirectory() as home, Engram.open(str(Path(home) / "engram.db")) as engram:
        store = EngramStore(engram)
        graph = StateGraph(Chat).add_node("assistant", assistant)
        app = graph.add_edge(START, "assistant").add_edge("assistant", END).compile(store=store)

        def say(user_id: str, message: str) -> str:
            answer = str(app.invoke({"user_id": user_id, "message": message, "answer": ""})["answer"])
            print(f"{user_id}> {message}\n  {answer}")
            return answer

        say("sarah", "remember home: Sarah lives in Edinburgh")
        say("sarah", "remember diet: Sarah is vegetarian")
        say("sarah", "remember home: Sarah moved to Glasgow in May")  # supersedes the old fact
        say("bob", "remember home: Bob lives in Oslo")
        assert say("sarah", "where does she live now?") == "Sarah moved to Glasgow in May"
        assert say("sarah", "can I order her a steak?") == "Sarah is vegetarian"

        # The same memories, as Engram sees them: the old home is kept in the fact's history.
        sarah = engram.for_user("sarah")
        current = store.get(("users", "sarah", "facts"), "home")
        assert current is not None
        live = next(m for m in sarah.list("semantic") if m.text == current.value["text"])
        print("history of 'home':", [m.text for m in sarah.history(live.id)])
        print("namespaces:", store.list_namespaces())


if __name__ == "__main__":
    main()
