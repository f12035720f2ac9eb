"""LangChain over Engram: a chat history that stores each user turn in Engram (``remember_turn``), and a
retriever that recalls them, with the facts, as ``Document``s carrying score and event time.

Run it: ``pip install -e '.[langchain]' && python examples/langchain_memory.py``
(no LLM needed: a function stands in for the chat model).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from engram import Engram
from engram.adapters.langchain import EngramChatMessageHistory, EngramRetriever


def model(messages: list[BaseMessage]) -> AIMessage:
    """Stands in for a chat model: it only counts what it was shown."""
    return AIMessage(f"(a reply to {len(messages)} messages)")


def main() -> None:
    with tempfile.TemporaryDirectory() as home, Engram.open(str(Path(home) / "engram.db")) as engram:
        sarah = engram.for_user("sarah")
        sarah.write("Sarah is allergic to peanuts", fact_type="constraint")

        history = EngramChatMessageHistory(sarah, session_id="trip-planning")
        for text in ["I'm flying to Lisbon on the 12th", "window seat please, and no nuts on board"]:
            history.add_messages([HumanMessage(text)])
            history.add_messages([model(history.messages)])
        print("history:", [(type(m).__name__, m.content) for m in history.messages])

        retriever = EngramRetriever(memory=sarah, k=3)
        docs = retriever.invoke("does Sarah have any food allergies?")
        for doc in docs:
            meta = doc.metadata  # id, memory_type, score, confidence, rank, event_time
            confidence = meta["confidence"]
            print(f"{meta['rank']}. {doc.page_content!r} confidence={confidence:.2f}", meta["event_time"])
        assert docs[0].page_content == "Sarah is allergic to peanuts"
        assert "Lisbon" in retriever.invoke("where is she flying?")[0].page_content


if __name__ == "__main__":
    main()
